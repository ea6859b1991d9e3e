"""A replica's records applied as one (engine/records.py, `replay_all`): whatever the records and however
they are cut into blocks, the state is the one `replay` of each record in turn leaves (rows in the same
order, index entries, id counters, Idempotency-Keys, term, change number), every record is answered in
`done` in order, and a job claimed and acked in one block is one delete of the row it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fenecdb_server import Database
from fenecdb_server.engine import records
from fenecdb_server.engine.engine import Engine
from fenecdb_server.engine.hash_index import HashIndex
from fenecdb_server.engine.sorted_index import PackedIndex, SortedIndex
from fenecdb_server.storage.format import record_header
from fenecdb_server.storage.log import Log
from hypothesis import given, settings
from hypothesis import strategies as st

SCHEMA = ("create collection jobs (payload json, run_at timestamp @sorted, owner text @hash, n int @sorted, "
          "tag text @sorted, attempts int)")


def schema_json() -> dict:
    db = Database()
    db.query(SCHEMA)
    return db.engine.catalog.collections["jobs"].schema.to_json()


SCHEMA_JSON = schema_json()


def index_state(idx: Any) -> Any:
    if type(idx) is PackedIndex:
        return [k for run in idx.keys.runs for k in run], sorted(idx.nulls)
    if type(idx) is SortedIndex:
        return list(idx.items), sorted(idx.nulls)
    assert type(idx) is HashIndex
    return sorted((repr(k), sorted(ids)) for k, ids in idx.map.items())


def state(eng: Engine) -> dict:
    """What the records leave, exactly: each collection's rows in their order (values with their
    types), id counter and index entries; the keys in order; the term and the change number."""
    colls = {}
    for name, coll in eng.catalog.collections.items():
        if coll.in_order:  # the flag says the rows iterate by id: it must be true
            assert list(coll.rows) == sorted(coll.rows)
        colls[name] = {
            "rows": [(rid, sorted((k, type(v).__name__, repr(v)) for k, v in row.items()))
                     for rid, row in coll.rows.items()],
            "next": coll.next_id,
            "indexes": {t: index_state(idx) for t, (_, idx, _) in coll.indexes.items()},
        }
    keys = [(k, s.request_hash, s.answers, s.at, s.ttl_ms) for k, s in eng.keys.items()]
    return {"colls": colls, "keys": keys, "term": eng.catalog.term, "seq": eng.seq}


def row_data(draw: Any) -> dict:
    row: dict[str, Any] = {"payload": {"x": draw(st.integers(0, 3))}}
    for name, values in (("run_at", st.integers(0, 5)), ("owner", st.sampled_from(["a", "b"])),
                         ("n", st.integers(-2, 2)), ("tag", st.sampled_from(["x", "y"])),
                         ("attempts", st.integers(0, 2))):
        if draw(st.booleans()):  # a null field is left out of a record's row
            row[name] = draw(values)
    return row


@st.composite
def lives(draw: Any) -> tuple[list[bytes], list[int]]:
    """A collection's records (the first creates it), then puts, deletes, keys and the occasional
    record with another op; and where they are cut into blocks."""
    out = [records.dumps({"s": 1, "o": [["c", "jobs", SCHEMA_JSON]]})]
    seq = 1
    colls = 0
    for _ in range(draw(st.integers(1, 40))):
        ops: list = []
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from("ppppdddkKTc"))
            rid = draw(st.integers(1, 12))
            if kind == "p":
                ops.append(["p", "jobs", rid, row_data(draw)])
            elif kind == "d":
                ops.append(["d", "jobs", rid])
            elif kind == "k":
                key = f"k{draw(st.integers(0, 3))}"
                ops.append(["k", key, "ab" * 4, draw(st.integers(0, 9)), 1000, [{"affected": rid}]])
            elif kind == "K":
                ops.append(["K", f"k{draw(st.integers(0, 3))}"])
            elif kind == "T":
                ops.append(["T", draw(st.integers(1, 4))])
            else:
                colls += 1
                ops.append(["c", f"other{colls}", {**SCHEMA_JSON, "name": f"other{colls}"}])
        seq += 1
        out.append(records.dumps({"s": seq, "o": ops}))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(out)), max_size=6))))
    return out, cuts


def plain(payloads: list[bytes]) -> Engine:
    eng = Engine()
    for payload in payloads:
        records.replay(eng, payload)
    return eng


def net(payloads: list[bytes], cuts: list[int]) -> tuple[Engine, list]:
    eng = Engine()
    done: list = []
    at = 0
    for cut in [*cuts, len(payloads)]:
        records.replay_all(eng, payloads[at:cut], done)
        at = cut
    return eng, done


@settings(max_examples=300, deadline=None)
@given(lives())
def test_the_net_effect_of_a_block_is_the_state_each_record_in_turn_leaves(life: tuple[list[bytes], list[int]]) -> None:
    payloads, cuts = life
    eng, done = net(payloads, cuts)
    assert state(eng) == state(plain(payloads))
    assert [d[0] for d in done] == payloads
    assert [d[1] for d in done] == [records.loads(p)["s"] for p in payloads]
    assert [d[2] for d in done] == [records.loads(p)["o"] for p in payloads]


def test_a_row_deleted_and_put_again_in_one_block_goes_after_the_rows_put_before_it() -> None:
    put = lambda seq, rid: records.dumps({"s": seq, "o": [["p", "jobs", rid, {"n": seq}]]})  # noqa: E731
    payloads = [records.dumps({"s": 1, "o": [["c", "jobs", SCHEMA_JSON]]}), put(2, 1), put(3, 2),
                put(4, 3), records.dumps({"s": 5, "o": [["d", "jobs", 1]]}), put(6, 4), put(7, 1), put(8, 5)]
    eng, _ = net(payloads, [4])
    assert list(eng.catalog.collections["jobs"].rows) == [2, 3, 4, 1, 5]
    assert state(eng) == state(plain(payloads))


def test_a_failing_record_leaves_those_before_it_applied_and_in_done() -> None:
    payloads = [records.dumps({"s": 1, "o": [["c", "jobs", SCHEMA_JSON]]}),
                records.dumps({"s": 2, "o": [["p", "jobs", 1, {"n": 1}]]}),
                records.dumps({"s": 3, "o": [["p", "nothing", 1, {"n": 1}]]}),
                records.dumps({"s": 4, "o": [["p", "jobs", 2, {"n": 2}]]})]
    eng = Engine()
    done: list = []
    with pytest.raises(KeyError):
        records.replay_all(eng, payloads, done)
    assert [d[1] for d in done] == [1, 2] and eng.seq == 2
    assert list(eng.catalog.collections["jobs"].rows) == [1]


def primary_records(path: Path, jobs: int) -> list[bytes]:
    """A primary's records, as its file holds them: jobs put, claimed ten at a time by two
    workers, most acked, a few failed back and a few deleted, with Idempotency-Keys."""
    db = Database(str(path), sync="off")
    db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)")
    for at in range(0, jobs, 50):
        db.query("put jobs $1", [[{"payload": {"n": n}, "run_at": 0, "attempts": 0} for n in range(at, at + 50)]])
    claim = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
             "where run_at <= now() order run_at limit 10 returning id")
    k = 0
    while True:
        k += 1
        owner = f"w{k % 2}"
        taken = db.query(claim, [owner])
        if not taken:
            break
        for i, row in enumerate(taken):
            if i == 3:  # failed: back in the queue
                db.query("set jobs {run_at: 0, owner: null} where id = $1", [row["id"]])
            else:
                db.query("del jobs where id = $1 and owner = $2 require 1", [row["id"], owner])
        if k % 7 == 0:
            db.query("del jobs where attempts >= 3")
    db.close()
    log = Log(str(path), sync="off")
    snapshot, recs = log.open()
    log.close()
    assert snapshot is None
    return list(recs)


def test_a_replica_of_a_queues_records_in_blocks_of_64_holds_the_primarys_state_and_so_does_its_file(
        tmp_path: Path) -> None:
    payloads = primary_records(tmp_path / "p.fenec", 600)
    replica = Database(str(tmp_path / "r.fenec"), sync="off")
    engine = replica.engine
    for at in range(0, len(payloads), 64):  # as the follower takes them: a block written, then replayed
        block = payloads[at:at + 64]
        replica.ahead.append(b"".join(record_header(p) + p for p in block), block)
        assert replica.ahead.apply(64) == len(payloads[at:at + 64])
    want = state(plain(payloads))
    assert state(engine) == want
    replica.close()
    again = Database(str(tmp_path / "r.fenec"))  # the replica restarted: its file replayed, a record at a time
    try:
        assert state(again.engine) == want
    finally:
        again.close()


@pytest.mark.sources  # counts the calls of a function inside the engine (conftest)
def test_a_job_claimed_and_acked_in_one_block_is_one_delete_of_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    claims = [records.dumps({"s": s, "o": [["p", "jobs", rid, {"run_at": 99, "owner": "w"}] for rid in range(s, s + 10)]})
              for s in (10, 20)]
    acks = [records.dumps({"s": s + 1, "o": [["d", "jobs", rid] for rid in range(s, s + 10)]}) for s in (10, 20)]
    load = records.dumps({"s": 2, "o": [["p", "jobs", rid, {"run_at": 1}] for rid in range(1, 40)]})
    create = records.dumps({"s": 1, "o": [["c", "jobs", SCHEMA_JSON]]})
    eng = Engine()
    records.replay_all(eng, [create, load], [])
    decoded = []
    real = records.decode_row
    monkeypatch.setattr(records, "decode_row", lambda *a: decoded.append(a[1]) or real(*a))
    done: list = []
    records.replay_all(eng, [claims[0], acks[0], claims[1], acks[1]], done)
    assert decoded == []  # no claimed image was made: each row's last state is its delete
    assert list(eng.catalog.collections["jobs"].rows) == [*range(1, 10), *range(30, 40)]
    assert len(done) == 4 and eng.seq == 21
