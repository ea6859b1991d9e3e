"""Plans never change answers (`fenecql.md` §14): twin databases, one with indexes and one without.

Hypothesis draws a collection (three fields of random types, a point, an expiry time and a json field), an
index annotation for each field (`@sorted`, `@hash`, `@unique` when the drawn values allow it, `@geo`,
`@ttl`, and a `create index` on a json path), documents, and a run of statements: reads with filters, orders,
limits and offsets, counts, and picking `set`/`del` with `returning *`, with the clock moving between them.
Twin A declares the indexes; twin B declares none and spells `@ttl` out as the filter term the spec says it
stands for (`not (e <= now() - d)`, §11.3). Every answer, and the final contents, must be equal.

A third, naive evaluation (the spec's own: live rows by id, filter, stable sort, offset, limit) checks the
reads whose filter and order are plain field comparisons.
"""

from __future__ import annotations

import functools
import math
import random

from conftest import SPEC_EPOCH_MS, TestClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NOW = SPEC_EPOCH_MS
TTL_MS = 60_000
BIG = 2**53 + 1  # an int a float cannot hold: exactness of index probes (§14 rule 6)

VALUES = {
    "int": [-3, -1, 0, 1, 2, 2, 3, 5, 7, BIG],
    "float": [-1.5, 0.0, 1.0, 2.0, 2.5, 3.25, 7.0],
    "text": ["", "a", "B", "ab", "b", "é", "a b", "Zz"],
    "timestamp": [NOW - 90_000, NOW - 60_000, NOW - 1000, NOW, NOW + 1000, NOW + 60_000],
}
INDEXES = {
    "int": [None, "@sorted", "@hash", "@unique"],
    "float": [None, "@sorted", "@hash", "@unique"],
    "text": [None, "@sorted", "@hash", "@unique"],
    "timestamp": [None, "@sorted", "@hash", "@unique"],
}
POINTS = [[29.01, 41.04], [29.03, 41.05], [29.02, 41.045], [28.99, 41.03], [29.05, 41.06]]
FIELDS = ("f1", "f2", "f3")
JSON_KEYS = ["1", "2", '"x"']


