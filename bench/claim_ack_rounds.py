"""The harness's claim + ack windows (`bench/compare/loadgen.py` `run_workers`, claim 10 then a
`/batch` of ten acks, one process a worker) for several builds of FenecDB, alternated in one
sitting: each round runs every build once, in an order rotated each round, each on a fresh server
as `make queue-compare` starts it, loaded with `--jobs` ready jobs.

A build is a checkout built with `make venv` (its `.venv/bin/fenec-server` runs), or `here` for
this checkout's own server:

    python bench/claim_ack_rounds.py --build start=/clone --build here=here [--rounds 4] \\
        [--jobs 200000] [--workers 1,4] [--seconds 3]

It prints each run as it ends, then per build the median of the rounds, and each build's rate
over the first build's, round by round.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import fenec, loadgen  # noqa: E402 - bench/compare/, beside this script


def one(checkout: str, jobs: int, workers: list[int], seconds: float) -> dict[int, float]:
    system = fenec.System() if checkout == "here" else fenec.Before(checkout)
    workdir = tempfile.mkdtemp(prefix="claim-ack-rounds-")
    system.start(workdir, durable=False)
    try:
        system.load(jobs, True)
        return {w: loadgen.run_workers(system, "claim-ack", w, seconds)["rate"] for w in workers}
    finally:
        system.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, help="name=checkout, or name=here")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--workers", default="1,4")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    builds = [tuple(b.split("=", 1)) for b in args.build]
    if any(len(b) != 2 for b in builds):
        ap.error("--build is name=checkout")
    workers = [int(w) for w in args.workers.split(",")]
    rates: dict[str, dict[int, list[float]]] = {name: {w: [] for w in workers} for name, _ in builds}
    for r in range(args.rounds):
        order = builds[r % len(builds):] + builds[:r % len(builds)]
        for name, checkout in order:
            got = one(checkout, args.jobs, workers, args.seconds)
            for w, rate in got.items():
                rates[name][w].append(rate)
            print(f"round {r + 1} {name}: " + ", ".join(f"{w} worker(s) {rate:,.0f} jobs/s" for w, rate in got.items()),
                  flush=True)
    first = builds[0][0]
    for name, _ in builds:
        print(f"{name}: median " + ", ".join(f"{w} worker(s) {statistics.median(v):,.0f}" for w, v in rates[name].items()))
        if name != first:
            for w in workers:
                ratios = [a / b for a, b in zip(rates[name][w], rates[first][w], strict=True)]
                print(f"  over {first}, {w} worker(s), round by round: " + ", ".join(f"{x:.3f}" for x in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
