"""database: the in-process contract of the spec's README and the engine contract: query/batch/execute,
read-only, idempotency, listeners, stats, and file-backed reopen/compact round trips."""

from __future__ import annotations

import pytest
from conftest import dump
from fenecdb_server import Database, FenecError
from fenecdb_server.database import Idem


def fails(fn, status, needle=None):
    with pytest.raises(FenecError) as ei:
        fn()
    assert ei.value.status == status, ei.value
    if needle:
        assert needle in ei.value.message, ei.value.message
    return ei.value


@pytest.fixture
def db(db):  # conftest's, on its clock
    db.query("create collection jobs (kind text, run_at timestamp @sorted, owner text, attempts int)")
    db.query("create collection other (x int)")
    return db


def test_answer_forms(db):
    assert db.query("put jobs {kind: 'a', run_at: now()}") == {"affected": 1}
    assert db.query("get jobs select kind, run_at") == [{"kind": "a", "run_at": "2026-05-03T09:20:00Z"}]
    assert db.query("get jobs count") == [{"count": 1}]
    assert db.query("create collection x (a int)") == {"message": "collection `x` created"}
    assert db.batch([("get jobs select kind", None), ("del jobs", None)]) == [{"rows": [{"kind": "a"}]},
                                                                            {"affected": 1}]


def test_params_and_errors(db):
    assert db.query("put jobs {kind: $1, attempts: $2}", ["a", 2]) == {"affected": 1}
    fails(lambda: db.query("get jobs where kind = $2", ["a"]), 400, "$2")
    fails(lambda: db.query("get jobs get jobs"), 400, "one statement")
    fails(lambda: db.query("get nosuch"), 404)
    fails(lambda: db.query(42), 400)  # type: ignore[arg-type]
    fails(lambda: db.execute([("get jobs", None), ("get jobs", None)]), 400)
    r = db.execute([("get jobs", None), ("get jobs", None)], block=True)
    assert len(r.answers) == 2 and not r.wrote


def test_execute_result_fields(db):
    s0 = db.seq
    r = db.execute([("put jobs [{kind: 'a'}, {kind: 'b'}]", None)])
    assert r.wrote and r.seq == db.seq > s0 and r.replayed is None and r.taken == 0
    r = db.execute([("set jobs {owner: 'w'} where kind = 'a' returning id", None)])
    assert r.taken == 1 and r.answers == [[{"id": 1}]]
    r = db.execute([("del jobs where kind = 'zz'", None)])
    assert r.taken == 0
    r = db.execute([("get jobs count", None)])
    assert not r.wrote and r.answers == [[{"count": 2}]]


def test_read_only_refuses_every_write_403(db):
    db.query("put jobs {kind: 'a'}")
    before = dump(db)
    db.set_read_only(True)
    for text in ("put jobs {kind: 'b'}", "set jobs {kind: 'c'}", "del jobs", "create collection z (a int)",
                 "drop collection other", "create index on other (x) @hash"):
        fails(lambda text=text: db.query(text), 403, "the server is in read-only mode")
    e = fails(lambda: db.batch([("get jobs", None), ("del jobs", None)]), 403)
    assert e.at == 1
    assert db.query("get jobs count") == [{"count": 1}]
    assert dump(db) == before
    db.set_read_only(False)
    db.query("del jobs")


# ---------------------------------------------------------------- idempotency

def idem(key, h=b"h1", ttl=60_000, keep_empty=True):
    return Idem(key, h, ttl, keep_empty)


def test_idempotency_replays_without_running(db):
    st = [("put jobs {kind: 'a'}", None)]
    r1 = db.execute(st, idempotency=idem("k1"))
    assert r1.replayed is None and r1.answers == [{"affected": 1}]
    seq = db.seq
    r2 = db.execute(st, idempotency=idem("k1"))
    assert r2.replayed is not None and r2.replayed.answers == [{"affected": 1}] and r2.replayed.raw is None
    assert r2.answers == [] and not r2.wrote
    assert db.seq == seq and db.query("get jobs count") == [{"count": 1}]


def test_idempotency_conflict_422(db):
    db.execute([("put jobs {kind: 'a'}", None)], idempotency=idem("k1", b"one"))
    e = fails(lambda: db.execute([("put jobs {kind: 'b'}", None)], idempotency=idem("k1", b"two")), 422)
    assert e.kind == "conflict"
    assert e.message == "this Idempotency-Key came with another request: a key is for one"
    assert db.query("get jobs count") == [{"count": 1}]


def test_idempotency_key_lives_its_ttl(db, clock):
    db.execute([("put jobs {kind: 'a'}", None)], idempotency=idem("k1", ttl=1000))
    clock.advance(1000)
    r = db.execute([("put jobs {kind: 'a'}", None)], idempotency=idem("k1", ttl=1000))
    assert r.replayed is None and db.query("get jobs count") == [{"count": 2}]


