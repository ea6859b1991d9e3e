"""Random rules and random statements never let a token read or write a row its rules deny
(access.md §3.2, §4.1, §4.2, §4.4).

Hypothesis draws a policy of a few rules on one collection (grants, update field lists, a filter of
comparisons with literals and claims, a role), a token's claims, rows, and a run of statements: reads
(pages and counts), picking `set`s and `del`s with and without `returning`, and puts that leave pinned
fields out. Each statement is also worked out by hand from the rules as Python predicates evaluated on
every row — which rules apply, which rows each grant admits, the after-image of every rewrite — and the
engine must answer the same rows or the same refusal, and hold the same rows afterwards.
"""

from __future__ import annotations

from conftest import TestClock
from fenecdb_server import Database, FenecError
from fenecdb_server.policy import Policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIELDS = ("a", "b", "c", "owner")


# ---------------------------------------------------------------- conditions: text and meaning

def lit_atoms():
    """Conditions without claims: (text, fn(row, claims) -> bool, pin or None, claims read)."""
    return st.one_of(
        st.integers(0, 5).map(lambda k: (f"a < {k}", lambda r, cl, k=k: r["a"] is not None and r["a"] < k,
                                         None, ())),
        st.integers(0, 5).map(lambda k: (f"a >= {k}", lambda r, cl, k=k: r["a"] is not None and r["a"] >= k,
                                         None, ())),
        st.integers(0, 2).map(lambda k: (f"c = {k}", lambda r, cl, k=k: r["c"] == k, ("c", k), ())),
        st.sampled_from(["p", "q"]).map(lambda v: (f"b = '{v}'", lambda r, cl, v=v: r["b"] == v, ("b", v), ())),
        st.sampled_from(["u1", "u2"]).map(lambda v: (f"owner = '{v}'", lambda r, cl, v=v: r["owner"] == v,
                                                     ("owner", v), ())),
    )


CLAIM_ATOMS = st.sampled_from([
    ("b = $jwt.x", lambda r, cl: r["b"] == cl["x"], ("b", "$x"), ("x",)),
    ("owner = $jwt.sub", lambda r, cl: r["owner"] == cl["sub"], ("owner", "$sub"), ("sub",)),
    ("b in $jwt.xs", lambda r, cl: r["b"] is not None and r["b"] in (cl["xs"] if isinstance(cl["xs"], list)
                                                                   else [cl["xs"]]), None, ("xs",)),
])


def combine(atom):
    """None (every row), one atom, or two joined by and / or: (text, fn, pins, claims)."""
    def join(pair, op):
        (t1, f1, p1, c1), (t2, f2, p2, c2) = pair
        if op == "and":
            return (f"{t1} and {t2}", lambda r, cl: f1(r, cl) and f2(r, cl),
                    tuple(p for p in (p1, p2) if p), c1 + c2)
        return (f"({t1} or {t2})", lambda r, cl: f1(r, cl) or f2(r, cl), (), c1 + c2)
    return st.one_of(
        st.just(None),
        atom.map(lambda a: (a[0], a[1], (a[2],) if a[2] else (), a[3])),
        st.tuples(st.tuples(atom, atom), st.sampled_from(["and", "or"])).map(lambda x: join(*x)),
    )


RULE_FILTERS = combine(st.one_of(lit_atoms(), CLAIM_ATOMS))
STMT_FILTERS = combine(lit_atoms())

rule_st = st.fixed_dictionaries({
    "grants": st.sets(st.sampled_from(["read", "insert", "update", "delete"]), min_size=1),
    "fields": st.one_of(st.none(), st.sets(st.sampled_from(FIELDS), min_size=1)),
    "filter": RULE_FILTERS,
    "role": st.sampled_from([None, None, "r1"]),
})

claims_st = st.fixed_dictionaries({}, optional={
    "sub": st.sampled_from(["u1", "u2"]),
    "x": st.sampled_from(["p", "q"]),
    "xs": st.sampled_from([["p"], ["p", "q"], [], "q"]),
    "role": st.sampled_from(["r1", "r2", ["r2", "r1"]]),
})

