"""What a held claim needs from the engine (http.md §8.2, §8.4–§8.6): whether a request may
be held, which line it waits in, a cheap look, and the next moment the clock can change it. A
`HeldStatements` answers them; held/ (the lines, their fairness, their timers) asks, under the read
lock it takes through `Database.look`.

* May be held: `set`/`del`, alone or in a batch beside `get`s. A put, insert or schema statement
  writes every time: 400 `writes otherwise`. A filter may read the clock only as a field or path
  compared (`< <= > >=`) with `now()` plus or minus integer literals or parameters, on either
  side; any other `now()` is 400 `time only`, since nothing says when its answer would change.
* Line key: per set/del, the collection, the filter and the order with every parameter they
  use bound to its value; what the statement writes or returns does not matter.
* Look (`would_take`): the set/del's own filter and order as a read of one row.
* Next moment: for each `field OP now() + k`, the least `v - k` (`<=`, `>`) or `v - k + 1 ms`
  (`<`, `>=`) over the field's values ahead of the clock — one step of its @sorted index past the
  bound, or a scan without one — and the next @ttl expiry of the collection.
* Written rows (what a write-woken line checks instead of looking again, held/lines.py rule 2):
  `wakes()`, for each set/del, the collection and the equality terms of its filter (`field =
  value`, a text or int field against a value of its own type, with the parameter bound) that
  every row it could take carries, as the fields and their values in field order (none: both
  empty); `takes(coll, row)`, whether a row just written
  passes a set/del's whole filter (with the token's rules) now; `moment_of(coll, row)`, the
  next moment of that row alone. `plain` says the claim is one set/del and nothing else, so a
  run that took nothing means no row passed its filter.
* Rows the clock brought (`came_due(since)`): for a claim whose set/del filters compare time only
  in top-level terms `field <= now() + k` or `field < now() + k` on an @sorted field (others,
  `field > now()`, only ever take rows away), the rows whose value came into range between the
  moment `since` and now: one range of each index, not every row ready.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from .. import values as V
from ..errors import FenecError
from ..plan.compile import Ctx, Env, compile_expr
from ..ql import ast as A
from ..ql.ast import mentions
from .access import pick
from .bids import Profile, profile
from .scoped import look as scoped_look
from .scoped import plan_for as scoped_plan_for
from .scoped import rule_time_filter

if TYPE_CHECKING:
    from .catalog import Catalog

FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _is_now(e: A.Expr) -> bool:
    return isinstance(e, A.Call) and e.name == "now"


def _now_shift(e: A.Expr) -> A.Expr | None | Literal[False]:
    """`now()`, `now() + k`, `now() - k`, ... -> the shift expression (None for no shift);
    False when `e` is not of that shape."""
    if _is_now(e):
        return None
    if isinstance(e, A.Arith) and e.op in "+-":
        inner = _now_shift(e.left)
        if inner is False:
            return False
        if not isinstance(e.right, A.Param) and not (isinstance(e.right, A.Lit) and type(e.right.value) is int):
            return False
        k: A.Expr = e.right if e.op == "+" else A.Arith("-", A.Lit(0), e.right)
        return k if inner is None else A.Arith("+", inner, k)
    return False


class TimeTerm:
    __slots__ = ("target", "op", "shift")

    def __init__(self, target: str, op: str, shift: Any) -> None:
        self.target = target
        self.op = op  # with the field on the left
        self.shift = shift  # compiled: env -> int, or None


def _time_terms(where: A.Expr | None, schema: Any, strict: bool = True) -> list[TimeTerm]:
    """Every allowed use of now() in the filter; any other use is 400 `time only` when `strict`
    (a set/del filter), and passed over otherwise (a get beside them: http.md §8.2 limits the
    refusal to set/del filters, since only they decide when the claim runs)."""
    terms: list[TimeTerm] = []
    if where is None:
        return terms
    allowed: set[int] = set()
    stack = [where]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Cmp) and n.op in FLIP:
            for fld, other, op in ((n.left, n.right, n.op), (n.right, n.left, FLIP[n.op])):
                if isinstance(fld, (A.Field, A.Path)) and mentions(other, _is_now):
                    shift = _now_shift(other)
                    if shift is False:
                        continue
                    target = fld.name if isinstance(fld, A.Field) else ".".join((fld.name, *fld.keys))
                    fn = compile_expr(shift, Ctx(schema, row=False)) if shift is not None else None
                    terms.append(TimeTerm(target, op, fn))
                    _mark(other, allowed)
        if strict and isinstance(n, A.Call) and n.name == "now" and id(n) not in allowed:
            raise FenecError("query", "a held claim reads the time only as a field compared with now(), "
                                      "give or take a number: nothing says when this answer would change")
        stack.extend(A.children(n))
    return terms


def _mark(e: A.Expr, allowed: set[int]) -> None:
    if _is_now(e):
        allowed.add(id(e))
    elif isinstance(e, A.Arith):
        _mark(e.left, allowed)


def _bind(e: Any, params: list) -> Any:
    """The expression with its parameters replaced by their values (hashable)."""
    if isinstance(e, A.Param):
        v = params[e.n - 1] if e.n - 1 < len(params) else None
        return ("$", V.hashable(v))
    if isinstance(e, tuple):
        return tuple(_bind(x, params) for x in e)
    if hasattr(e, "__dataclass_fields__"):
        return (type(e).__name__, *(_bind(getattr(e, f), params) for f in e.__dataclass_fields__))
    return e


class HeldStatements:
    """A claim's statements ready to wait (`Database.prepare_hold`): whether it may be held, its
    line, and the engine's two answers about it, each read under the read lock its caller holds."""

    __slots__ = ("db", "held", "line_key", "collections", "_writes", "_terms", "_params", "scope", "plain",
                 "_due")

    def __init__(self, db: Catalog) -> None:
        self.db = db
        self.held = False
        self.line_key: Any = None
        self.collections: frozenset[str] = frozenset()
        self._writes: list[tuple[str, A.Set | A.Del, list]] = []
        self._terms: list[tuple[str, TimeTerm, list]] = []
        self._params: list = []
        self.scope: Any = None  # a token's scope: the look reads only what it could take
        self.plain = False  # one set/del, nothing beside it
        # came_due's terms (collection, field, op, shift, params); None: the clock's rows cannot
        # be told apart, a look reads the collection
        self._due: list[tuple[str, str, str, Any, list]] | None = None

    def would_take(self) -> bool:
        """Under the read lock the caller holds: would some set/del of the claim take a row now?"""
        db = self.db
        now = V.Ts(db.now())
        for text, stmt, params in self._writes:
            coll = db.collections.get(stmt.collection)
            if coll is None:
                return True  # run it, so the claim is answered its 404
            if self.scope is not None:
                if scoped_look(db, text, stmt, params, self.scope, now):
                    return True
                continue
            p = db.prepared(text, stmt)
            q = p.query
            if p.gate is not None:  # a claim on a queue with controls reads what they let it take
                q = p.gate.look_query(db, coll, q, int(now))
                if q is None:
                    continue
            if pick(coll, q, Env(params, now), need_override=1):
                return True
        return False

    def next_moment(self) -> int | None:
        """Under the read lock the caller holds: the least moment after now at which the clock
        alone may give the claim a row (module docstring), or None."""
        db = self.db
        now = db.now()
        env = Env([], V.Ts(now))
        best: int | None = None
        for coll_name, term, params in self._terms:
            coll = db.collections.get(coll_name)
            if coll is None:
                continue
            env.params = params
            k = term.shift(None, env) if term.shift is not None else 0
            if type(k) is not int:
                continue
            m = _next_for(coll, term.target, term.op, k, now)
            if m is not None and (best is None or m < best):
                best = m
        for coll_name in self.collections:
            coll = db.collections.get(coll_name)
            if coll is None or coll.schema.ttl_field is None:
                continue
            ttl = coll.schema.ttl_field
            assert ttl.ttl_ms is not None  # a @ttl field always has its duration
            m = _next_for(coll, ttl.name, ">", -ttl.ttl_ms, now)
            if m is not None and (best is None or m < best):
                best = m
        for text, stmt, _params in self._writes:
            if db.controls.on(stmt.collection) and stmt.collection in db.collections:
                p = db.prepared(text, stmt) if self.scope is None else scoped_plan_for(db, text, stmt, self.scope).p
                m = p.gate.next_turn(now) if p.gate is not None else None  # a rate window turns
                if m is not None and (best is None or m < best):
                    best = m
        return best

    def wakes(self) -> list[tuple[str, tuple[str, ...], tuple[Any, ...]]] | None:
        """Per set/del: (collection, fields, values) of the equality terms of its filter that
        every row it could take carries, in field order; both empty when it has none. None when
        a collection it writes has queue controls (controls.py): then every write wakes it."""
        out: list[tuple[str, tuple[str, ...], tuple[Any, ...]]] = []
        for _text, stmt, params in self._writes:
            if self.db.controls.on(stmt.collection):
                return None  # an ack, which writes no row, can free a cap: every write wakes it
            coll = self.db.collections.get(stmt.collection)
            terms = _eq_terms(stmt.where, coll.schema, params) if coll is not None else {}
            fields = tuple(sorted(terms))
            out.append((stmt.collection, fields, tuple(terms[f] for f in fields)))
        return out

    def takes(self, coll_name: str, rid: int) -> bool:
        """Under the read lock the caller holds: would some set/del of the claim on `coll_name`
        take the row of id `rid` as it is now (False: it is gone), by its filter and the token's
        rules? A filter that raises says yes (the run answers it)."""
        db = self.db
        coll = db.collections.get(coll_name)
        row = coll.rows.get(rid) if coll is not None else None
        if row is None:
            return False
        now = V.Ts(db.now())
        for text, stmt, params in self._writes:
            if stmt.collection != coll_name:
                continue
            if self.scope is None:
                filt = db.prepared(text, stmt).query.filter
                env = Env(params, now)
            else:
                filt = scoped_plan_for(db, text, stmt, self.scope).p.query.filter
                env = Env(params, now, self.scope.claims)
            if filt is None:
                return True
            try:
                if filt(row, env):
                    return True
            except Exception:
                return True
        return False

    def moment_of(self, coll_name: str, rid: int) -> int | None:
        """Under the read lock the caller holds: the least moment after now at which the clock
        alone may change the claim's filters for the row of id `rid` (as `next_moment`, for this
        row only)."""
        db = self.db
        coll = db.collections.get(coll_name)
        row = coll.rows.get(rid) if coll is not None else None
        if row is None:
            return None
        now = db.now()
        env = Env([], V.Ts(now))
        best: int | None = None
        for name, term, params in self._terms:
            if name != coll_name:
                continue
            env.params = params
            k = term.shift(None, env) if term.shift is not None else 0
            if type(k) is not int:
                continue
            m = _row_moment(row, term.target, term.op, k, now)
            if m is not None and (best is None or m < best):
                best = m
        if coll_name in self.collections and coll is not None and coll.schema.ttl_field is not None:
            ttl = coll.schema.ttl_field
            assert ttl.ttl_ms is not None  # a @ttl field always has its duration
            m = _row_moment(row, ttl.name, ">", -ttl.ttl_ms, now)
            if m is not None and (best is None or m < best):
                best = m
        return best

    def came_due(self, since: int) -> tuple[int, list[tuple[str, int]]] | None:
        """Under the read lock the caller holds: the clock now, and the rows of the set/dels'
        collections whose time terms turned true after the moment `since` and by now; None when
        the claim's filters cannot say (module docstring)."""
        due = self._due
        if due is None:
            return None
        db = self.db
        now = db.now()
        env = Env([], V.Ts(now))
        out: list[tuple[str, int]] = []
        for name, target, op, shift, params in due:
            coll = db.collections.get(name)
            if coll is None:
                return None
            idx = coll.index(target)
            if idx is None or not hasattr(idx, "walk"):
                return None
            env.params = params
            k = shift(None, env) if shift is not None else 0
            if type(k) is not int:
                return None
            less = 1 if op == "<" else 0  # v < now + k: v <= now + k - 1
            for rid in idx.walk(since + k - less, False, now + k - less, True, False, False):
                out.append((name, rid))
        return now, out

    def bid_profile(self) -> Profile | None:
        """What the claim's line bids with (bids.py)."""
        return profile(self)


