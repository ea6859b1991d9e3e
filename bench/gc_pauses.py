"""The garbage collector's pauses while jobs are loaded, as the server loads them.

Opens a `Database` on a fresh data file (`--sync 250`, as `fenec-server` runs by default), puts
--jobs jobs in blocks of --chunk (a producer's batch: `put jobs $1` with a list of documents, the
statement the SDKs' bulk enqueue sends), and reports through `gc.callbacks` how many collections
ran, how long the longest took and how long they took together, per generation, with the load's
rate beside them. The server's own settings are applied as `fenec-server` applies them
(`fenecdb_server.gc_policy.apply`), so the numbers are the server's; `--python-defaults` measures
CPython's defaults instead, for the comparison.

    .venv/bin/python bench/gc_pauses.py [--jobs 1000000] [--chunk 1000] [--python-defaults] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from typing import Any

from fenecdb_server import Database

SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"


class Pauses:
    def __init__(self) -> None:
        self.started = 0
        self.by_gen: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter_ns()
        else:
            self.by_gen[info["generation"]].append(time.perf_counter_ns() - self.started)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--python-defaults", action="store_true", help="CPython's collector settings, not the server's")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = Database(os.path.join(d, "jobs.fenec"), sync=250)
        if not args.python_defaults:
            from fenecdb_server import gc_policy

            gc_policy.apply()
        db.query(SCHEMA)
        pauses = Pauses()
        gc.callbacks.append(pauses)
        now = db.now()
        t0 = time.perf_counter()
        for start in range(0, args.jobs, args.chunk):
            docs = [{"payload": {"to": f"user{i}@example.com"}, "run_at": now, "attempts": 0}
                    for i in range(start, min(args.jobs, start + args.chunk))]
            db.query("put jobs $1", [docs])
        elapsed = time.perf_counter() - t0
        gc.callbacks.remove(pauses)
        db.close()
    allp = [p for ps in pauses.by_gen.values() for p in ps]
    out = {
        "jobs": args.jobs, "chunk": args.chunk, "settings": "python" if args.python_defaults else "server",
        "jobs_per_s": round(args.jobs / elapsed), "collections": len(allp),
        "longest_pause_ms": round(max(allp, default=0) / 1e6, 2), "total_gc_s": round(sum(allp) / 1e9, 3),
        "per_generation": {g: {"n": len(ps), "longest_ms": round(max(ps, default=0) / 1e6, 2)}
                           for g, ps in pauses.by_gen.items()},
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
