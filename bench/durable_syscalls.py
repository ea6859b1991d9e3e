"""Syscalls per write under `--sync always`, over HTTP: a fixed number of puts from N clients.

    python bench/durable_syscalls.py --clients 8 --writes 2000 [--strace] [--server PATH]

Starts `fenec-server --sync always` on a fresh file in a temporary directory (optionally under
`strace -f -c` counting futex, fsync, fdatasync, io_submit (an fdatasync started on the kernel's AIO),
io_getevents, write, pwrite64, pwritev2 and fallocate over the whole process and its threads), sends `--writes` puts in total from `--clients` client processes (one
keep-alive connection each, the next put sent when the last one is answered), stops the
server with SIGTERM and prints the counts per write and the writes per fsync or fdatasync. The counts do
not depend on the machine's speed the way a rate does, so runs on a shared machine compare;
the writes/s line is printed only as an indication.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TRACED = "futex,fsync,fdatasync,io_submit,io_getevents,write,pwrite64,pwritev2,fallocate"


def _client(address: tuple[str, int], n: int, tag: str, start: object) -> None:
    conn = http.client.HTTPConnection(*address, timeout=60)
    start.wait()  # type: ignore[attr-defined]
    for i in range(n):
        body = json.dumps({"query": "put jobs {tag: $1, n: $2}", "params": [tag, i]})
        conn.request("POST", "/query", body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"put answered {answer.status}")
    conn.close()


def _query(address: tuple[str, int], q: str) -> dict:
    conn = http.client.HTTPConnection(*address, timeout=60)
    conn.request("POST", "/query", body=json.dumps({"query": q}), headers={"Content-Type": "application/json"})
    answer = conn.getresponse()
    out = json.loads(answer.read())
    conn.close()
    return out


def _log_counts(address: tuple[str, int]) -> tuple[float, float]:
    """(records appended, syncs) since start, from /_metrics (servers without them: zeros)."""
    conn = http.client.HTTPConnection(*address, timeout=60)
    conn.request("GET", "/_metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    found = dict(re.findall(r"^(fenec_log_(?:records|syncs)_total) (\S+)$", text, flags=re.M))
    return float(found.get("fenec_log_records_total", 0)), float(found.get("fenec_log_syncs_total", 0))


def run(server: str, clients: int, writes: int, traced: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [server, "--file", os.path.join(tmp, "bench.fenec"), "--sync", "always",
                "--http", "127.0.0.1:0", "--auto-compact", "off"]
        out = os.path.join(tmp, "strace.txt")
        if traced:
            argv = ["strace", "-f", "-c", "--seccomp-bpf", "-o", out, "-e", f"trace={TRACED}", *argv]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        found: list[tuple[str, int]] = []
        ready = threading.Event()

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                m = re.search(r"listening on: http://([^\s:]+):(\d+)", line)
                if m:
                    found.append((m.group(1), int(m.group(2))))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        ready.wait(60)
        if not found:
            proc.kill()
            raise SystemExit("the server did not start")
        address = found[0]
        _query(address, "create collection jobs (tag text, n int)")
        records0, syncs0 = _log_counts(address)
        start = multiprocessing.Event()
        each = writes // clients
        procs = [multiprocessing.Process(target=_client, args=(address, each, f"c{k}", start))
                 for k in range(clients)]
        for p in procs:
            p.start()
        time.sleep(1.0)  # every client connected and waiting on `start`
        began = time.perf_counter()
        start.set()
        for p in procs:
            p.join()
        took = time.perf_counter() - began
        records1, syncs1 = _log_counts(address)
        server_pid = proc.pid
        if traced:  # strace's child is the server: stop it, and strace prints its table
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            server_pid = int(children[0])
        os.kill(server_pid, signal.SIGTERM)
        proc.wait(60)
        done = each * clients
        result: dict = {"clients": clients, "writes": done, "writes_per_s": round(done / took)}
        if syncs1 > syncs0:  # the server's own counters (/_metrics), without strace's slowing
            result["records_per_sync"] = round((records1 - records0) / (syncs1 - syncs0), 2)
        if traced:
            counts: dict[str, int] = {}
            for line in Path(out).read_text().splitlines():
                parts = line.split()
                if len(parts) >= 5 and parts[-1] in TRACED.split(",") and parts[3].isdigit():
                    counts[parts[-1]] = int(parts[3])
            result["per_write"] = {k: round(v / done, 2) for k, v in sorted(counts.items())}
            syncs = counts.get("fsync", 0) + counts.get("fdatasync", 0) + counts.get("io_submit", 0)
            result["writes_per_sync"] = round(done / max(syncs, 1), 2)  # start-up's few syncs included
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--strace", action="store_true", help="count syscalls with strace -f -c")
    ap.add_argument("--server", default=str(Path(sys.executable).parent / "fenec-server"))
    args = ap.parse_args()
    print(json.dumps(run(args.server, args.clients, args.writes, args.strace)))


if __name__ == "__main__":
    main()