def _next_for(coll: Any, target: str, op: str, k: int, now: int) -> int | None:
    """The least moment > now at which `target op now() + k` changes for some row."""
    plus = 1 if op in ("<", ">=") else 0
    # moment = v - k + plus > now  <=>  v > now + k - plus
    bound = now + k - plus
    f = coll.schema.fields.get(target)
    idx = coll.index(target) if f is not None and f.type in ("int", "timestamp") else None
    if idx is not None and hasattr(idx, "first_above") and not getattr(idx, "keyed", True):
        v = idx.first_above(bound, False)
        if v is None:
            return None
        return int(v) - k + plus
    # Any other field or path: text is read as a time, and a float flips at a whole ms (§3.4).
    best = None
    for row in coll.rows.values():
        m = _row_moment(row, target, op, k, now)
        if m is not None and (best is None or m < best):
            best = m
    return best


def _row_moment(row: dict, target: str, op: str, k: int, now: int) -> int | None:
    """The moment > now at which `target op now() + k` changes for `row`, or None."""
    name, *keys = target.split(".")
    x = _as_ms(V.read_path(row.get(name), keys))
    if x is None:
        return None
    m = (math.floor(x) + 1 if op in ("<", ">=") else math.ceil(x)) - k
    return m if m > now else None


def _due_terms(db: Catalog, writes: list[tuple[str, A.Set | A.Del, list]]) -> list[tuple[str, str, str, Any, list]] | None:
    """came_due's terms: every time term of the set/dels' filters, each a top-level conjunct (a
    term under `or` or `not` may give rows the other way), `field <= / < now() + k` on an
    @sorted int or timestamp field (kept), or `field > / >= now() + k` (which never gives a row:
    left out). None when some term is neither."""
    out: list[tuple[str, str, str, Any, list]] = []
    for _text, stmt, params in writes:
        coll = db.collections.get(stmt.collection)
        if coll is None:
            return None
        where = stmt.where
        top: list[A.Expr] = []
        stack: list[A.Expr | None] = [where]
        while stack:
            n = stack.pop()
            if isinstance(n, A.And):
                stack.extend(n.items)
            elif n is not None:
                top.append(n)
        tops = {id(n) for n in top}
        for n in _all_nodes(where):
            if not (isinstance(n, A.Cmp) and n.op in FLIP and mentions(n, _is_now)):
                continue
            if id(n) not in tops:
                return None
            got = None
            for fld, other, op in ((n.left, n.right, n.op), (n.right, n.left, FLIP[n.op])):
                if isinstance(fld, A.Field) and mentions(other, _is_now):
                    shift = _now_shift(other)
                    if shift is not False:
                        got = (fld.name, op, shift)
            if got is None:
                return None
            target, op, shift = got
            if op in (">", ">="):
                continue
            f = coll.schema.fields.get(target)
            idx = coll.index(target) if f is not None and f.type in ("int", "timestamp") else None
            if idx is None or getattr(idx, "keyed", True):
                return None
            fn = compile_expr(shift, Ctx(coll.schema, row=False)) if shift is not None else None
            out.append((stmt.collection, target, op, fn, params))
    return out


