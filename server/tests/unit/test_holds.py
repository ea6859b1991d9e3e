"""holds: what a held claim may hold (http.md §8.2, fenecql.md §15), its line key, `would_take`, and
`next_moment` for every comparison with shifts and for @ttl expiry."""

from __future__ import annotations

import pytest
from conftest import SPEC_EPOCH_MS
from fenecdb_server import FenecError

NOW = SPEC_EPOCH_MS


@pytest.fixture
def db(db):  # conftest's, on its clock
    db.query("create collection jobs (run_at timestamp @sorted, owner text, plain timestamp, n int, meta json)")
    db.query("create collection holds (k text, seen timestamp @ttl(10s))")
    return db


def hold(db, *stmts):
    return db.prepare_hold([(s, p) for s, p in stmts] if stmts and isinstance(stmts[0], tuple)
                           else [(s, None) for s in stmts])


def refused(db, needle, *stmts):
    with pytest.raises(FenecError) as ei:
        hold(db, *stmts)
    assert ei.value.status == 400 and needle in ei.value.message, ei.value
    return ei.value


CLAIM = "set jobs {owner: $1} where run_at <= now() and owner = null order run_at limit 1 returning id"


@pytest.mark.parametrize("text", ["put jobs {n: 1}", "insert jobs {n: 1}", "create collection z (a int)",
                                  "drop collection holds", "create index on jobs (n) @hash"])
def test_writes_otherwise_refused(db, text):
    refused(db, "writes otherwise", text)
    refused(db, "writes otherwise", ("get jobs", None), (text, None))


@pytest.mark.parametrize("where", [
    "run_at = now()", "run_at != now()", "bucket(now(), 60000) = run_at", "bucket(run_at, 60000) <= now()",
    "run_at - now() < 5", "run_at <= now() + n", "run_at <= now() * 2", "run_at <= now() + 1.5",
    "now()", "coalesce(run_at, now()) <= now()", "run_at <= now() + 1000 * 2",
])
def test_time_only_refusals(db, where):
    refused(db, "time only", f"del jobs where {where}")


@pytest.mark.parametrize("where", [
    "run_at <= now()", "now() - 60000 > run_at", "run_at <= now() + $1", "run_at >= now() - 5000",
    "plain < now()", "meta.at <= now()", "run_at <= now() - $1 + 3", "run_at <= now() and owner = null",
])
def test_allowed_uses_of_now(db, where):
    h = db.prepare_hold([(f"del jobs where {where}", [1000])])
    assert h.held


def test_reads_only_are_not_held(db):
    h = hold(db, "get jobs where run_at <= now()")
    assert not h.held and h.collections == frozenset({"jobs"})


def test_batch_of_set_and_reads(db):
    h = db.prepare_hold([("get holds", None), (CLAIM, ["w1"]), ("del jobs where n = $1", [3])])
    assert h.held and h.collections == frozenset({"jobs", "holds"})


def test_unknown_collection_404(db):
    with pytest.raises(FenecError) as ei:
        hold(db, "del nosuch where x = 1")
    assert ei.value.status == 404


def test_line_keys(db):
    a = db.prepare_hold([(CLAIM, ["w1"])]).line_key
    b = db.prepare_hold([(CLAIM, ["w2"])]).line_key  # only the written value differs
    assert a == b
    hash(a)
    k1 = db.prepare_hold([("del jobs where n = $1 and run_at <= now()", [1])]).line_key
    k2 = db.prepare_hold([("del jobs where n = $1 and run_at <= now()", [2])]).line_key
    k3 = db.prepare_hold([("del jobs where n = $1 and run_at <= now()", [1])]).line_key
    assert k1 != k2 and k1 == k3
    other_order = db.prepare_hold([(CLAIM.replace("order run_at", "order n"), ["w1"])]).line_key
    assert other_order != a
    other_coll = db.prepare_hold([("del holds where k = $1", ["x"])]).line_key
    assert other_coll != db.prepare_hold([("del holds where k = $1", ["y"])]).line_key
    lists = [db.prepare_hold([("del jobs where n in [$1, $2]", v)]).line_key for v in ([1, 2], [1, 2], [2, 1])]
    assert lists[0] == lists[1] != lists[2]


def test_look(db, clock):
    h = db.prepare_hold([(CLAIM, ["w1"])])
    assert db.look(h.would_take) is False
    db.query("put jobs {run_at: now() + 5000}")
    assert db.look(h.would_take) is False
    clock.advance(5000)
    assert db.look(h.would_take) is True
    db.query("set jobs {owner: 'w9'}")
    assert db.look(h.would_take) is False
    h2 = db.prepare_hold([("del jobs where owner = $1", ["w9"])])
    assert db.look(h2.would_take) is True


def test_look_reports_true_when_the_collection_is_gone(db):
    h = db.prepare_hold([("del holds where k = 'a'", None)])
    db.query("drop collection holds")
    assert db.look(h.would_take) is True  # run it, so it is answered its 404


