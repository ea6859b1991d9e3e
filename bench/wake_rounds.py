"""The harness's wake row (`bench/compare/loadgen.py` `wake_latency`: a blocked worker, a put 10 ms
later, the time to the job in the worker's hand) for several builds of FenecDB beside Redis,
alternated in one sitting: each round runs every build and Redis once, in an order rotated each
round, each on a fresh server started as `make queue-compare` starts it (`bench/compare/fenec.py`,
`redisq.py`). `--claims N` also times the claim of 10 on keep-alive (`loadgen.claim_latency`, N
claims from 100 000 ready jobs) on the same servers, after the wakes.

A build is a Python that has `fenec-server` beside it (a venv: `make venv`'s, or another clone's),
run with PYTHONPATH unset; Redis runs under the first build's Python (its `redis` driver).

    python bench/wake_rounds.py --build before=/clone/.venv/bin/python --build after=.venv/bin/python \\
        [--rounds 6] [--wakes 300] [--claims 1000] [--no-redis]

It prints each run as it ends, then per build the median and range of the rounds' p50 and p99.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

READY = 100_000  # jobs ready for the keep-alive claim rows


def one(system_key: str, wakes: int, claims: int) -> dict:
    """In the child: one fresh server of `system_key`, its wake row, and its claim row if asked."""
    import contextlib
    import importlib

    from compare import loadgen  # bench/compare/: the script's folder is on sys.path

    module = {"fenecdb": "fenec", "redis": "redisq"}[system_key]
    system = importlib.import_module(f"compare.{module}").System()
    workdir = tempfile.mkdtemp(prefix=f"wake-rounds-{system_key}-")
    os.chmod(workdir, 0o755)
    try:
        system.start(workdir, durable=False)
        out = {"wake": loadgen.wake_latency(system, wakes, None)}
        if claims:
            system.reset()
            system.load(READY, ready=True)
            with contextlib.closing(system.session()) as s:
                out["claim"] = loadgen.claim_latency(s, claims)
        return out
    finally:
        system.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", default=[], help="NAME=PYTHON (a venv's python with fenec-server)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--wakes", type=int, default=300)
    ap.add_argument("--claims", type=int, default=0, help="also time N keep-alive claims of 10")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child's run: fenecdb or redis
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.wakes, args.claims)))
        return 0
    builds = [tuple(b.split("=", 1)) for b in args.build]
    if not builds:
        ap.error("name at least one --build NAME=PYTHON")
    runs = [(name, python, "fenecdb") for name, python in builds]
    if not args.no_redis:
        runs.append(("redis", builds[0][1], "redis"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FENECDB_PURE_PYTHON")}
    got: dict[str, list[dict]] = {name: [] for name, _, _ in runs}
    for r in range(args.rounds):
        k = r % len(runs)
        for name, python, key in runs[k:] + runs[:k]:
            cmd = [python, str(Path(__file__).resolve()), "--one", key, "--wakes", str(args.wakes),
                   "--claims", str(args.claims)]
            done = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
            if done.returncode:
                print(done.stderr, file=sys.stderr)
                raise SystemExit(f"{name} failed in round {r + 1}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            got[name].append(result)
            line = f"round {r + 1} {name}: wake p50 {result['wake']['p50']:.3f} p99 {result['wake']['p99']:.3f} ms"
            if "claim" in result:
                line += f"; claim p50 {result['claim']['p50']:.3f} p99 {result['claim']['p99']:.3f} ms"
            print(line, flush=True)
    for name, results in got.items():
        for row in ("wake", "claim"):
            if row not in results[0]:
                continue
            for q in ("p50", "p99"):
                values = [x[row][q] for x in results]
                print(f"{name} {row} {q}: median {statistics.median(values):.3f} ms, "
                      f"{min(values):.3f}-{max(values):.3f} ({len(values)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
