"""The server's own CPU per claim over HTTP: a `fenec-server` child, one keep-alive connection, a
claim of 10 sent --claims times; the child's user+system CPU (from /proc) divided by the claims.

The client here is `http.client` from the standard library, so the figure is the server's alone
(its share of each request: the kernel's socket work, HTTP parsing, JSON, the engine, the answer).
`--src DIR` runs the server from another checkout's `server/src` (to measure a change against main
in one sitting); the engine's own share is `bench/claim_bytecodes.py` and `make queue-bench`.

`--door asgi` sends every request through the ASGI door instead of the direct path (the server
runs with `--access-log /dev/null`, which the direct path leaves to that door): the difference is
what the direct path saves, the access log's own lines included. `--get PATH` sends `GET PATH`
instead of the claims (the door's own cost, on a route of no data: `/_health`, `/_metrics`).

`--wakes` measures a wake cycle instead (the harness's wake row, `bench/compare/loadgen.py`
`wake_latency`): a worker's claim of 1 held (`Fenec-Wait`), a pause, a put on a connection of its
own, the job in the worker's hand, --claims times; the server runs on a file at its default
`--sync`, as the harness's, and with `--busy-poll 0`, so its count holds no spin that depends on time.

`--puts` measures a durable put instead (the harness's durable row, `bench/compare/fenec.py`'s put):
the server on a file under `--sync always` and `--busy-poll 0`, one put on one connection at a time,
--claims times; its sync thread's instructions are counted with its loop's.

`--callgrind` runs the server under valgrind's callgrind and prints its instructions a claim
instead (the counters zeroed after the warm-up, dumped after the claims): a count, not a time, so
it holds on a loaded machine.

    .venv/bin/python bench/server_cost.py [--claims 3000] [--src other/server/src] [--door direct|asgi]
                                          [--get /_health] [--wakes] [--puts] [--callgrind]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
# the harness's waiting worker's claim (bench/compare/fenec.py), its lease an hour: under valgrind the
# cycles outlast 30 s, and a lapsed lease would hand an old job to the next claim before the one put
WAIT_CLAIM = CLAIM.replace("limit 10", "limit 1").replace("30000", "3600000")
PUT = "put jobs {payload: $1, run_at: now(), attempts: 0}"
WAKE_PAUSE = 0.01  # the harness's pause between the held claim and the put (loadgen.WAKE_PAUSE)


def wait_for_server(port: int, proc: subprocess.Popen, seconds: float = 60) -> None:
    """Until the server started as `proc` accepts a connection on `port` (also bench/durable_cost.py)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("fenec-server did not start") from None
            time.sleep(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=int, default=3000)
    ap.add_argument("--src", default=None, help="a server/src to import the server from")
    ap.add_argument("--door", choices=("direct", "asgi"), default="direct",
                    help="asgi: every request through the ASGI door (--access-log /dev/null)")
    ap.add_argument("--get", default=None, help="send GET of this path instead of the claims (e.g. /_health)")
    ap.add_argument("--wakes", action="store_true", help="a wake cycle of a held claim, --claims times")
    ap.add_argument("--puts", action="store_true", help="a durable put (--sync always), --claims times")
    ap.add_argument("--callgrind", action="store_true", help="count the server's instructions (valgrind)")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, **({"PYTHONPATH": args.src} if args.src else {}))
    server = shutil.which("fenec-server", path=os.path.dirname(sys.executable)) or "fenec-server"
    door = ["--access-log", os.devnull] if args.door == "asgi" else []
    on_file = args.wakes or args.puts
    # a wake: a file at its default --sync, as the harness's; a put: under --sync always
    data = tempfile.mkdtemp(prefix="fenec-cost-") if on_file else ""
    command = [server, "--http", f"127.0.0.1:{port}", *door,
               *(["--busy-poll", "0", "--file", os.path.join(data, "q.fenec")] if on_file else []),
               *(["--sync", "always"] if args.puts else [])]
    dumps = tempfile.mkdtemp(prefix="fenec-callgrind-") if args.callgrind else ""
    if args.callgrind:  # the console script run by this interpreter, under valgrind
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}/out", sys.executable, *command]
    proc = subprocess.Popen(command, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_server(port, proc, 600 if args.callgrind else 60)
        conn = http.client.HTTPConnection("127.0.0.1", port)

        def query(body: dict) -> bytes:
            conn.request("POST", "/query", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            answer = conn.getresponse()
            data = answer.read()
            if answer.status != 200:  # a refused put leaves claims that find nothing: a count of nothing
                raise RuntimeError(f"the server answered {answer.status}: {data[:200]!r}")
            return data

        if on_file:
            query({"query": "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"})
        elif not args.get:
            query({"query": "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"})
            jobs = 10 * (args.claims + 300)
            query({"query": "put jobs $1",
                   "params": [[{"payload": {"n": i}, "run_at": 0, "attempts": 0} for i in range(jobs)]]})

        def get() -> bytes:
            conn.request("GET", str(args.get))
            answer = conn.getresponse()
            data = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"the server answered {answer.status}: {data[:200]!r}")
            return data

        worker = http.client.HTTPConnection("127.0.0.1", port)
        pause = 0.5 if args.callgrind else WAKE_PAUSE  # the claim held before the put, however slow the server
        done = [0]

        def wake() -> bytes:
            n = done[0] = done[0] + 1
            worker.request("POST", "/query", body=json.dumps({"query": WAIT_CLAIM, "params": ["w"]}).encode(),
                           headers={"Content-Type": "application/json", "Fenec-Wait": "30000"})
            time.sleep(pause)
            query({"query": PUT, "params": [{"n": n}]})
            answer = worker.getresponse()
            data = answer.read()
            rows = json.loads(data)
            if answer.status != 200 or len(rows) != 1 or rows[0]["payload"] != {"n": n}:
                raise RuntimeError(f"the worker was not handed the job just put: {answer.status} {data[:200]!r}")
            return data

        def one(params: list[str]) -> bytes:
            if args.wakes:
                return wake()
            if args.puts:
                return query({"query": PUT, "params": [{"n": 1}]})
            return get() if args.get else query({"query": CLAIM, "params": params})

        for _ in range(20 if args.wakes else 300):
            one(["warm"])

        def cpu() -> float:
            f = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

        if args.callgrind:
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        before, started = cpu(), time.perf_counter()
        for _ in range(args.claims):
            one(["w"])
        used, wall = cpu() - before, time.perf_counter() - started
        if args.callgrind:
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
            print(json.dumps({"claims": args.claims, "server_instructions_per_claim": round(_instructions(dumps) / args.claims),
                              "src": args.src or "installed", "door": args.door, "get": args.get,
                              "wakes": args.wakes, "puts": args.puts}))
            return 0
        print(json.dumps({"claims": args.claims, "server_cpu_us_per_claim": round(1e6 * used / args.claims),
                          "wall_us_per_claim": round(1e6 * wall / args.claims), "src": args.src or "installed",
                          "door": args.door}))
    finally:
        proc.terminate()
        proc.wait(30)
        if data:
            shutil.rmtree(data, ignore_errors=True)
    return 0


def _instructions(folder: str) -> int:
    """The instructions of the last callgrind dump in `folder` (its `totals:` or `summary:` line)."""
    last = max((os.path.join(folder, f) for f in os.listdir(folder)), key=os.path.getmtime)
    with open(last) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {last}")


if __name__ == "__main__":
    sys.exit(main())
