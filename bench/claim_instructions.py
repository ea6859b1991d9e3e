"""N in-process claims of 10, for an instruction count: run it under callgrind with N and with 0,
and the difference divided by N is one claim's instructions (start-up and loading cancel out).

30 000 ready jobs on a clock that stands still, 50 claims to warm the caches, then the collector
set as the server sets it (`gc_policy.apply()`), so no full collection over the stored jobs lands
in the count. Fix the hash seed: dicts and sets laid out by another seed move the count by up to 3 %.

    PYTHONHASHSEED=0 FENECDB_PURE_PYTHON=1 valgrind --tool=callgrind --callgrind-out-file=n.out \\
        .venv/bin/python bench/claim_instructions.py 1000      # and again with 0
"""

from __future__ import annotations

import sys

from fenecdb_server import Database, gc_policy

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
NOW = 1_800_000_000_000


def main(n: int) -> None:
    db = Database(clock=lambda: NOW)
    db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
    db.query("put jobs $1", [[{"payload": {"to": "x"}, "run_at": NOW - 1000, "attempts": 0} for _ in range(30000)]])
    for i in range(50):
        db.query(CLAIM, [f"w:{i}"])
    gc_policy.apply()
    for i in range(n):
        db.query(CLAIM, [f"v:{i}"])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
