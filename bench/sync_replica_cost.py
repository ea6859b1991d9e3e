"""A durable write with one sync replica: its rate and its round trip, and the CPU each server spends on it.

Starts a primary (`--sync always --sync-replicas 1`) and a replica following it (`--sync always`), each
on a fresh file under --dir, then --writers processes each put one job a request over a keep-alive
connection for --seconds. Prints writes/s, the writers' median round trip, and each server's CPU time
(user + system, from /proc) per write, --runs times. With --dir on a tmpfs the fdatasyncs cost nothing
and what is left is the path itself: the hops of the stream, the replica and the ack.

    .venv/bin/python bench/sync_replica_cost.py [--writers 1] [--seconds 3] [--runs 3] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import tempfile
import time

from replication_cost import cpu_s, start  # run as a script: bench/ is on the path

TOKEN = "bench-token"
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
PUT = json.dumps({"query": "put jobs {payload: $1, run_at: now(), attempts: 0}", "params": [{"n": 1}]}).encode()


def get(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"authorization": f"Bearer {TOKEN}"})
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def writer(port: int, seconds: float, out: mp.Queue) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        conn.request("POST", "/query", body=PUT)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"a put answered {resp.status}")
        times.append(time.perf_counter() - t0)
    conn.close()
    times.sort()
    out.put((len(times), times[len(times) // 2]))


def window(port: int, writers: int, seconds: float) -> tuple[float, float]:
    """writes/s and the median of the writers' median round trips (ms)."""
    out: mp.Queue = mp.Queue()
    ps = [mp.Process(target=writer, args=(port, seconds, out)) for _ in range(writers)]
    for p in ps:
        p.start()
    got = [out.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    medians = sorted(m for _, m in got)
    return sum(n for n, _ in got) / seconds, medians[len(medians) // 2] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the two files go [the system's temp dir]")
    ap.add_argument("--primary-flags", default="", help="more flags for the primary, e.g. '--busy-poll 0'")
    ap.add_argument("--replica-flags", default="", help="more flags for the replica")
    args = ap.parse_args()
    where = tempfile.mkdtemp(prefix="sync-replica-cost-", dir=args.dir)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        primary, port = start("--file", os.path.join(where, "p.fenec"), "--sync", "always",
                              "--replication-token", TOKEN, "--sync-replicas", "1", *args.primary_flags.split())
        procs.append(primary)
        replica, _ = start("--file", os.path.join(where, "r.fenec"), "--sync", "always",
                           "--replication-token", TOKEN, "--replica-of", f"http://127.0.0.1:{port}", *args.replica_flags.split())
        procs.append(replica)
        end = time.monotonic() + 60
        while not get(port, "/_replication/status").get("replicas"):
            if time.monotonic() > end:
                raise RuntimeError("the replica did not connect")
            time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/query", body=json.dumps({"query": JOBS}))
        conn.getresponse().read()
        conn.close()
        window(port, 1, 0.5)  # warm-up
        for _ in range(args.runs):
            before = cpu_s(primary.pid), cpu_s(replica.pid)
            rate, p50 = window(port, args.writers, args.seconds)
            after = cpu_s(primary.pid), cpu_s(replica.pid)
            n = rate * args.seconds
            print(f"{args.writers} writer(s): {rate:,.0f} writes/s, round trip p50 {p50:.3f} ms, CPU a write: "
                  f"primary {(after[0] - before[0]) / n * 1e6:.0f} µs, replica {(after[1] - before[1]) / n * 1e6:.0f} µs",
                  flush=True)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