def _all_nodes(e: A.Expr | None) -> list[A.Expr]:
    out: list[A.Expr] = []
    stack = [e] if e is not None else []
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(A.children(n))
    return out


def _eq_terms(where: A.Expr | None, schema: Any, params: list) -> dict[str, Any]:
    """The terms `field = value` the filter is the conjunction of with others, each field of
    type text or int and its value (a literal, or a parameter bound) of the same Python type: a
    row the filter passes holds exactly those values (FenecQL's `=` on two ints or two texts is
    Python's). The first term of a field stands for it."""
    out: dict[str, Any] = {}
    stack = [where]
    while stack:
        n = stack.pop()
        if isinstance(n, A.And):
            stack.extend(reversed(n.items))
            continue
        if not isinstance(n, A.Cmp) or n.op != "=":
            continue
        for fld, other in ((n.left, n.right), (n.right, n.left)):
            if not isinstance(fld, A.Field):
                continue
            f = schema.fields.get(fld.name)
            if f is None or f.type not in ("text", "int"):
                continue
            if isinstance(other, A.Param):
                if other.n - 1 >= len(params):
                    continue
                v = params[other.n - 1]
            elif isinstance(other, A.Lit):
                v = other.value
            else:
                continue
            if ((f.type == "text" and type(v) is str) or (f.type == "int" and type(v) is int)) \
                    and fld.name not in out:
                out[fld.name] = v
                break
    return out