@pytest.mark.parametrize("op,want", [
    ("<=", NOW + 5000), ("<", NOW + 5001), (">", NOW + 5000), (">=", NOW + 5001),
])
def test_next_moment_each_operator(db, op, want):
    db.query("put jobs [{run_at: $1}, {run_at: $2}, {run_at: $3}]", [NOW - 100, NOW + 5000, NOW + 9000])
    h = db.prepare_hold([(f"del jobs where run_at {op} now()", None)])
    assert db.look(h.next_moment) == want


@pytest.mark.parametrize("where,params,want", [
    ("run_at <= now() + 1000", None, NOW + 4000),
    ("run_at <= now() - 1000", None, NOW + 900),  # the row 100 ms old is 900 ms short
    ("run_at <= now() + $1", [2000], NOW + 3000),
    ("now() - 1000 >= run_at", None, NOW + 900),
    ("run_at > now() + 1000", None, NOW + 4000),
    ("run_at < now() - $1", [500], NOW + 401),
    ("run_at < now() - $1", [50], NOW + 5051),
    ("plain <= now()", None, NOW + 5000),  # no index: the rows are read
    ("meta.at <= now()", None, NOW + 5000),  # a path
])
def test_next_moment_with_shifts(db, where, params, want):
    db.query("put jobs [{run_at: $1, plain: $1, meta: {at: $3}}, {run_at: $2, plain: $2, meta: {at: $4}}]",
             [NOW - 100, NOW + 5000, NOW - 100, NOW + 5000])
    h = db.prepare_hold([(f"del jobs where {where}", params)])
    assert db.look(h.next_moment) == want


def test_next_moment_none_when_nothing_ahead(db):
    db.query("put jobs {run_at: $1}", [NOW - 5])
    assert db.look(db.prepare_hold([("del jobs where run_at <= now()", None)]).next_moment) is None
    assert db.look(db.prepare_hold([("del jobs where n = 1", None)]).next_moment) is None


def test_next_moment_ttl_expiry(db, clock):
    db.query("put holds [{k: 'a', seen: now()}, {k: 'b', seen: now() + 3000}]")
    h = db.prepare_hold([("del holds where k = 'zz'", None)])
    assert db.look(h.next_moment) == NOW + 10_000  # row a expires then: answers may change
    clock.advance(10_000)
    assert db.look(h.next_moment) == NOW + 13_000


def test_next_moment_moves_with_the_clock(db, clock):
    db.query("put jobs [{run_at: $1}, {run_at: $2}]", [NOW + 1000, NOW + 2000])
    h = db.prepare_hold([(CLAIM, ["w"])])
    assert db.look(h.next_moment) == NOW + 1000
    clock.advance(1000)
    assert db.look(h.would_take) is True and db.look(h.next_moment) == NOW + 2000


def test_patch_may_read_the_clock_freely(db):
    assert db.prepare_hold([("set jobs {run_at: now() + 1000 * n} where n = 1", None)]).held


def test_a_read_beside_the_claim_may_use_the_clock(db):
    # http.md §8.2 refuses `time only` in the filters of set/del; a get beside them reads freely.
    h = db.prepare_hold([("get jobs where bucket(now(), 1000) = bucket(run_at, 1000)", None),
                         ("del jobs where n = 1", None)])
    assert h.held
    assert hold(db, ("get jobs where run_at = now() or now() > plain", None), (CLAIM, ["w"])).held
    refused(db, "time only", ("get jobs where run_at = now()", None), ("del jobs where run_at = now()", None))


def test_next_moment_reads_text_as_time_and_floats_at_whole_ms(db, clock):
    # A held claim may compare a text field (or a path holding text) with now(): §3.4 reads the text
    # as a time, so the wake-up moment is when the clock reaches it. A @sorted text field raised a
    # TypeError here (its index keys are text), and a plain one never woke on time.
    db.query("create collection tx (s text @sorted, u text, f float @sorted, meta json)")
    db.query("put tx [{s: $1, u: $2, f: $3, meta: {at: $4}}, {s: 'not a time', u: 'b', meta: {at: $5}}]",
             ["2026-05-03T09:20:05Z", "2026-05-03T09:20:07+00:00", NOW + 2.5, "2026-05-03T09:20:09Z", NOW + 4])
    for where, ahead in [("s <= now()", 5000), ("u <= now()", 7000), ("meta.at <= now()", 4),
                         ("f <= now()", 3), ("f < now()", 3), ("f <= now() - 1", 4), ("now() - 1000 > s", 6001)]:
        h = db.prepare_hold([(f"del tx where {where}", None)])
        assert db.look(h.would_take) is False and db.look(h.next_moment) == NOW + ahead, where
    clock.advance(5000)
    h = db.prepare_hold([("del tx where s <= now()", None)])
    assert db.look(h.would_take) is True and db.look(h.next_moment) is None