def test_failed_write_keeps_no_key(db):
    st = [("put jobs {kind: 'a', attempts: 'x'}", None)]
    fails(lambda: db.execute(st, idempotency=idem("k1")), 400)
    r = db.execute([("put jobs {kind: 'a'}", None)], idempotency=idem("k1", b"other"))
    assert r.replayed is None  # the failed request left no key: another request may take it


def test_keep_empty_false_keeps_no_key_when_nothing_was_taken(db):
    claim = [("set jobs {owner: 'w'} where run_at <= now() and owner = null order run_at limit 1 returning id", None)]
    r = db.execute(claim, idempotency=idem("c1", keep_empty=False))
    assert r.answers == [[]] and r.taken == 0
    db.query("put jobs {kind: 'a', run_at: now()}")
    r = db.execute(claim, idempotency=idem("c1", keep_empty=False))
    assert r.replayed is None and r.answers == [[{"id": 1}]]  # ran: no key had been kept
    r = db.execute(claim, idempotency=idem("c1", keep_empty=False))
    assert r.replayed is not None  # now it took something, so the key is kept


def test_keep_empty_true_keeps_the_empty_answer(db):
    claim = [("del jobs where kind = 'zz'", None)]
    db.execute(claim, idempotency=idem("c2"))
    assert db.execute(claim, idempotency=idem("c2")).replayed is not None


def test_reads_ignore_idempotency(db):
    r = db.execute([("get jobs", None)], idempotency=idem("r1"))
    r = db.execute([("get jobs count", None)], idempotency=idem("r1", b"other"))
    assert r.replayed is None and r.answers == [[{"count": 0}]]


def test_idempotency_in_a_block_failure_keeps_no_key(db):
    st = [("put jobs {kind: 'a'}", None), ("get jobs require 5", None)]
    fails(lambda: db.execute(st, block=True, idempotency=idem("b1")), 412)
    assert db.query("get jobs count") == [{"count": 0}]
    assert db.execute([("put jobs {kind: 'a'}", None)], idempotency=idem("b1", b"x")).replayed is None


# ---------------------------------------------------------------- listeners

def test_listeners_once_per_committed_write_with_touched_collections(db):
    heard = []
    db.listen(lambda colls, seq: heard.append((colls, seq)))
    db.query("put jobs {kind: 'a'}")
    assert heard == [(frozenset({"jobs"}), db.seq)]
    db.batch([("put jobs {kind: 'b'}", None), ("put other {x: 1}", None), ("get jobs", None)])
    assert len(heard) == 2 and heard[-1] == (frozenset({"jobs", "other"}), db.seq)
    db.query("get jobs")
    fails(lambda: db.query("put jobs {attempts: 'x'}"), 400)
    fails(lambda: db.batch([("put other {x: 2}", None), ("get jobs require 9", None)]), 412)
    db.query("del jobs where kind = 'nothing'")  # took nothing: nothing committed
    assert len(heard) == 2
    db.query("create collection fresh (a int)")
    assert heard[-1][0] == frozenset({"fresh"})
    seqs = [s for _, s in heard]
    assert seqs == sorted(set(seqs))


def test_listener_called_under_the_write_lock_with_the_new_seq(db):
    seen = []
    db.listen(lambda colls, seq: seen.append((db.engine.lock._writer, seq, db.seq)))
    db.query("put other {x: 1}")
    assert seen == [(True, db.seq, db.seq)]


def test_stats_and_seq(db, clock):
    db.query("put jobs [{kind: 'a', run_at: now()}, {kind: 'b', run_at: now() + 60000}, "
             "{kind: 'c', run_at: now() + 60000, owner: 'w'}, {kind: 'd'}]")
    st = db.stats()
    jobs = st["collections"]["jobs"]
    assert jobs["documents"] == 4
    assert (jobs["ready"], jobs["delayed"], jobs["leased"], jobs["dead"]) == (1, 1, 1, 1)
    assert st["collections"]["other"]["documents"] == 0


def test_now_is_the_clock(db, clock):
    assert db.now() == clock()
    clock.advance(5)
    assert db.now() == clock()


def test_closed_database_refuses(clock):
    d = Database(clock=clock)
    d.query("create collection t (a int)")
    d.close()
    with pytest.raises(FenecError):
        d.query("put t {a: 1}")


# ---------------------------------------------------------------- file-backed round trips

SCHEMA = ("create collection every (b bool, i int @sorted, f float @hash, t text @unique, s string, "
          "y bytes, z blob, ts timestamp @ttl(1d), tz timestamptz, j json, g geo @geo, li [int], "
          "lt [timestamp], r text required)")
DOCS = ('put every [{b: true, i: -9223372036854775808, f: 2.5, t: "çağ", s: "x", y: "bytes", z: "\\0", '
        'ts: now(), tz: "2026-09-19T12:34:56.789+03:00", j: {b: [1, 2.5, "x", null, true], a: {n: 1}}, '
        'g: [13.361389, 38.115556], li: [1, 2], lt: ["2026-01-01"], r: "one"}, '
        '{i: 9223372036854775807, f: -0.0, g: [-180, -90], j: 19.99, r: "two"}, {r: "three", j: "text"}]')