row_st = st.fixed_dictionaries({
    "a": st.integers(0, 5),
    "b": st.sampled_from(["p", "q", None]),
    "c": st.integers(0, 2),
    "owner": st.sampled_from(["u1", "u2", None]),
})

PATCHES = [
    ("{a: a + 1}", lambda r: {**r, "a": r["a"] + 1}),
    ("{b: 'q'}", lambda r: {**r, "b": "q"}),
    ("{owner: 'u2'}", lambda r: {**r, "owner": "u2"}),
    ("{c: c + 1}", lambda r: {**r, "c": r["c"] + 1}),
    ("{c: 1, b: 'p'}", lambda r: {**r, "c": 1, "b": "p"}),
]
DOCS = [
    ("{a: 1, c: 0}", {"a": 1, "c": 0}),
    ("{a: 4, b: 'q', owner: 'u1', c: 1}", {"a": 4, "b": "q", "owner": "u1", "c": 1}),
    ("{a: 2, owner: 'u2', c: 2}", {"a": 2, "owner": "u2", "c": 2}),
]

stmt_st = st.one_of(
    st.tuples(st.just("get"), STMT_FILTERS, st.one_of(st.none(), st.integers(1, 4)), st.booleans()),
    st.tuples(st.just("set"), STMT_FILTERS, st.one_of(st.none(), st.integers(1, 3)), st.booleans(),
              st.integers(0, len(PATCHES) - 1)),
    st.tuples(st.just("del"), STMT_FILTERS, st.one_of(st.none(), st.integers(1, 3)), st.booleans()),
    st.tuples(st.just("put"), st.integers(0, len(DOCS) - 1)),
)


# ---------------------------------------------------------------- the policy and its model


class ModelRule:
    def __init__(self, d: dict) -> None:
        self.grants = d["grants"]
        self.fields = d["fields"] if "update" in d["grants"] else None
        self.filter = d["filter"]
        self.role = d["role"]

    def text(self) -> str:
        gs = []
        for g in sorted(self.grants):
            if g == "update" and self.fields:
                gs.append("update(" + ", ".join(sorted(self.fields)) + ")")
            else:
                gs.append(g)
        out = "t " + ",".join(gs)
        if self.filter is not None:
            out += " where " + self.filter[0]
        if self.role:
            out += " for " + self.role
        return out

    def applies(self, cl: dict) -> bool:
        if self.role is not None:
            role = cl.get("role")
            if not (role == self.role or (isinstance(role, list) and self.role in role)):
                return False
        return self.filter is None or all(k in cl for k in self.filter[3])

    def admits(self, row: dict, cl: dict) -> bool:
        return self.filter is None or self.filter[1](row, cl)

    def pins(self, cl: dict) -> list[tuple[str, object]]:
        if self.filter is None:
            return []
        out = []
        for field, v in self.filter[2]:
            out.append((field, cl[v[1:]] if isinstance(v, str) and v.startswith("$") else v))
        return out


def order(rows):
    return sorted(rows, key=lambda r: (r["a"], r["id"]))


def where_text(f, first: str | None = None) -> str:
    """The `where` clause of a drawn filter, after a `first` condition if one is given."""
    if first is not None:
        return f" where {first}" + (f" and ({f[0]})" if f is not None else "")
    return f" where {f[0]}" if f is not None else ""


