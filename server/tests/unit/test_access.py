"""access: `pick` answers what the naive evaluation answers (fenecql.md §14), reading fewer rows:
walks stop at the page, give up past an eighth, the smaller range wins, inexact bounds bypass."""

from __future__ import annotations

import random

import pytest
from fenecdb_server import Database, FenecError
from fenecdb_server import values as V
from fenecdb_server.engine.access import Query, pick
from fenecdb_server.plan.compile import Env

NOW = 1777800000000


def build(n=2000, indexed=True, seed=1):
    db = Database(clock=lambda: NOW)
    idx = " @sorted" if indexed else ""
    db.query(f"create collection jobs (run_at timestamp{idx}, prio int{idx}, queue text, x float{idx}, "
             f"tag text{' @hash' if indexed else ''}, meta json)")
    rnd = random.Random(seed)
    docs = []
    for i in range(n):
        docs.append({"run_at": NOW + rnd.randint(-5000, 5000) * 1000 if rnd.random() > 0.05 else None,
                     "prio": rnd.randint(0, 9), "queue": "rare" if i >= n - 3 else "common",
                     "x": rnd.choice([0.5, 1.0, 2.25, 2**53 + 0.0]), "tag": rnd.choice(["a", "b", "c", None]),
                     "meta": {"rank": rnd.choice([1, 2.5, "z", None, True])}})
    if indexed:
        db.query("create index on jobs (meta.rank) @sorted")
    for k in range(0, n, 500):
        db.query("put jobs $1", [docs[k:k + 500]])
    return db


def run(db, text, params=()):
    """(ids answered, rows the filter was asked about)."""
    (stmt,) = db.engine.texts.parse(text)
    p = db.engine.catalog.prepared(text, stmt)
    q = p.query
    seen = [0]
    filt = q.filter

    def counting(row, env):
        seen[0] += 1
        return filt(row, env)
    # the walk asks the filter too, so every row a plan reads is counted
    q2 = Query(counting if filt else None, q.access, q.order, q.limit, q.offset, counting if filt else None)
    got = pick(db.collection("jobs"), q2, Env(list(params), V.Ts(NOW)))
    return [r["id"] for r in got], seen[0]


@pytest.fixture(scope="module")
def dbs():
    return build(indexed=True), build(indexed=False)


QUERIES = [
    ("get jobs where run_at <= now() order run_at limit 10", ()),
    ("get jobs where run_at <= now() order run_at desc limit 10", ()),
    ("get jobs order run_at limit 7 offset 3", ()),
    ("get jobs order run_at desc limit 300", ()),
    ("get jobs where queue = 'rare' order run_at limit 2", ()),
    ("get jobs where run_at > now() and run_at < now() + 20000 order prio desc limit 5", ()),
    ("get jobs where prio = 3 and run_at >= $1 order run_at limit 4", ["2026-05-03T09:00:00Z"]),
    ("get jobs where prio >= 2.5 and prio < 3.5", ()),
    ("get jobs where prio > 12.5", ()),
    ("get jobs where x = 2.25 order x limit 3", ()),
    ("get jobs where x >= $1", [2**53 + 1]),
    ("get jobs where x > $1", [2**53]),
    ("get jobs where run_at < 'not a time' limit 5", ()),
    ("get jobs where run_at = null limit 5", ()),
    ("get jobs where run_at <= null", ()),
    ("get jobs where prio < 'a' order prio limit 4", ()),
    ("get jobs where prio > 5 and prio < 2", ()),
    ("get jobs where prio >= 5 and prio <= 5 order id desc limit 3", ()),
    ("get jobs where tag = 'a' and prio = 1 order run_at limit 3", ()),
    ("get jobs where tag in ['b', 'c'] and tag = 'b' limit 9", ()),
    ("get jobs where tag = null limit 3", ()),
    ("get jobs where tag = 1", ()),
    ("get jobs where id in [$1, $2, $3, $4, $5, $6]", [3, 9, 3.0, 2.5, 99999, "x"]),
    ("get jobs where id = 7.0", ()),
    ("get jobs where id > 1990", ()),
    ("get jobs order meta.rank limit 20", ()),
    ("get jobs order meta.rank desc limit 20", ()),
    ("get jobs where meta.rank > 1 order meta.rank limit 20", ()),
    ("get jobs where meta.rank >= 'a' and meta.rank < $1", [[0]]),
    ("get jobs where meta.rank <= $1 order meta.rank desc limit 20", ["2026-05-03"]),
    ("get jobs order prio, run_at desc limit 20", ()),
]


@pytest.mark.parametrize("text,params", QUERIES)
def test_indexes_never_change_answers(dbs, text, params):
    with_idx, without = dbs
    assert run(with_idx, text, params)[0] == run(without, text, params)[0]


