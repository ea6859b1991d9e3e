"""`make queue-compare`: python -m bench.compare [--quick] [--jobs N] [--rounds R] [--seconds S]
[--durable-seconds S] [--systems a,b] [--only p,q] [--dir D] [--before CHECKOUT]"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path

from . import harness, report

OUT = Path(__file__).resolve().parent.parent / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="queue-compare", description=harness.__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, to try it (about a minute a round)")
    ap.add_argument("--jobs", type=int, help="jobs in the full queue [1 000 000; --quick 100 000]")
    ap.add_argument("--rounds", type=int, help="rounds, systems alternated in each [3]")
    ap.add_argument("--seconds", type=float, help="each throughput window [3; --quick 1]")
    ap.add_argument("--durable-seconds", type=float, help="each durable writes window [2; --quick 1]")
    ap.add_argument("--systems", help="a comma-separated subset of: fenecdb,postgres,redis,beanstalkd")
    ap.add_argument("--only", help="a comma-separated subset of the parts of a round: " + ",".join(harness.PARTS)
                    + " (claims: the claim, wake and load rows; durable: the durable writes; sync: the durable "
                      "writes with one sync replica; async: claim + ack with one async replica, and without one "
                      "when claims is not asked) [all]")
    ap.add_argument("--dir", help="where the servers' temporary data directories go (its disk is the one "
                                  "the durable row measures; run as root, the postgres user must be able to "
                                  "reach it) [the system's temp dir]")
    ap.add_argument("--before", metavar="CHECKOUT",
                    help="another checkout of FenecDB, built there with `make venv`: its server runs in every round "
                         "beside this one's (through this checkout's client), and the report gives their ratio and "
                         "its targets too, so that a change is measured before and after in the same rounds")
    ap.add_argument("--out", default=str(OUT), help="where queue-compare.md and .json are written")
    args = ap.parse_args(argv)
    sizes = harness.QUICK if args.quick else harness.Sizes()
    changes = {k: v for k, v in (("jobs", args.jobs), ("rounds", args.rounds), ("seconds", args.seconds),
                                 ("durable_seconds", args.durable_seconds)) if v is not None}
    sizes = dataclasses.replace(sizes, **changes)
    if sizes.rounds < 1 or sizes.jobs < 1000 or sizes.seconds <= 0 or sizes.durable_seconds <= 0:
        ap.error("--jobs must be at least 1000, --rounds at least 1, --seconds and --durable-seconds above 0")
    if sizes.jobs < 20 * sizes.claims:  # the timed claims take at most half the queue
        sizes = dataclasses.replace(sizes, claims=sizes.jobs // 20)
    only = [s.strip() for s in args.systems.split(",")] if args.systems else None
    known = {"fenecdb", "postgres", "redis", "beanstalkd"}
    if only and not set(only) <= known:
        ap.error(f"--systems: unknown {sorted(set(only) - known)}; known: {sorted(known)}")

    parts = tuple(harness.PARTS)
    if args.only:
        asked = [p.strip() for p in args.only.split(",") if p.strip()]
        if not asked or not set(asked) <= set(harness.PARTS):
            ap.error(f"--only: unknown {sorted(set(asked) - set(harness.PARTS))}; known: {list(harness.PARTS)}")
        parts = tuple(p for p in harness.PARTS if p in asked)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def stop_running(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # SIGTERM and SIGHUP unwind like a Ctrl-C, through every `finally` that stops a server
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_running)
    try:
        results = harness.run(sizes, only, args.dir, log, parts, args.before)
    except KeyboardInterrupt:
        log("\nqueue-compare: interrupted; every server it started is stopped, nothing written")
        return 130
    # a part of the run is written beside the whole one's table, never over it
    stem = "queue-compare" if parts == harness.PARTS else "-".join(("queue-compare", *parts))
    md, js, text = report.write(results, Path(args.out), stem)
    print(text)
    print(f"written: {md} and {js.name}")
    return 1 if results["errors"] or not any("skipped" not in v for v in results["systems"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