def model(stmt, rows: dict, rules: list[ModelRule], cl: dict, next_id: int):
    """(status or None, the answer's ids or count or affected, the rows afterwards, next id)."""
    kind = stmt[0]
    mine = [r for r in rules if r.applies(cl)]
    by = {g: [r for r in mine if g in r.grants] for g in ("read", "insert", "update", "delete")}
    if not mine:
        return 404, None, rows, next_id
    def readable(row):
        return (any(r.admits(row, cl) for r in by["read"]))
    if kind == "get":
        _, f, limit, count = stmt
        if not by["read"]:
            return 403, None, rows, next_id
        got = [r for r in order(rows.values()) if (f is None or f[1](r, cl)) and readable(r)]
        if count:
            return None, len(got), rows, next_id
        return None, [r["id"] for r in got[:limit]], rows, next_id
    if kind == "put":
        _, di = stmt
        if not by["insert"]:
            return 403, None, rows, next_id
        doc = DOCS[di][1]
        for rule in by["insert"]:
            filled = {"id": next_id, "a": None, "b": None, "c": None, "owner": None, **doc}
            for field, v in rule.pins(cl):
                if field not in doc:
                    filled[field] = v
            if rule.admits(filled, cl):
                return None, 1, {**rows, next_id: filled}, next_id + 1
        return 403, None, rows, next_id
    if kind == "del":
        _, f, limit, returning = stmt
        if not by["delete"] or not by["read"]:
            return 403, None, rows, next_id
        got = [r for r in order(rows.values()) if (f is None or f[1](r, cl))
               and any(d.admits(r, cl) for d in by["delete"]) and (not returning or readable(r))][:limit]
        left = {i: r for i, r in rows.items() if i not in {g["id"] for g in got}}
        return None, ([g["id"] for g in got] if returning else len(got)), left, next_id
    _, f, limit, returning, pi = stmt
    if not by["update"] or not by["read"]:
        return 403, None, rows, next_id
    patch = PATCHES[pi][1]
    listed = None
    if all(u.fields is not None for u in by["update"]):
        listed = set().union(*(u.fields for u in by["update"]))
    news = []
    for old in order(rows.values()):
        if limit is not None and len(news) >= limit:
            break
        if not ((f is None or f[1](old, cl)) and any(u.admits(old, cl) for u in by["update"])):
            continue
        new = patch(old)
        changed = {k for k in FIELDS if old[k] != new[k]}
        if listed is not None and not changed <= listed:
            return 403, None, rows, next_id
        ok = [u for u in by["update"] if u.admits(old, cl) and u.admits(new, cl)]
        if not ok or not any(u.fields is None or changed <= u.fields for u in ok):
            return 403, None, rows, next_id
        if returning and not readable(new):
            continue
        news.append(new)
    after = {**rows, **{n["id"]: n for n in news}}
    return None, ([n["id"] for n in news] if returning else len(news)), after, next_id


def statement_text(stmt, poison: str | None = None) -> str:
    """The statement's text; `poison` (test_an_error_never_carries...) adds `timestamp(s)` to its
    filter (first), its order (last) or, for a set, its values."""
    kind = stmt[0]
    first = "(timestamp(s) > 0 or true)" if poison == "where" else None
    order = " order a, timestamp(s)" if poison == "order" else " order a"
    if kind == "get":
        _, f, limit, count = stmt
        if count:
            return "get t" + where_text(f, first) + " count"
        return "get t" + where_text(f, first) + order + (f" limit {limit}" if limit else "")
    if kind == "put":
        return "put t " + DOCS[stmt[1]][0]
    if kind == "del":
        _, f, limit, returning = stmt
        return ("del t" + where_text(f, first) + order + (f" limit {limit}" if limit else "")
                + (" returning id" if returning else ""))
    _, f, limit, returning, pi = stmt
    patch = PATCHES[pi][0].replace("{", "{s: timestamp(s), ", 1) if poison == "value" else PATCHES[pi][0]
    return ("set t " + patch + where_text(f, first) + order + (f" limit {limit}" if limit else "")
            + (" returning id" if returning else ""))



def rows_of(db: Database) -> dict:
    """The table as the model keeps it: id -> the row's modelled fields."""
    return {r["id"]: {"id": r["id"], **{k: r.get(k) for k in FIELDS}} for r in db.query("get t")}


def answered_as_modelled(text: str, got: object, want: object) -> None:
    """A write's count, a count's number, or the ids a read or a `returning` answered, as the model says."""
    if isinstance(got, dict):
        assert got == {"affected": want}, (text, got, want)
    elif got and "count" in got[0]:
        assert got == [{"count": want}], (text, got, want)
    else:
        assert [r["id"] for r in got] == want, (text, got, want)

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(rule_st, min_size=1, max_size=4), claims=claims_st,
       rows=st.lists(row_st, max_size=8), stmts=st.lists(stmt_st, min_size=1, max_size=8),
       sorted_a=st.booleans())
