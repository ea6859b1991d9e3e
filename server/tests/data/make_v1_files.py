"""Writes `v1_log.fenec` and `v1_compacted.fenec`: data files as the server wrote them up to commit 52ba4c8
(the log's `k` op held an Idempotency-Key's HTTP status and body bytes; the record was encoded with `json`).

It was run once, on that commit's code, and its output is committed: the files, and `v1_expected.json`, what that code read back from them
(collections, rows, change number, the keys' stored answers), which `test_storage_old_files.py` compares with
what today's code reads. Run on later code it would write today's format, which is not the point of them.

    .venv/bin/python server/tests/data/make_v1_files.py server/tests/data
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fenecdb_server import Database
from fenecdb_server.database import Idem
from fenecdb_server.engine.execute import encode_row
from fenecdb_server.http.app import App

EPOCH = 1_777_800_000_000
KEY = "*:claim-w1-1"
HASH = bytes(range(20))
SHORT_KEY = "*:short"


class Clock:
    def __init__(self) -> None:
        self.ms = EPOCH

    def __call__(self) -> int:
        return self.ms


def steps(db: Database, clock: Clock) -> None:
    db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, "
             "error text, tag bytes, at geo, code text @unique)")
    db.query("put jobs $1", [[{"payload": {"n": i, "s": "x\ud800y"}, "run_at": EPOCH - 1000 + i, "attempts": 0,
                               "tag": b"\x00\xff".hex(), "at": [1.5, 2.25], "code": f"c{i}"} for i in range(6)]])
    db.query("create index on jobs (payload.n) @hash")
    db.query("create collection tmp (n int)")
    db.query("put tmp {n: 1}")
    db.query("drop collection tmp")
    claim = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
             "where run_at <= now() order run_at limit 2 returning id, payload, owner")

    def render(answers: list) -> tuple[int, bytes]:
        return App.render(False, answers)  # what the HTTP layer stored

    db.execute([(claim, ["w1\udc80"])], idempotency=Idem(KEY, HASH, 86_400_000), render=render)
    db.execute([("del jobs where id = 6", None)], idempotency=Idem(SHORT_KEY, HASH, 1000), render=render)
    clock.ms += 70_000
    db.sweep()  # forgets SHORT_KEY: op K
    db.query("set jobs {error: $1} where id = 3", ["bad \udfff"])


def main() -> None:
    out = Path(sys.argv[1])
    expected: dict = {}
    for name, compact in (("v1_log.fenec", False), ("v1_compacted.fenec", True)):
        path = out / name
        path.unlink(missing_ok=True)
        clock = Clock()
        db = Database(str(path), sync="always", clock=clock)
        if compact:
            db.query("create collection before (n int)")
            db.query("put before {n: 7}")
            db.execute([("put before {n: 8}", None)], idempotency=Idem("*:snap", HASH, 86_400_000))
            db.compact()
        steps(db, clock)
        db.close()
        again = Database(str(path), clock=clock)
        expected[name] = state(again)
        again.close()
    (out / "v1_expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=True) + "\n")


def state(db: Database) -> dict:
    """What the file holds, as read back by the code that wrote it: every collection's schema, next id
    and rows (as the log encodes them), the change number, and each Idempotency-Key's stored answer."""
    return {
        "seq": db.seq,
        "collections": {name: {"schema": c.schema.to_json(), "next_id": c.next_id,
                               "rows": [[rid, encode_row(c.schema, row)] for rid, row in sorted(c.rows.items())]}
                        for name, c in sorted(db.collections.items())},
        "keys": {k: {"hash": h.hex(), "status": st, "body": body.decode(), "at": at, "ttl_ms": ttl}
                 for k, (h, st, body, at, ttl) in sorted(db._idem.items())},
    }


if __name__ == "__main__":
    main()