# (statement, params, whether it looks its row up by id): a second equality an index answers
# (`tag` is @hash here, or `id` twice) leaves the choice to the general plan
BY_ID = [
    ("get jobs where id = $1 and prio = $2", [7, 3], True),
    ("get jobs where id = $1 and tag = 'a'", [12], False),
    ("get jobs where id = $1", [7], True),
    ("get jobs where id = $1", [7.0], True),
    ("get jobs where id = $1", [2.5], True),
    ("get jobs where id = $1", ["7"], True),
    ("get jobs where id = $1", [None], True),
    ("get jobs where id = $1", [99999], True),
    ("get jobs where id = $1", [-1], True),
    ("get jobs where id = $1", [True], True),
    ("get jobs where id = $1 limit 0", [7], True),
    ("get jobs where id = $1 limit 1 offset 1", [7], True),
    ("get jobs where id = $1 order run_at desc", [7], True),
    ("get jobs where id = $1 and run_at <= now() order run_at limit 10", [7], True),
    ("get jobs where id = $1 and id = $2", [7, 8], False),
    ("get jobs where id = $1 and prio > 100", [7], True),
    ("get jobs where id = $1 + 1", [6], True),
    ("get jobs where id = $1 + 1", ["x"], True),
]


@pytest.mark.parametrize("text,params,by_id", BY_ID)
def test_a_lookup_by_id_answers_as_the_general_plan(dbs, text, params, by_id):
    # `Query.by_id` looks the row up at once: the same answer as the plan without it, one row read at most
    db = dbs[0]
    (stmt,) = db.engine.texts.parse(text)
    q = db.engine.catalog.prepared(text, stmt).query
    coll = db.collection("jobs")
    general = Query(q.filter, q.access, q.order, q.limit, q.offset, q.walk_filter)
    general.by_id = None

    def ids(query):
        try:
            return [r["id"] for r in pick(coll, query, Env(list(params), V.Ts(NOW)))]
        except FenecError as e:
            return ("error", e.kind, e.message)
    assert ids(q) == ids(general)
    assert (q.by_id is not None) == by_id
    if q.by_id is not None and type(params[0]) is int:
        assert run(db, text, params)[1] <= 1  # the filter asked about the one row at most


def test_a_claim_reads_only_what_it_takes(dbs):
    ids, seen = run(dbs[0], "get jobs where run_at <= now() order run_at limit 10")
    assert len(ids) == 10 and seen == 10


def test_walk_gives_up_past_an_eighth_and_still_answers(dbs):
    with_idx, without = dbs
    text = "get jobs where queue = 'rare' order run_at limit 2"
    ids, seen = run(with_idx, text)
    assert ids == run(without, text)[0] and len(ids) == 2
    n = 2000
    # gave up after an eighth, then read the matches: about 1.125 scans at worst
    assert n < seen <= n + n // 8 + 2


def test_smaller_range_wins_over_the_walk(dbs):
    text = "get jobs where run_at >= $1 and run_at <= $2 order prio limit 3"
    lo, hi = NOW - 10_000, NOW + 10_000  # a handful of rows of 2 000
    ids, seen = run(dbs[0], text, [lo, hi])
    assert ids == run(dbs[1], text, [lo, hi])[0]
    assert seen < 100


def test_wide_range_is_scanned_not_sorted(dbs):
    ids, seen = run(dbs[0], "get jobs where prio >= 1")
    assert ids == run(dbs[1], "get jobs where prio >= 1")[0]
    assert seen == 2000


def test_hash_equality_is_a_lookup(dbs):
    ids, seen = run(dbs[0], "get jobs where tag = 'a' and prio = 1")
    assert ids == run(dbs[1], "get jobs where tag = 'a' and prio = 1")[0]
    assert seen < 700
    ids, seen = run(dbs[0], "get jobs where id in [5, 6]")
    assert ids == [5, 6] and seen == 2


def test_empty_ranges_read_nothing(dbs):
    assert run(dbs[0], "get jobs where prio > 5 and prio < 2") == ([], 0)
    assert run(dbs[0], "get jobs where run_at <= null") == ([], 0)


def test_no_order_stops_at_the_page(dbs):
    ids, seen = run(dbs[1], "get jobs where prio >= 0 limit 5 offset 5")
    assert len(ids) == 5 and seen == 10