def test_a_token_never_reads_or_writes_past_its_rules(rules, claims, rows, stmts, sorted_a):
    mrules = [ModelRule(r) for r in rules]
    policy = Policy.parse("\n".join(r.text() for r in mrules))
    scope = policy.scope_for(claims)
    db = Database(clock=TestClock())
    db.query(f"create collection t (a int{' @sorted' if sorted_a else ''}, b text, c int, owner text)")
    if rows:
        db.query("put t $1", [[{k: v for k, v in r.items() if v is not None} for r in rows]])
    state = {i + 1: {"id": i + 1, **r} for i, r in enumerate(rows)}
    next_id = len(rows) + 1
    for stmt in stmts:
        text = statement_text(stmt)
        status, want, after, next_id = model(stmt, state, mrules, claims, next_id)
        try:
            got = db.execute([(text, None)], scope=scope).answers[0]
        except FenecError as e:
            assert status == e.status, (text, e.message, status)
        else:
            assert status is None, (text, got, status)
            answered_as_modelled(text, got, want)
        state = after
        assert rows_of(db) == state, (text, rows_of(db), state)
    db.close()


# ---------------------------------------------------------------- errors never carry a row the token cannot read

# Where a statement meets the poison: `timestamp(s)` fails on a row holding a secret in `s`
# (quoting it, as its message does) and is null on a row without one, where each form that
# statement_text writes is neutral: the statement answers what the model says.
POISONS = ("where", "order", "value")
secret_st = st.lists(st.booleans(), min_size=8, max_size=8)


def secret(rid: int) -> str:
    return f"secret-{rid}-x"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(rule_st, min_size=1, max_size=4), claims=claims_st,
       rows=st.lists(row_st, max_size=8), secrets=secret_st, stmts=st.lists(stmt_st, min_size=1, max_size=6),
       poisons=st.lists(st.sampled_from(POISONS), min_size=6, max_size=6), sorted_a=st.booleans())
def test_an_error_never_carries_a_row_the_token_cannot_read(rules, claims, rows, secrets, stmts, poisons,
                                                            sorted_a):
    """The rule test above, with a text field `s` holding a secret in some rows and every statement
    made to fail on such a row in its filter, its order or its values: an error may quote a row
    only when the token may read it; otherwise the statement answers exactly what the model says."""
    mrules = [ModelRule(r) for r in rules]
    policy = Policy.parse("\n".join(r.text() for r in mrules))
    scope = policy.scope_for(claims)
    db = Database(clock=TestClock())
    db.query(f"create collection t (a int{' @sorted' if sorted_a else ''}, b text, c int, owner text, s text)")
    docs = [{**{k: v for k, v in r.items() if v is not None}, **({"s": secret(i + 1)} if secrets[i] else {})}
            for i, r in enumerate(rows)]
    if docs:
        db.query("put t $1", [docs])
    state = {i + 1: {"id": i + 1, **r} for i, r in enumerate(rows)}
    hidden = {i + 1 for i in range(len(rows)) if secrets[i]}
    next_id = len(rows) + 1
    mine = [r for r in mrules if r.applies(claims)]
    readers = [r for r in mine if "read" in r.grants]
    for stmt, where in zip(stmts, poisons, strict=False):
        text = statement_text(stmt, where)
        status, want, after, new_next = model(stmt, state, mrules, claims, next_id)
        try:
            got = db.execute([(text, None)], scope=scope).answers[0]
        except FenecError as e:
            for rid in hidden:
                if secret(rid) in e.message:
                    assert rid in state and any(r.admits(state[rid], claims) for r in readers), \
                        (text, e.message, state.get(rid))
            assert rows_of(db) == state, (text, "an error left something behind")
            continue
        assert status is None, (text, got, status)
        answered_as_modelled(text, got, want)
        state, next_id = after, new_next
        hidden &= set(state)
        assert rows_of(db) == state, (text, rows_of(db), state)
    db.close()