def lit(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(lit(v) for v in value) + "]"
    return str(value)


@st.composite
def schemas(draw):
    types = {f: draw(st.sampled_from(sorted(VALUES))) for f in FIELDS}
    index = {f: draw(st.sampled_from(INDEXES[types[f]])) for f in FIELDS}
    return {
        "types": types,
        "index": index,
        "geo": draw(st.booleans()),
        "ttl": draw(st.booleans()),
        "path_index": draw(st.sampled_from([None, "@sorted", "@hash"])),
    }


@st.composite
def documents(draw, schema):
    n = draw(st.integers(0, 24))
    docs = []
    for _ in range(n):
        doc = {}
        for f in FIELDS:
            doc[f] = draw(st.one_of(st.none(), st.sampled_from(VALUES[schema["types"][f]])))
        doc["g"] = draw(st.one_of(st.none(), st.sampled_from(POINTS)))
        doc["e"] = draw(st.one_of(st.none(), st.sampled_from([NOW - 120_000, NOW - 60_000, NOW - 30_000, NOW])))
        doc["j"] = draw(st.sampled_from([None, {"k": 1}, {"k": 2}, {"k": "x"}, {"m": 1}, {"k": {"z": 1}}]))
        docs.append(doc)
    # @unique only where the drawn values allow it (null repeats freely)
    for f in FIELDS:
        if schema["index"][f] == "@unique":
            seen = [d[f] for d in docs if d[f] is not None]
            if len(seen) != len({(type(v) is str, v) for v in seen}):
                schema["index"][f] = "@hash"
    return docs


def many_documents(schema: dict, seed: int, n: int) -> list[dict]:
    """A large collection, drawn from a seeded generator (hypothesis draws the seed, not each value)."""
    rnd = random.Random(seed)
    distinct = {
        "int": lambda i: i * 7 - 5000,
        "float": lambda i: i * 0.5 - 100.0,
        "text": lambda i: f"k{i:05d}",
        "timestamp": lambda i: NOW - 1_000_000 + i * 997,
    }
    docs = []
    for i in range(n):
        doc = {}
        for f in FIELDS:
            t = schema["types"][f]
            if rnd.random() < 0.1:
                doc[f] = None
            elif schema["index"][f] == "@unique":
                doc[f] = distinct[t](i)
            else:
                doc[f] = rnd.choice(VALUES[t])
        doc["g"] = None if rnd.random() < 0.1 else [round(29.0 + rnd.random() / 10, 4), round(41.0 + rnd.random() / 10, 4)]
        doc["e"] = None if rnd.random() < 0.2 else NOW - rnd.randrange(0, 120_000, 1000)
        doc["j"] = rnd.choice([None, {"k": 1}, {"k": 2}, {"k": "x"}, {"m": 1}])
        docs.append(doc)
    return docs


def any_literal(draw):
    kind = draw(st.sampled_from(sorted(VALUES)))
    return draw(st.sampled_from(VALUES[kind]))


@st.composite
def atoms(draw, schema):
    choice = draw(st.integers(0, 9))
    f = draw(st.sampled_from(FIELDS))
    ftype = schema["types"][f]
    if choice <= 3:
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
        same_kind = draw(st.integers(0, 4)) > 0
        value = draw(st.sampled_from(VALUES[ftype])) if same_kind else any_literal(draw)
        if ftype == "int" and draw(st.integers(0, 5)) == 0:
            value = draw(st.sampled_from([2.5, -0.5, 2.0]))  # a literal an int index cannot hold exactly
        return f"{f} {op} {lit(value)}"
    if choice == 4:
        values = draw(st.lists(st.sampled_from(VALUES[ftype]), min_size=0, max_size=3))
        return f"{f} in {lit(values)}"
    if choice == 5:
        return f"{f} is {draw(st.sampled_from(['null', 'not null']))}"
    if choice == 6:
        op = draw(st.sampled_from([">", ">=", "=", "<"]))
        return f"id {op} {draw(st.integers(0, 26))}"
    if choice == 7:
        field = f if ftype == "timestamp" else "e"
        shift = draw(st.sampled_from(["", " - 60000", " + 1000", " - 1000"]))
        op = draw(st.sampled_from(["<=", "<", ">=", ">"]))
        return f"{field} {op} now(){shift}"
    if choice == 8:
        p = draw(st.sampled_from(POINTS))
        if draw(st.booleans()):
            r = draw(st.sampled_from([0, 500, 1500, 3000, 10000]))
            return draw(st.sampled_from([f"distance(g, {lit(p)}) <= {r}", f"{r} > distance(g, {lit(p)})"]))
        return f"within(g, {lit([29.0, 41.035, 29.03, 41.05])})"
    op = draw(st.sampled_from(["=", "<", ">=", "!="]))
    return f"j.k {op} {draw(st.sampled_from(JSON_KEYS))}"


@st.composite
def filters(draw, schema):
    parts = draw(st.lists(atoms(schema), min_size=0, max_size=3))
    if not parts:
        return None
    shape = draw(st.integers(0, 5))
    if shape == 4 and len(parts) >= 2:
        return f"({parts[0]} or {parts[1]})" + "".join(f" and {p}" for p in parts[2:])
    if shape == 5:
        return f"not ({parts[0]})" + "".join(f" and {p}" for p in parts[1:])
    return " and ".join(parts)


@st.composite
def orders(draw, schema):
    keys = draw(st.lists(st.sampled_from(list(FIELDS) + ["id", "e", "j.k", "distance"]), min_size=0, max_size=2))
    out = []
    for k in keys:
        if k == "distance":
            k = f"distance(g, {lit(draw(st.sampled_from(POINTS)))})"
        out.append(k + draw(st.sampled_from(["", " asc", " desc"])))
    return ", ".join(out) or None


@st.composite
def statements(draw, schema):
    kind = draw(st.sampled_from(["get", "get", "count", "set", "del"]))
    where = draw(filters(schema))
    order = draw(orders(schema))
    limit = draw(st.one_of(st.none(), st.integers(0, 12)))
    offset = draw(st.one_of(st.none(), st.integers(0, 5)))
    patch = None
    if kind == "set":
        free = [f for f in FIELDS if schema["index"][f] != "@unique"]
        f = draw(st.sampled_from(free + ["e", "j.k"]))
        t = schema["types"].get(f)
        int_value = draw(st.sampled_from([f"coalesce({f}, 0) + 1", f"{f} + 1"]))  # the second: compile's field_plus
        value = {"int": int_value, "float": "1.5", "text": '"z"', "timestamp": "now() + 5000",
                 None: "now()" if f == "e" else "3"}[t]
        patch = f"{{{f}: {value}}}"
    clock_step = draw(st.sampled_from([0, 0, 20_000, 45_000]))
    return {"kind": kind, "where": where, "order": order, "limit": limit, "offset": offset, "patch": patch,
            "clock": clock_step}


def render(stmt: dict, ttl_term: str | None) -> str:
    where = stmt["where"]
    if ttl_term:
        where = f"({where}) and {ttl_term}" if where else ttl_term
    tail = (f" where {where}" if where else "")
    if stmt["kind"] == "count":
        return "get c" + tail + " count"
    if stmt["order"]:
        tail += f" order {stmt['order']}"
    if stmt["limit"] is not None:
        tail += f" limit {stmt['limit']}"
    if stmt["kind"] == "get":
        if stmt["offset"] is not None:
            tail += f" offset {stmt['offset']}"
        return "get c" + tail
    if stmt["kind"] == "set":
        return f"set c {stmt['patch']}" + tail + " returning *"
    return "del c" + tail + " returning *"


def create(schema: dict, indexed: bool) -> list[str]:
    cols = []
    for f in FIELDS:
        ann = schema["index"][f] if indexed and schema["index"][f] else ""
        cols.append(f"{f} {schema['types'][f]} {ann}".rstrip())
    cols.append("g geo @geo" if indexed and schema["geo"] else "g geo")
    cols.append(f"e timestamp @ttl({TTL_MS // 1000}s)" if indexed and schema["ttl"] else "e timestamp")
    cols.append("j json")
    out = [f"create collection c ({', '.join(cols)})"]
    if indexed and schema["path_index"]:
        out.append(f"create index on c (j.k) {schema['path_index']}")
    return out


def outcome(db, text: str):
    from fenecdb_server import FenecError

    try:
        return ("ok", db.query(text))
    except FenecError as e:
        return ("error", e.status)


# ---- the naive evaluation of §14, for filters and orders over plain fields -------------------------------

def kind_rank(v) -> int:
    if v is None:
        return 0
    if isinstance(v, bool):
        return 1
    if isinstance(v, (int, float)):
        return 2
    if isinstance(v, str):
        return 3
    return 5


def compare(a, b) -> int:
    """§3.4 for the values these tests use (timestamps are compared as answered ISO text against ISO text)."""
    ka, kb = kind_rank(a), kind_rank(b)
    if ka != kb:
        return -1 if ka < kb else 1
    if ka == 0:
        return 0
    if ka == 3:
        a, b = a.encode(), b.encode()
    return (a > b) - (a < b)


def naive_get(rows: list[dict], where: list[tuple[str, str, object]], order: list[tuple[str, bool]],
              limit, offset) -> list[dict]:
    def holds(row):
        for f, op, v in where:
            x = row[f]
            if op == "=":
                ok = compare(x, v) == 0
            elif op == "!=":
                ok = compare(x, v) != 0
            elif x is None or v is None:
                ok = False
            else:
                c = compare(x, v)
                ok = {"<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op]
            if not ok:
                return False
        return True

    kept = [r for r in rows if holds(r)]

    def cmp_rows(r1, r2):
        for f, desc in order:
            c = compare(r1[f], r2[f])
            if c:
                return -c if desc else c
        return (r1["id"] > r2["id"]) - (r1["id"] < r2["id"])

    kept.sort(key=functools.cmp_to_key(cmp_rows))
    kept = kept[offset or 0:]
    return kept if limit is None else kept[:limit]


@st.composite
def plain_reads(draw, schema):
    """Reads whose filter is an `and` chain of int/float/text field comparisons with same-kind literals."""
    usable = [f for f in FIELDS if schema["types"][f] in ("int", "float", "text")]
    where = []
    for _ in range(draw(st.integers(0, 3))):
        if not usable:
            break
        f = draw(st.sampled_from(usable))
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
        where.append((f, op, draw(st.sampled_from(VALUES[schema["types"][f]]))))
    keys = draw(st.lists(st.sampled_from(list(FIELDS) + ["id"]), max_size=2))
    order = [(k, draw(st.booleans())) for k in keys]
    return where, order, draw(st.one_of(st.none(), st.integers(0, 10))), draw(
        st.one_of(st.none(), st.integers(0, 4)))


def twins_agree(schema: dict, docs: list, steps: list) -> None:
    """The same documents and statements through a database with every index (a) and its twin
    with none (b, reading past @ttl by hand): every answer and the final rows must agree."""
    from fenecdb_server import Database

    clocks = TestClock(), TestClock()
    a, b = Database(clock=clocks[0]), Database(clock=clocks[1])
    ttl_term = f"not (e <= now() - {TTL_MS})" if schema["ttl"] else None
    try:
        for text in create(schema, True):
            a.query(text)
        for text in create(schema, False):
            b.query(text)
        if docs:
            assert a.query("put c $1", [docs]) == b.query("put c $1", [docs]) == {"affected": len(docs)}
        for stmt in steps:
            for c in clocks:
                c.advance(stmt["clock"])
            assert outcome(a, render(stmt, None)) == outcome(b, render(stmt, ttl_term)), (render(stmt, None), schema)
        final_b = outcome(b, "get c" + (f" where {ttl_term}" if ttl_term else "") + " order id")
        assert outcome(a, "get c order id") == final_b
    finally:
        a.close()
        b.close()


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_indexes_never_change_answers(data):
    schema = data.draw(schemas())
    docs = data.draw(documents(schema))
    twins_agree(schema, docs, data.draw(st.lists(statements(schema), min_size=1, max_size=8)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_indexes_never_change_answers_on_large_collections(data):
    """The same twins over 1 500 documents: index walks, give-up points and fallbacks at a real size."""
    schema = data.draw(schemas())
    docs = many_documents(schema, data.draw(st.integers(0, 2**32)), 1500)
    twins_agree(schema, docs, data.draw(st.lists(statements(schema), min_size=4, max_size=10)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_reads_match_the_naive_evaluation(data):
    from fenecdb_server import Database

    schema = data.draw(schemas())
    schema["ttl"] = False
    docs = data.draw(documents(schema))
    db = Database(clock=TestClock())
    try:
        for text in create(schema, True):
            db.query(text)
        if docs:
            db.query("put c $1", [docs])
        rows = db.query("get c order id")
        assert [r["id"] for r in rows] == list(range(1, len(docs) + 1))
        for _ in range(4):
            where, order, limit, offset = data.draw(plain_reads(schema))
            text = "get c"
            if where:
                text += " where " + " and ".join(f"{f} {op} {lit(v)}" for f, op, v in where)
            if order:
                text += " order " + ", ".join(f + (" desc" if d else "") for f, d in order)
            if limit is not None:
                text += f" limit {limit}"
            if offset is not None:
                text += f" offset {offset}"
            want = naive_get(rows, where, order, limit, offset)
            assert db.query(text) == want, text
    finally:
        db.close()


def test_naive_evaluation_itself():
    rows = [{"id": 1, "f1": 2}, {"id": 2, "f1": None}, {"id": 3, "f1": 2}, {"id": 4, "f1": "a"}, {"id": 5, "f1": 1.5}]
    assert [r["id"] for r in naive_get(rows, [], [("f1", False)], None, None)] == [2, 5, 1, 3, 4]
    assert [r["id"] for r in naive_get(rows, [], [("f1", True)], 2, 1)] == [1, 3]
    assert [r["id"] for r in naive_get(rows, [("f1", "<", 3)], [], None, None)] == [1, 3, 5]
    assert [r["id"] for r in naive_get(rows, [("f1", "!=", 2)], [], None, None)] == [2, 4, 5]
    assert math.isclose(compare(2, 2.0), 0)
    assert compare(None, None) == 0 and compare(None, False) < 0 and compare("Z", "a") < 0