@pytest.mark.parametrize("seed", [3, 4])
def test_random_ranges_against_the_scan(seed):
    a, b = build(300, True, seed), build(300, False, seed)
    rnd = random.Random(seed)
    for _ in range(40):
        op1, op2 = rnd.choice(["<", "<=", ">", ">=", "="]), rnd.choice(["<", "<=", ">", ">="])
        v1, v2 = rnd.choice([3, 4.5, "x", None, 2**53 + 1]), rnd.randint(-9, 9) * 1000 + NOW
        desc = rnd.choice(["", " desc"])
        text = f"get jobs where prio {op1} $1 and run_at {op2} $2 order run_at{desc} limit {rnd.randint(1, 30)}"
        assert run(a, text, [v1, v2])[0] == run(b, text, [v1, v2])[0], text


def twins(schema_indexed, schema_plain, puts):
    out = []
    for schema in (schema_indexed, schema_plain):
        db = Database(clock=lambda: NOW)
        db.query(schema)
        for text in puts:
            db.query(text)
        out.append(db)
    return out


def test_hash_text_field_against_a_timestamp():
    a, b = twins("create collection t (s text @hash)", "create collection t (s text)",
                 ["put t {s: '2026-05-03T09:20:00Z'}"])
    want = b.query("get t where s = now() select id")
    assert want == [{"id": 1}]
    assert a.query("get t where s = now() select id") == want


def test_hash_bytes_field_against_text():
    a, b = twins("create collection t (y bytes @hash)", "create collection t (y bytes)", ["put t {y: 'ab'}"])
    want = b.query("get t where y = 'ab' select id")
    assert want == [{"id": 1}]
    assert a.query("get t where y = 'ab' select id") == want
    assert a.query("get t where y in ['ab'] select id") == want


def test_hash_lookups_find_every_spelling_a_scan_finds():
    # Every pair of field kind and value kind that `=` can find equal (§3.4 rules 3-5), through
    # `=` and `in`, on @hash, @unique and a hashed json path: the lookup answers what a scan does.
    schema = "create collection t (s text{a}, y bytes{a}, u text{b}, ts timestamp{a}, n int{a}, j json)"
    a, b = twins(schema.format(a=" @hash", b=" @unique"), schema.format(a="", b=""),
                 ["put t [{s: '2026-05-03T09:20:00Z', y: 'ab', u: '2026-05-03 09:20', ts: now(), n: 3, "
                  "j: {k: '2026-05-03T09:20:00+00:00'}}, "
                  "{s: '2026-05-03 09:20:00.000Z', y: 'é', u: 'x', ts: now() + 1, n: 4, j: {k: 1777800000000}}, "
                  "{s: 'ab', y: 'zz', u: 'é', ts: null, n: null, j: {k: 'ab'}}]"])
    a.query("create index on t (j.k) @hash")
    cases = [
        ("s = now()", None, [1, 2]), ("s in [$1, 'ab']", ["2026-05-03T09:20:00Z"], [1, 3]),
        ("s = $1", [V.Ts(NOW)], [1, 2]), ("u = now()", None, [1]), ("s = $1", [b"ab"], [3]),
        ("u = $1", ["é".encode()], [3]), ("s = $1", [b"\xff"], []),
        ("y = 'ab'", None, [1]), ("y in ['é', 'zz']", None, [2, 3]), ("y = $1", [b"zz"], [3]),
        ("ts = '2026-05-03T09:20:00Z'", None, [1]), ("ts = 'not a time'", None, []),
        ("ts in [$1, 1777800000001]", ["2026-05-03T09:20:00.000+00:00"], [1, 2]),
        ("n = 3.0", None, [1]), ("n = $1", [V.Ts(4)], [2]), ("n = true", None, []), ("n = '3'", None, []),
        ("j.k = now()", None, [1, 2]), ("j.k = $1", [b"ab"], [3]), ("j.k = 'ab'", None, [3]),
        ("id = $1", [float("nan")], []), ("id = $1", [float("inf")], []), ("id = 2.0", None, [2]),
    ]
    for where, params, want in cases:
        text = f"get t where {where} select id"
        got = b.query(text, params)
        assert [r["id"] for r in got] == want, text
        assert a.query(text, params) == got, text


def test_an_object_parameter_finds_the_stored_object_in_any_key_order():
    a, b = twins("create collection t (j json)", "create collection t (j json)",
                 ["put t [{j: {h: {b: 1, a: [1, {d: 2, c: 3}]}}}, {j: {h: 'x'}}]"])
    a.query("create index on t (j.h) @hash")
    param = {"a": [1, {"c": 3, "d": 2}], "b": 1}
    for text, p in [("get t where j.h = $1 select id", [param]), ("get t where j.h = $1 select id", [dict(reversed(param.items()))]),
                    ("get t where j.h in [$1, 'y'] select id", [dict(reversed(param.items()))]),
                    ("get t where j = $1 select id", [{"h": dict(reversed(param.items()))}])]:
        assert b.query(text, p) == [{"id": 1}], text
        assert a.query(text, p) == [{"id": 1}], text