def _as_ms(v: Any) -> int | float | None:
    """A value as the ms it stands for when compared with a timestamp, or None."""
    t = type(v)
    if t is int or t is V.Ts:
        return v
    if t is float:
        return v if math.isfinite(v) else None
    if t is str:
        return V.parse_time(v)
    return None


def make_hold(db: Catalog, parsed: list[tuple[str, A.Statement, list]], scope: Any = None) -> HeldStatements:
    h = HeldStatements(db)
    h.scope = scope
    keys: list[tuple[Any, ...]] = []  # with a scope, each also holds the token's line key
    colls: set[str] = set()
    for text, stmt, params in parsed:
        if isinstance(stmt, A.Get):
            colls.add(stmt.collection)
            continue
        if not isinstance(stmt, (A.Set, A.Del)):
            if not stmt.writes:  # `show schedules`: no row of a collection to wait for
                raise FenecError("query", f"a held claim waits for rows of a collection; a `{stmt.verb}` "
                                          "answers at once")
            raise FenecError("query", f"a held claim may hold set and del beside reads; a `{stmt.verb}` "
                                      "writes otherwise, every time it runs, so it is never waiting")
        coll = db.collections.get(stmt.collection)
        if coll is None:
            raise FenecError("notfound", f"no collection `{stmt.collection}`")
        for t in _time_terms(stmt.where, coll.schema):
            h._terms.append((stmt.collection, t, params))
        colls.add(stmt.collection)
        h._writes.append((text, stmt, params))
        if scope is not None:
            # the token's rules are part of its filter: they say which rows wake it, and when
            try:
                for t in _time_terms(rule_time_filter(stmt, scope), coll.schema):
                    h._terms.append((stmt.collection, t, params))
            except FenecError:
                pass  # a rule reading the clock otherwise: the claim is woken by writes alone
            keys.append((stmt.collection, _bind(stmt.where, params), _bind(stmt.order, params),
                         scope.line_key(stmt.collection)))
            continue
        keys.append((stmt.collection, _bind(stmt.where, params), _bind(stmt.order, params)))
    for _text, stmt, params in parsed:
        if isinstance(stmt, A.Get):
            coll = db.collections.get(stmt.collection)
            if coll is not None:
                for t in _time_terms(stmt.where, coll.schema, strict=False):
                    h._terms.append((stmt.collection, t, params))
    h.held = bool(h._writes)
    h._due = _due_terms(db, h._writes) if scope is None else None
    h.plain = len(parsed) == 1 and len(h._writes) == 1
    h.line_key = tuple(keys)
    h.collections = frozenset(colls)
    return h