def everything(d):
    return (d.query("get every order id"), d.schemas(), d.query("get every order i desc limit 2 select id"),
            d.query("get every where t = 'çağ' select id"), d.query("get every where j.a.n = 1 select id"))


def test_file_reopen_round_trips_every_field_type(tmp_path, clock):
    path = str(tmp_path / "data.fenec")

    def reopened(d: Database) -> Database:
        """Closed, and opened again from its file: every row, the schema and the indexes as they were."""
        want = everything(d)
        d.close()
        d = Database(path, sync="always", clock=clock)
        assert everything(d) == want
        return d
    d = Database(path, sync="always", clock=clock)
    d.query(SCHEMA)
    d.query("create index on every (j.a.n) @hash")
    d.query(DOCS)
    d.query("put every {r: 'four'}")
    d.query("del every where id = 4")  # the top id is gone: it must never come back
    d.query("set every {j.a.m: 2} where id = 1")
    d = reopened(d)
    d.query("put every {r: 'five'}")
    assert d.query("get every order id desc limit 1 select id") == [{"id": 5}]
    d.query("del every where id = 5")
    d.compact()
    d = reopened(d)
    d.query("put every {r: 'six'}")
    assert d.query("get every order id desc limit 1 select id") == [{"id": 6}]
    fails(lambda: d.query("put every {t: 'çağ', r: 'x'}"), 409)  # @unique survives
    d.close()


def test_file_reopen_keeps_idempotency_keys_and_drops(tmp_path, clock):
    path = str(tmp_path / "k.fenec")
    d = Database(path, clock=clock)
    d.query("create collection a (x int)")
    d.query("create collection b (x int)")
    d.query("drop collection b")
    d.execute([("put a {x: 1}", None)], idempotency=idem("key", b"h"))
    d.close()
    d = Database(path, clock=clock)
    assert [s["name"] for s in d.schemas()] == ["a"]
    assert d.execute([("put a {x: 1}", None)], idempotency=idem("key", b"h")).replayed is not None
    fails(lambda: d.execute([("put a {x: 2}", None)], idempotency=idem("key", b"other")), 422)
    d.close()


def test_failed_block_leaves_nothing_in_the_file(tmp_path, clock):
    path = str(tmp_path / "f.fenec")
    d = Database(path, clock=clock)
    d.query("create collection a (x int)")
    fails(lambda: d.batch([("put a {x: 1}", None), ("put a {x: 'no'}", None)]), 400)
    d.close()
    d = Database(path, clock=clock)
    assert d.query("get a") == []
    d.query("put a {x: 1}")
    assert d.query("get a select id") == [{"id": 1}]
    d.close()


def test_sweep_waits_a_minute_past_expiry(clock):
    d = Database(clock=clock)
    d.query("create collection s (k text, at timestamp @ttl(10s))")
    d.query("put s [{k: 'a', at: now()}, {k: 'b', at: now() + 5000}, {k: 'c'}]")
    heard = []
    d.listen(lambda colls, seq: heard.append(colls))
    clock.advance(10_000 + 59_999)
    assert d.sweep() == 0 and heard == []
    assert d.query("get s where expired() select k") == [{"k": "a"}, {"k": "b"}]  # a reaper still sees them
    clock.advance(1)
    assert d.sweep() == 1 and heard == [frozenset({"s"})]
    assert d.query("get s where expired() select k") == [{"k": "b"}]
    clock.advance(5_000)
    assert d.sweep() == 1
    assert d.query("get s select k") == [{"k": "c"}]  # null never expires


def test_sweep_drops_idempotency_keys_past_their_ttl(clock):
    d = Database(clock=clock)
    d.query("create collection a (x int)")
    d.execute([("put a {x: 1}", None)], idempotency=idem("k", ttl=1000))
    clock.advance(999)
    d.sweep()
    assert d.execute([("put a {x: 1}", None)], idempotency=idem("k", ttl=1000)).replayed is not None
    clock.advance(1)
    d.sweep()
    assert d.execute([("put a {x: 1}", None)], idempotency=idem("k", b"new", ttl=1000)).replayed is None


@pytest.mark.sources  # a fault injected inside the engine (conftest)
def test_a_fault_in_a_read_is_a_500_fenec_error_and_reads_go_on(db, monkeypatch):
    # Bad input is refused with its 400 before this; a fault left in the engine must still reach
    # the caller as a FenecError (logged), like a fault in a write block, never a raw exception.
    import fenecdb_server.engine.running as D

    def broken(*a, **k):
        raise ZeroDivisionError("integer division or modulo by zero")
    db.query("put jobs {kind: 'a'}")
    with monkeypatch.context() as m:
        m.setattr(D, "run_get", broken)
        e = fails(lambda: db.query("get jobs"), 500, "internal error: ZeroDivisionError")
        assert e.at is None
        e = fails(lambda: db.batch([("get other", None), ("get jobs", None)]), 500)
        assert e.at == 0
    assert db.query("get jobs select kind") == [{"kind": "a"}]
    db.query("put other {x: 1}")  # writes are not refused after it: the disk did not fail
