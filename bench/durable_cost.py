"""The server's CPU per durable put over HTTP, with the client's cost kept out of the way.

    .venv/bin/python bench/durable_cost.py [--sync always] [--connections 8] [--puts 20000]
                                           [--datasync thread|aio|inplace] [--rounds 3]

Starts `fenec-server --sync <sync> --busy-poll 0` on a fresh file in a temporary directory, opens
`--connections` keep-alive connections from this one process (raw sockets, the request bytes made
once), keeps one put in flight on each (the next sent as soon as its answer is read), and reads the
server's user and system CPU from /proc before and after `--puts` puts (after 2 000 to warm up).
It prints, per round, the rate and the server's user and system CPU per put.

Why not the Python client in eight processes, as `make queue-compare` runs its durable row: on a
2-core machine those eight processes share the CPUs with the server, so the row moves with their
scheduling as much as with the server's cost (bench/README.md, session 16). Here the client is
one process spending a few µs a put, and the busy poll is off (its spinning would count as the
server's CPU), so the figures are the server's own work a put.

`--datasync` picks where the fdatasyncs of a turn with several writes run (FENECDB_DATASYNC,
`storage/files.py`): on the thread of `storage/sync_thread.py` (the default where it was built),
on the kernel's AIO, or in place on the loop. The rounds alternate nothing: run it once per way,
and alternate the runs, to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from server_cost import wait_for_server  # run as a script: bench/ is on the path

PUT = "put jobs {payload: $1, run_at: now(), attempts: 0}"
SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
WARM = 2000


def request(body: dict) -> bytes:
    raw = json.dumps(body).encode()
    return (b"POST /query HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(raw), raw))


def answers(buf: bytes) -> tuple[int, bytes]:
    """How many whole answers `buf` starts with, and what is left after them."""
    n = 0
    while True:
        head = buf.find(b"\r\n\r\n")
        if head < 0:
            return n, buf
        at = buf.find(b"content-length: ", 0, head)
        if at < 0:
            raise RuntimeError(f"an answer without a content-length: {buf[:head]!r}")
        end = head + 4 + int(buf[at + 16:buf.find(b"\r\n", at)])
        if len(buf) < end:
            return n, buf
        if not buf.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"the server refused a put: {buf[:end]!r}")
        n += 1
        buf = buf[end:]


def cpu(pid: int) -> tuple[float, float]:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sync", default="always")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--puts", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--datasync", choices=["thread", "aio", "inplace"], default=None)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    if args.datasync:
        env["FENECDB_DATASYNC"] = args.datasync
    workdir = tempfile.mkdtemp(prefix="durable-cost-")
    server = shutil.which("fenec-server", path=os.path.dirname(sys.executable)) or "fenec-server"
    proc = subprocess.Popen([server, "--http", f"127.0.0.1:{port}", "--file", os.path.join(workdir, "q.fenec"),
                             "--sync", args.sync, "--busy-poll", "0", "--max-connections", "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_server(port, proc)
        conns = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(args.connections)]
        for c in conns:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        first = conns[0]
        first.sendall(request({"query": SCHEMA}))
        left = b""
        while not answers(left)[0]:
            left += first.recv(65536)
        put = request({"query": PUT, "params": [{"n": 1}]})
        sel = selectors.DefaultSelector()
        for c in conns:
            sel.register(c, selectors.EVENT_READ, c)

        def run(n: int) -> None:
            sent = done = 0
            bufs = {c: b"" for c in conns}
            for c in conns[:n]:
                c.sendall(put)
                sent += 1
            while done < n:
                ready = sel.select(timeout=60)
                if not ready:
                    raise RuntimeError("no answer within 60 s")
                for key, _ in ready:
                    c = key.data
                    data = c.recv(65536)
                    if not data:
                        raise RuntimeError("the server closed a connection")
                    got, bufs[c] = answers(bufs[c] + data)
                    done += got
                    for _ in range(got):
                        if sent < n:
                            c.sendall(put)
                            sent += 1

        run(WARM)
        for round_ in range(args.rounds):
            user0, sys0 = cpu(proc.pid)
            started = time.perf_counter()
            run(args.puts)
            wall = time.perf_counter() - started
            user1, sys1 = cpu(proc.pid)
            print(json.dumps({"round": round_ + 1, "sync": args.sync, "datasync": args.datasync or "default",
                              "connections": args.connections, "puts_per_s": round(args.puts / wall),
                              "server_user_us_per_put": round(1e6 * (user1 - user0) / args.puts, 1),
                              "server_system_us_per_put": round(1e6 * (sys1 - sys0) / args.puts, 1)}), flush=True)
        for c in conns:
            c.close()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
