"""planner: which terms of the `and` chain reach which index (fenecql.md §14 rule 2); or/not/!= never do."""

from __future__ import annotations

from fenecdb_server import values as V
from fenecdb_server.plan.compile import Ctx, Env
from fenecdb_server.plan.planner import and_terms, index_kind, plan_access
from fenecdb_server.plan.schema import FieldInfo, Schema
from fenecdb_server.ql import ast as A
from fenecdb_server.ql.parser import parse

SCHEMA = Schema("jobs", {
    "run_at": FieldInfo("run_at", "timestamp", index="sorted"),
    "exp": FieldInfo("exp", "timestamp", index="ttl", ttl_ms=1000),
    "owner": FieldInfo("owner", "text", index="hash"),
    "email": FieldInfo("email", "text", index="unique"),
    "queue": FieldInfo("queue", "text"),
    "prio": FieldInfo("prio", "int", index="sorted"),
    "at": FieldInfo("at", "geo", index="geo"),
    "meta": FieldInfo("meta", "json"),
}, {"meta.lang": "hash", "meta.rank": "sorted"})
NOW = V.Ts(1777800000000)


def plan(text):
    s = parse(text)[0]
    return plan_access(SCHEMA, s.where, s.order, Ctx(SCHEMA))


def reached(acc):
    return (sorted((t, [r.op for r in rs]) for t, rs in acc.ranges.items()),
            sorted(e.target for e in acc.eqs), sorted((g.target, g.kind) for g in acc.geos))


def test_index_kinds():
    assert index_kind(SCHEMA, "id") == "id"
    assert index_kind(SCHEMA, "run_at") == "sorted"
    assert index_kind(SCHEMA, "meta.lang") == "hash"
    assert index_kind(SCHEMA, "queue") is None
    assert index_kind(SCHEMA, "meta.other") is None


def test_and_terms_flattens_nested_ands_only():
    w = parse("get jobs where a = 1 and (b = 2 and c = 3) and (d = 4 or e = 5)")[0].where
    terms = and_terms(w)
    assert len(terms) == 4 and isinstance(terms[-1], A.Or)
    assert and_terms(None) == []


def test_claim_shape():
    acc = plan("set jobs {owner: $1} where run_at <= now() and queue = 'q' order run_at limit 10")
    assert reached(acc) == ([("run_at", ["<="])], [], [])
    assert acc.walk == "run_at" and not acc.walk_desc
    assert acc.ranges["run_at"][0].bound(None, Env([], NOW)) == NOW  # now() folded before the walk


def test_ranges_both_sides_and_flipped():
    acc = plan("get jobs where now() - 3600000 <= run_at and run_at < now() and 3 > prio and prio >= $1")
    assert reached(acc) == ([("prio", ["<", ">="]), ("run_at", [">=", "<"])], [], [])
    env = Env([1], NOW)
    assert acc.ranges["run_at"][0].bound(None, env) == NOW - 3600000


def test_equalities_reach_hash_unique_id_and_sorted():
    acc = plan("get jobs where owner = $1 and email = 'a' and id = 3 and prio = 2 and meta.lang = 'tr'")
    _, eqs, _ = reached(acc)
    assert eqs == ["email", "id", "meta.lang", "owner"]
    assert sorted(acc.ranges) == ["id", "prio"]
    acc = plan("get jobs where owner in ['a', 'b'] and id in [$1, $2]")
    assert sorted(e.target for e in acc.eqs) == ["id", "owner"]
    assert [len(e.bounds) for e in acc.eqs if e.target == "id"] == [2]


def test_hash_is_not_a_range():
    acc = plan("get jobs where owner > 'a' and email <= 'b' and meta.lang >= 'x'")
    assert reached(acc) == ([], [], [])


def test_ttl_field_is_a_range_and_a_walk():
    acc = plan("get jobs where exp > now() order exp desc limit 3")
    assert reached(acc)[0] == [("exp", [">"])] and acc.walk == "exp" and acc.walk_desc


def test_path_sorted_range():
    acc = plan("get jobs where meta.rank > 2 order meta.rank limit 2")
    assert reached(acc)[0] == [("meta.rank", [">"])] and acc.walk == "meta.rank"


def test_or_not_ne_and_others_never_reach():
    for where in ("run_at <= now() or owner = 'a'", "not (run_at <= now())", "not owner = 'a'",
                  "owner != 'a'", "prio <> 2", "owner ~ 'a'", "queue = 'q'", "run_at <= prio",
                  "owner = queue", "(prio = 1 or prio = 2)", "not (id = 3)", "owner in ['a'] or id = 1"):
        acc = plan(f"get jobs where {where}")
        assert reached(acc) == ([], [], []), where


def test_geo_terms():
    acc = plan("get jobs where distance(at, $1) <= 500 and within(at, [13, 38, 14, 39])")
    assert reached(acc)[2] == [("at", "box"), ("at", "radius")]
    acc = plan("get jobs where 500 > distance($1, at)")
    assert reached(acc)[2] == [("at", "radius")]
    acc = plan("get jobs where distance(at, $1) >= 500")
    assert reached(acc)[2] == []
    acc = plan("get jobs where distance(at, $1) <= 500 or true")
    assert reached(acc)[2] == []


def test_order_walks():
    assert plan("get jobs order prio desc limit 1").walk == "prio"
    assert plan("get jobs order id limit 1").walk == "id"
    assert plan("get jobs order queue limit 1").walk is None
    assert plan("get jobs order prio, id limit 1").walk is None  # two keys: no single walk
    assert plan("get jobs order prio + 1 limit 1").walk is None
    acc = plan("get jobs order distance(at, $1) limit 3")
    assert acc.geo_walk == "at"
    assert plan("get jobs order distance(at, $1) desc limit 3").geo_walk is None


def test_bounds_that_read_rows_do_not_reach():
    acc = plan("get jobs where run_at <= now() + prio")
    assert reached(acc) == ([], [], [])
