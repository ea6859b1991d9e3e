"""What an attached replica costs its primary: claim-and-ack throughput and the primary's CPU per
job, with no replica, with one asynchronous replica, and with one under `--sync-replicas 1`.

Each run starts a primary on a fresh file (`--sync 250`, or `always` with --always) and, for the
replicated rows, a replica (`--sync 250`) following it; loads --jobs jobs, then --workers threads
each claim one job and ack it by id over a keep-alive connection until the queue is empty. Prints
jobs/s and the primary's CPU time (user + system, from /proc) per job; rows alternate, --runs times.

    .venv/bin/python bench/replication_cost.py [--jobs 3000] [--workers 4] [--runs 3] [--always]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TOKEN = "bench-token"
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 1 returning id")
ACK = "del jobs where id = $1 and owner = $2 require 1"


def start(*flags: str) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen([sys.executable, "-m", "fenecdb_server.cli", "--http", "127.0.0.1:0", *flags],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    for raw in proc.stderr:
        m = re.search(rb"listening on: http://[\d.]+:(\d+)", raw)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(m.group(1))
    raise RuntimeError("the server did not start")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post(conn: http.client.HTTPConnection, text: str, params: list) -> tuple[int, object]:
    conn.request("POST", "/query", body=json.dumps({"query": text, "params": params}))
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def run(where: str, mode: str, jobs: int, workers: int, sync: str) -> tuple[float, float]:
    procs = []
    try:
        flags = ["--file", os.path.join(where, f"p-{mode}.fenec"), "--sync", sync, "--auto-compact", "off"]
        if mode != "none":
            flags += ["--replication-token", TOKEN]
        if mode == "sync":
            flags += ["--sync-replicas", "1"]
        p, port = start(*flags)
        procs.append(p)
        if mode != "none":
            r, _ = start("--file", os.path.join(where, f"r-{mode}.fenec"), "--replication-token", TOKEN,
                         "--replica-of", f"http://127.0.0.1:{port}", "--auto-compact", "off")
            procs.append(r)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        post(conn, JOBS, [])
        for at in range(0, jobs, 500):
            docs = ", ".join(f"{{payload: {i}, run_at: now(), attempts: 0}}" for i in range(at, min(jobs, at + 500)))
            assert post(conn, f"put jobs [{docs}]", [])[0] == 200
        done = [0] * workers

        def work(n: int) -> None:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            owner = f"w{n}"
            while True:
                status, rows = post(c, CLAIM, [owner])
                if status != 200 or not rows:
                    return
                assert isinstance(rows, list)
                post(c, ACK, [rows[0]["id"], owner])
                done[n] += 1

        threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
        cpu0 = cpu_s(p.pid)
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - began
        cpu = cpu_s(p.pid) - cpu0
        total = sum(done)
        return total / took, cpu / total * 1e6
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--always", action="store_true", help="the primary under --sync always")
    args = parser.parse_args()
    sync = "always" if args.always else "250"
    results: dict[str, list[tuple[float, float]]] = {"none": [], "async": [], "sync": []}
    with tempfile.TemporaryDirectory() as where:
        for _ in range(args.runs):
            for mode in results:
                results[mode].append(run(where, mode, args.jobs, args.workers, sync))
                for name in os.listdir(where):
                    os.remove(os.path.join(where, name))
    print(f"{args.jobs} jobs claimed and acked by {args.workers} workers, primary --sync {sync}")
    for mode, got in results.items():
        rates = ", ".join(f"{r:.0f}" for r, _ in got)
        cpus = ", ".join(f"{c:.0f}" for _, c in got)
        print(f"  replica {mode:5}: jobs/s {rates}; primary CPU us a job {cpus}")


if __name__ == "__main__":
    main()
