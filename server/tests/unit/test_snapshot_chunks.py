"""The snapshot's rows, encoded SNAPSHOT_CHUNK at a time (so a background compaction lets the
writers run between chunks), are byte for byte the one-call encoding, and load back."""

from __future__ import annotations

import json

import orjson
from fenecdb_server import Database
from fenecdb_server.engine.execute import encode_row
from fenecdb_server.engine.records import SNAPSHOT_CHUNK, _rows_json, _snapshot_row


def test_chunks_join_to_the_one_call_encoding() -> None:
    db = Database()
    db.query("create collection t (n int, s text, j json)")
    db.query("put t $1", [[{"n": i, "s": f"é{i}", "j": {"a": [i]}} for i in range(2 * SNAPSHOT_CHUNK + 7)]])
    db.query("del t where n % 3 = 0")
    coll = db.collections["t"]

    whole = [[rid, _snapshot_row(coll.schema, r)] for rid, r in sorted(coll.rows.items())]
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


def test_a_row_of_plain_fields_is_written_as_stored_and_reads_back_the_same(tmp_path) -> None:
    # no field holds bytes: a row without a null goes to orjson as it is stored (its id included,
    # which reading skips); a row with a null, or of a collection with a bytes field, is converted
    db = Database()
    db.query("create collection p (n int, t timestamp, g geo, ts [timestamp], j json, s text)")
    db.query("create collection b (n int, raw bytes, many [bytes])")
    plain = db.collections["p"].schema
    assert plain.plain and not db.collections["b"].schema.plain
    db.query("put p {n: 1, t: 1700000000000, g: [2.5, 48.1], ts: [5, null], j: {a: [1, null]}, s: 'x'}")
    db.query("put p {n: 2, t: null, s: 'y'}")
    db.query("put b {n: 3, raw: $1, many: [$1, null]}", [b"\x00\xff"])
    rows = db.collections["p"].rows
    assert _snapshot_row(plain, rows[1]) is rows[1]  # no copy
    assert _snapshot_row(plain, rows[2]) == encode_row(plain, rows[2]) == {"n": 2, "s": "y"}
    brow = db.collections["b"].rows[1]
    assert _snapshot_row(db.collections["b"].schema, brow) == {"n": 3, "raw": "00ff", "many": ["00ff", None]}
    def stored(d: Database) -> dict:  # a field holding null is left out (absent and null read alike)
        return {name: {rid: {k: v for k, v in row.items() if v is not None} for rid, row in c.rows.items()}
                for name, c in d.collections.items()}

    before = stored(db)
    seq, data = db.backup()
    (tmp_path / "copy.fenec").write_bytes(data)
    back = Database(str(tmp_path / "copy.fenec"))
    try:
        assert stored(back) == before
        assert back.query("get p where n = 2") == db.query("get p where n = 2")
        assert type(back.collections["p"].rows[1]["g"]) is tuple
        assert back.query("get p where t > 0")[0]["n"] == 1
    finally:
        back.close()


def test_the_pace_rests_only_while_the_loop_answers_requests(monkeypatch) -> None:
    # a server's compaction (database.Pace): after each slice it rests if requests were answered
    # since its last look, and runs on if none were (an idle server's compaction runs flat out)
    import fenecdb_server.database as database

    slept: list[float] = []
    monkeypatch.setattr(database.time, "sleep", lambda s: slept.append(s))
    monkeypatch.setattr(database.threading, "active_count", lambda: 2)
    answered = [0]
    pace = database.Pace(lambda: answered[0], slice_s=0.0, rest_s=0.009)  # every call ends a slice
    pace()
    assert slept == [0] and pace.rests == 0  # handed over; nothing answered: no rest
    answered[0] += 3
    pace()
    assert slept == [0, 0, 0.009] and pace.rests == 1
    pace()
    assert slept == [0, 0, 0.009, 0] and pace.rests == 1  # nothing answered since
    answered[0] += 1  # answered during the last call's hand-over, or a rest
    pace()
    assert slept[-1] == 0.009 and pace.rests == 2
    long = database.Pace(lambda: answered[0], slice_s=3600.0)
    answered[0] += 5
    long()
    assert long.rests == 0  # within its slice: hands over only


def test_a_paced_compaction_answers_its_rests_and_loses_nothing(tmp_path) -> None:
    import fenecdb_server.database as database

    db = Database(str(tmp_path / "p.fenec"))
    try:
        db.query("create collection t (n int)")
        db.query("put t $1", [[{"n": i} for i in range(5 * SNAPSHOT_CHUNK)]])
        db.query("del t where n % 2 = 0")
        answered = iter(range(10 ** 6))  # a loop that answers between every two looks
        done = db.compact(pace=database.Pace(lambda: next(answered), slice_s=0.0, rest_s=0.0))
        assert done["rests"] == 3  # after each of the 2.5 chunks
        assert done["bytes_after"] < done["bytes_before"]
        assert {"encode_ms", "write_ms", "write_lock_us", "lock_us"} <= set(done)
        seq, data = db.backup(pace=database.Pace(lambda: 0))
        assert seq == db.seq and data.startswith(b"FENECLOG")
    finally:
        db.close()
    db = Database(str(tmp_path / "p.fenec"))
    try:
        assert db.query("get t count") == [{"count": 5 * SNAPSHOT_CHUNK // 2}]
    finally:
        db.close()
