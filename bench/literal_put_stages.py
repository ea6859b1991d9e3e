"""Where the time of a put of 1 000 literal documents goes (the text row of `make queue-bench`):
reading the text into its statement, preparing it, and the whole statement in process.

    python bench/literal_put_stages.py                  medians of each stage (automatic collection off)
    python bench/literal_put_stages.py --stage S --count N
                                                        run stage S (read, prepare, query, param) N times

The second form is for an instruction count, which a machine shared with others does not move:
run it under `valgrind --tool=callgrind` with N=1 and N=3; half the difference is one run of the
stage (bench/README.md, "Statements written with literals"). `param` is the same documents sent as
`put jobs $1`. Every text is a new one, as in queue_bench.py, so no cache answers.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fenecdb_server import Database  # noqa: E402
from fenecdb_server.engine.prepare import prepare  # noqa: E402
from fenecdb_server.ql.parser import read  # noqa: E402
from queue_bench import SCHEMA, _big_put  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["read", "prepare", "query", "param"])
    ap.add_argument("--count", type=int, default=9)
    args = ap.parse_args()
    db = Database()
    db.query(SCHEMA)
    texts = [_big_put(i) for i in range(args.count + 1)]
    schemas = {name: c.schema for name, c in db.collections.items()}
    db.query(texts[-1])  # everything imported and warm
    stmt = read(texts[-1])[0][0]
    docs = [{"payload": {"to": f"user{j}@example.com", "n": j, "tag": "r"}, "run_at": db.now(), "attempts": 0}
            for j in range(1000)]
    stages = {
        "read": read,
        "prepare": lambda _: prepare(stmt, schemas),
        "query": db.query,
        "param": lambda _: db.query("put jobs $1", [docs]),
    }
    gc.disable()  # as a text this long runs (gc_policy.held_off)
    if args.stage is not None:
        for t in texts[:args.count]:
            stages[args.stage](t)
        return 0
    for name, run in stages.items():
        took = []
        for t in texts[:args.count]:
            t0 = time.perf_counter_ns()
            run(t)
            took.append(time.perf_counter_ns() - t0)
        print(f"{name:8} {statistics.median(took) / 1e6:6.2f} ms  ({min(took) / 1e6:.2f}-{max(took) / 1e6:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
