"""The snapshot's rows, encoded SNAPSHOT_CHUNK at a time (so a background compaction lets the
writers run between chunks), are byte for byte the one-call encoding, and load back."""

from __future__ import annotations

import json

import orjson
from fenecdb_server import Database
from fenecdb_server.engine.execute import encode_row
from fenecdb_server.engine.records import SNAPSHOT_CHUNK, _rows_json


def test_chunks_join_to_the_one_call_encoding() -> None:
    db = Database()
    db.query("create collection t (n int, s text, j json)")
    db.query("put t $1", [[{"n": i, "s": f"é{i}", "j": {"a": [i]}} for i in range(2 * SNAPSHOT_CHUNK + 7)]])
    db.query("del t where n % 3 = 0")
    coll = db.collections["t"]

    whole = [[rid, encode_row(coll.schema, r)] for rid, r in sorted(coll.rows.items())]
    assert json.loads(_rows_json(coll.schema, coll.rows)) == whole
    assert _rows_json(coll.schema, coll.rows) == orjson.dumps(whole)
    assert _rows_json(coll.schema, {}) == b"[]"
    seq, data = db.backup()
    assert seq == db.seq and data.startswith(b"FENECLOG")