def test_a_bound_that_raises_is_no_plan():
    # `and` stops at the first false term (§9.5): a plain scan never works out a later term's
    # bound when no row passes the terms before it, so an index must not raise on it either.
    a, b = twins("create collection t (j int, s text @sorted, h text @hash, n int @unique, g geo @geo)",
                 "create collection t (j int, s text, h text, n int, g geo)",
                 ["put t [{j: 1, s: 'a', h: 'x', n: 1}, {j: 2, s: 'b', h: 'y', n: 2}]"])
    for text, params in [
        ("get t where j = 5 and s >= timestamp($1) select id", [2.5]),
        ("get t where j = 5 and s < lower($1) order s limit 1 select id", [3]),
        ("get t where j = 5 and h = $1 + 1 select id", ["x"]),
        ("get t where j = 5 and h in [$1, 'x'] and n = upper($1) select id", [7]),
        ("get t where j = 5 and distance(g, $1) <= 10 select id", [[500, 0]]),
        ("get t where j = 5 and within(g, $1) select id", [[0, "a", 1, 1]]),
        ("get t where j = 5 and distance(g, $1) <= $2 select id", [[0, 0], "far"]),
    ]:
        assert b.query(text, params) == [], text
        assert a.query(text, params) == [], text
    for db in (a, b):  # where the plain evaluation meets the bad bound, both refuse it alike
        with pytest.raises(FenecError) as ei:
            db.query("get t where j = 1 and h = $1 + 1", ["x"])
        assert ei.value.status == 400


def test_geo_plans_never_change_answers():
    rnd = random.Random(5)
    pts = ([[rnd.uniform(179.0, 180), rnd.uniform(-1, 1)] for _ in range(100)]
           + [[rnd.uniform(-180, -179.0), rnd.uniform(-1, 1)] for _ in range(100)]
           + [[rnd.uniform(13, 14), rnd.uniform(38, 39)] for _ in range(300)])
    a, b = twins("create collection t (p geo @geo)", "create collection t (p geo)", ["put t [{p: null}, {}]"])
    for db in (a, b):
        db.query("put t $1", [[{"p": p} for p in pts]])
    for text, params in [
        ("get t order distance(p, [179.99, 0]) limit 5 select id", None),
        ("get t order distance(p, [-179.99, 0.5]) limit 5 select id", None),
        ("get t order distance(p, $1) limit 7 offset 2 select id", [[13.5, 38.5]]),
        ("get t where distance(p, [13.5, 38.5]) <= 20000 select id", None),
        ("get t where distance(p, [179.999, 0.1]) <= 30000 select id", None),
        ("get t where 9000.5 > distance($1, p) select id", [[13.5, 38.5]]),
        ("get t where within(p, [179.5, -0.5, -179.5, 0.5]) select id", None),
        ("get t where within(p, [13.2, 38.2, 13.6, 38.9]) order id desc limit 4 select id", None),
        ("get t where within(p, $1) and distance(p, [13.4, 38.4]) < 9000 select id", [[13, 38, 14, 39]]),
    ]:
        want = b.query(text, params)
        assert a.query(text, params) == want, text
        assert want, text  # each query matches something


@pytest.mark.parametrize("text,params", [
    ("get t where a > $1 select id", [2**53 + 1]),
    ("get t where a >= $1 and a < $2 select id", [2.0**53, 2**53 + 2]),
    ("get t where a = 9007199254740993.0 select id", None),  # the literal is the float 2^53
    ("get t where a < 12.5 and a > 1.5 select id", None),
    ("get t where a = $1 select id", [2**53 + 1]),
    ("get t where ts > $1 select id", [2**53 + 1]),
    ("get t where ts = $1 select id", [2**53 + 1]),
    ("get t where ts >= $1 order ts limit 2 select id", ["1970-01-01"]),
    ("get t where f < $1 select id", [2**53 + 1]),
    ("get t where f = $1 select id", [2**53 + 2]),
    ("get t where f != $1 and f <= $1 select id", [2**53 + 1]),
    ("get t where a < 'x' order a desc limit 2 select id", None),
    ("get t where a > true select id", None),
])
def test_exactness_with_mixed_kinds(text, params):
    schema = "create collection t (a int{0}, ts timestamp{0}, f float{0})"
    a, b = twins(schema.format(" @sorted"), schema.format(""), [])
    rows = [{"a": 2**53 + k, "ts": 2**53 + k, "f": 2.0**53 + 2 * k} for k in range(-1, 3)] + [{"a": 3}]
    for db in (a, b):
        db.query("put t $1", [rows])
    want = b.query(text, params)
    assert a.query(text, params) == want
    assert want, text
