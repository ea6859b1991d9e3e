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


def test_a_pause_between_chunks_changes_no_byte() -> None:
    db = Database()
    db.query("create collection t (n int)")
    db.query("put t $1", [[{"n": i} for i in range(3 * SNAPSHOT_CHUNK + 1)]])
    coll = db.collections["t"]
    paused: list[int] = []
    got = _rows_json(coll.schema, coll.rows, lambda: paused.append(1))
    assert got == _rows_json(coll.schema, coll.rows)
    assert len(paused) == 4  # after each of the four chunks


def test_compaction_and_backup_hand_the_interpreter_over_between_chunks(tmp_path, monkeypatch) -> None:
    # the server's event loop runs between two chunks of a compaction's encoding (database.py `_hand_over`)
    import fenecdb_server.database as database

    calls: list[float] = []
    real_sleep = database.time.sleep
    monkeypatch.setattr(database.time, "sleep", lambda s: (calls.append(s), real_sleep(s)))
    db = Database(str(tmp_path / "h.fenec"))
    try:
        db.query("create collection t (n int)")
        db.query("put t $1", [[{"n": i} for i in range(5 * SNAPSHOT_CHUNK)]])
        db.query("del t where n % 2 = 0")  # 2.5 chunks alive
        db.compact()
        assert calls == [0, 0, 0]
        calls.clear()
        db.backup()
        assert calls == [0, 0, 0]
        assert db.query("get t count") == [{"count": 5 * SNAPSHOT_CHUNK // 2}]
    finally:
        db.close()
    db = Database(str(tmp_path / "h.fenec"))
    try:
        assert db.query("get t count") == [{"count": 5 * SNAPSHOT_CHUNK // 2}]
    finally:
        db.close()


def test_the_hand_over_sleeps_only_with_another_thread_to_hand_to(monkeypatch) -> None:
    import fenecdb_server.database as database

    calls: list[float] = []
    monkeypatch.setattr(database.time, "sleep", lambda s: calls.append(s))
    monkeypatch.setattr(database.threading, "active_count", lambda: 1)
    database._hand_over()
    assert calls == []
    monkeypatch.setattr(database.threading, "active_count", lambda: 3)
    database._hand_over()
    assert calls == [0]
