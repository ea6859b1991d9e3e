"""Held claims that match nothing, measured: what they cost a producer's put.

    .venv/bin/python bench/held_bench.py [--ready 100000] [--claims 0,5,20,90] [--puts 30]

A `fenec-server` is started with a queue collection; each row holds that many claims, each on its own connection with `Fenec-Wait: 30000`, whose filter
matches none of them (`queue = 'a' and attempts = $2 and run_at <= now()`, a value of attempts of
its own per claim, none of them 0: the worker policy's claim with its attempts bound, which reads
every ready job of the queue to find it has none), then puts `--ready` jobs into queue `a`. With them held, one client puts `--puts` jobs one at a time
into queue `b` and times each put's answer; the row reports the median and the worst, a
`/_health` timed the same way, and how many looks and row checks the held lines made per put
(`fenec_held_looks_total`, `fenec_held_checks_total`). A put must cost what it wrote, whatever
number of claims is held: the rows should be flat.

The last row holds 1 000 claims over no ready job and reports puts a second from one client.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bidding_bench import Conn, start  # noqa: E402  (bench/: the script's folder)

JOBS = "create collection jobs (queue text, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where queue = 'a' and attempts = $2 and run_at <= now() order run_at limit 10 returning id")
PUT = "put jobs {queue: $1, run_at: now(), attempts: 0}"


def metric(c: Conn, name: str) -> int:
    m = re.search(rf"^{name} (\d+)$", c.get("/_metrics"), re.M)
    return int(m.group(1)) if m else 0


def row(ready: int, claims: int, puts: int) -> dict[str, Any]:
    proc, addr = start(bidding=True)
    try:
        c = Conn(addr)
        c.send({"query": JOBS})
        c.recv()
        held = [Conn(addr) for _ in range(claims)]
        for i, h in enumerate(held):
            h.send({"query": CLAIM, "params": [f"w{i}", 1000 + i]}, "Fenec-Wait: 30000\r\n")
        deadline = time.monotonic() + 60
        while metric(c, "fenec_held_claims") < claims:
            assert time.monotonic() < deadline, "the claims were never all held"
            time.sleep(0.01)
        # the jobs after the claims: each claim's first run (which reads every ready job of its
        # queue, the claim's own cost) is short, and all are held well inside their 30 s
        left = ready
        while left:
            n = min(left, 10_000)
            c.send({"query": "put jobs [" + ", ".join(["{queue: 'a', run_at: now(), attempts: 0}"] * n) + "]"})
            status, _ = c.recv()
            assert status == 200
            left -= n
        looks, checks = metric(c, "fenec_held_looks_total"), metric(c, "fenec_held_checks_total")
        times: list[float] = []
        health: list[float] = []
        for _ in range(puts):
            t0 = time.perf_counter()
            c.send({"query": PUT, "params": ["b"]})
            status, _ = c.recv()
            times.append((time.perf_counter() - t0) * 1000)
            assert status == 200
            t0 = time.perf_counter()
            c.get("/_health")
            health.append((time.perf_counter() - t0) * 1000)
        still = metric(c, "fenec_held_claims")  # fewer: deadlines (30 s) fell during the puts
        out = {
            "put_p50_ms": statistics.median(times), "put_max_ms": max(times),
            "health_p50_ms": statistics.median(health),
            "puts_per_s": puts / (sum(times) / 1000),
            "looks_per_put": (metric(c, "fenec_held_looks_total") - looks) / puts,
            "checks_per_put": (metric(c, "fenec_held_checks_total") - checks) / puts,
            "held_after": still,
        }
        for h in held:
            h.sock.close()
        return out
    finally:
        proc.terminate()
        proc.wait()


def run(ready: int = 100_000, sizes: tuple[int, ...] = (0, 5, 20, 90), puts: int = 30) -> dict[str, Any]:
    """The rows of `make queue-bench`'s held-claims table; prints them as they come."""
    print(f"\nheld claims matching none of {ready:,} ready jobs: a put into another queue ({puts} puts a row)",
          flush=True)
    out: dict[str, Any] = {}
    for name, r, k in [*((f"{k} held, {ready:,} ready", ready, k) for k in sizes), ("1000 held, 0 ready", 0, 1000)]:
        res = out[name] = row(r, k, puts if k < 1000 else max(puts, 300))
        print(f"  {name:<26} put p50 {res['put_p50_ms']:.2f} ms (max {res['put_max_ms']:.2f}), "
              f"/_health p50 {res['health_p50_ms']:.2f} ms, {res['puts_per_s']:.0f} puts/s, "
              f"{res['looks_per_put']:.1f} looks and {res['checks_per_put']:.1f} checks a put, "
              f"{res['held_after']} still held after", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ready", type=int, default=100_000)
    ap.add_argument("--claims", default="0,5,20,90", help="comma-separated held-claim counts")
    ap.add_argument("--puts", type=int, default=30)
    args = ap.parse_args()
    run(args.ready, tuple(int(x) for x in args.claims.split(",")), args.puts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
