"""The bytecodes one claim of ten runs, in process: the count the claim path is held to.

Timings drift with a machine's neighbours; the number of bytecodes a claim runs does not. This
script loads --jobs ready jobs into an in-memory `Database` on a clock that stands still (so no
claim is the first of a new second, whose time text is not cached yet: 28 bytecodes and one call
more), warms the caches with a few claims, then counts the opcode events (`sys.settrace` with `f_trace_opcodes`) and the Python calls of one
`Database.query` of the claim, from the call to its answer. `bench/README.md` records the count;
a change to the claim path says what it moved.

    .venv/bin/python bench/claim_bytecodes.py [--jobs 10000] [--unique-pending] [--run N] [--json]

`--run N` runs N claims untraced instead, for an instruction count under valgrind: the
difference between two counts (`--run 250` less `--run 50`) over 200 is one claim's instructions,
the compiled engine's included (bench/README.md).

`--unique-pending` gives each job a key `@unique(pending)` (unique jobs, engine/unique.py): the
cost of a claim on such a queue.
"""

from __future__ import annotations

import argparse
import json
import sys

from fenecdb_server import Database
from opcode_count import traced  # run as a script: bench/ is on the path

SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--unique-pending", action="store_true", help="each job keyed by a @unique(pending) field")
    ap.add_argument("--run", type=int, default=0, help="run this many claims untraced (for valgrind), count none")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args()
    fixed = Database().now()
    db = Database(clock=lambda: fixed)
    keyed = args.unique_pending
    db.query(SCHEMA.replace("(payload json,", "(key text @unique(pending), payload json,") if keyed else SCHEMA)
    now = db.now()
    db.query("put jobs $1", [[{"payload": {"n": i}, "run_at": now - 1000, "attempts": 0, **({"key": f"k{i}"} if keyed else {})}
                              for i in range(args.jobs)]])
    for i in range(5):
        db.query(CLAIM, [f"warm:{i}"])
    if args.run:
        for _ in range(args.run):
            db.query(CLAIM, ["w1"])
        return 0
    _, ran = traced(db.query, CLAIM, ["w1"])
    ops, calls, where = ran.ops, ran.calls, ran.where
    if args.json:
        print(json.dumps({"bytecodes": ops, "calls": calls}))
        return 0
    print(f"one claim of 10 over {args.jobs} ready jobs: {ops} bytecodes in {calls} calls")
    for name, n in where.most_common(12):
        print(f"  {n:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
