"""Expressions -> Python closures `fn(row, env)`.

A statement is compiled once (and cached); each run binds its parameters and its `now()`
through `env`. Walking the tree at every row would cost several times more: a compiled
`run_at <= now()` test is one closure call per row. Checks that need only the schema
(unknown fields: 404, paths into non-json fields: 400, unknown functions: 400, depth) are made
here, before any row is read (fenecql.md §4.1, proposed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from .. import values as V
from ..errors import FenecError
from ..ql import ast as A
from ..ql.ast import MAX_DEPTH
from ..values import read_path
from .operators import CMP, arith, bucket, cmp3, distance, eq, interval, qerr, terr, within
from .schema import Schema

Fn = Callable[[Any, Any], Any]


class Env:
    """What a run binds: parameters, the statement's time, token claims, an upsert's new document,
    and the most rows the statement may answer (`rows`) and its block may write (`writes`; 0 = no
    bound for either: engine/execute.py refuses past them)."""

    __slots__ = ("params", "now", "claims", "new", "rows", "writes")

    def __init__(self, params: list, now: V.Ts, claims: dict | None = None, new: dict | None = None) -> None:
        self.params = params
        self.now = now
        self.claims = claims
        self.new = new
        self.rows = 0
        self.writes = 0


class _Missing(Exception):
    """A token claim the token lacks: the comparison reading it is false, and `not` cannot save it."""


class Ctx:
    """What the compiler knows: the schema, and what the expression may read."""

    __slots__ = ("schema", "row", "new", "claims", "where", "nparams")

    def __init__(self, schema: Schema | None, *, row: bool = True, new: bool = False, claims: bool = False,
                 where: bool = False) -> None:
        self.schema = schema
        self.row = row
        self.new = new
        self.claims = claims
        self.where = where
        self.nparams = 0


# ---------------------------------------------------------------- the compiler


def _depth(e: A.Expr) -> int:
    """Nesting depth: parentheses, calls and every link of an and/or chain count (§9.10)."""
    stack = [(e, 1)]
    deepest = 0
    while stack:
        node, d = stack.pop()
        if d > deepest:
            deepest = d
            if deepest > MAX_DEPTH:
                return deepest
        if isinstance(node, (A.And, A.Or)):
            for i, it in enumerate(node.items):
                stack.append((it, d + i))  # the chain's first item sits at its level; each link adds one
        elif isinstance(node, (A.Lit, A.Param, A.Field, A.Duration)):
            continue  # nothing under it: a document of literals is mostly these
        elif isinstance(node, A.ObjectExpr):
            for _, it in node.items:
                stack.append((it, d + 1))
        elif isinstance(node, (A.Call, A.ListExpr)):
            for it in node.args if isinstance(node, A.Call) else node.items:
                stack.append((it, d + 1))
        else:
            for it in A.children(node):
                stack.append((it, d + 1))
    return deepest


def _in_consts(lf: Fn, consts: list[Any]) -> Fn:
    """`x in [literals]`: a set lookup for the kinds whose `=` is Python's (int with int, text
    with text, float with float), `eq` against the rest: a row of one of those kinds costs one
    lookup plus the items of other kinds, never an `eq` call per item
    (tests/unit/test_parser_linear.py counts the calls)."""
    exact: dict[type, set[Any]] = {int: set(), str: set(), float: set()}
    for c in consts:
        bucket = exact.get(type(c))
        if bucket is not None:
            bucket.add(c)
    cross = {t: [c for c in consts if type(c) is not t] for t in exact}
    has_null = any(c is None for c in consts)

    def in_list(row: Any, env: Any) -> bool:
        a = lf(row, env)
        if a is None:
            return has_null
        same = exact.get(type(a))
        if same is None:
            return any(eq(a, c) for c in consts)
        return a in same or any(eq(a, c) for c in cross[type(a)])
    return in_list


def compile_expr(e: A.Expr, ctx: Ctx) -> Fn:
    if _depth(e) > MAX_DEPTH:
        raise qerr(f"expression too deep: more than {MAX_DEPTH} levels")
    return _c(e, ctx)


def _const(v: Any) -> Fn:
    return lambda row, env: v


def field_reader(schema: Schema, name: str, keys: tuple[str, ...] = ()) -> Fn:
    if name == "id" and not keys:
        return lambda row, env: row["id"]
    f = schema.field(name)
    if keys:
        if f.type != "json":
            raise qerr(f"`{name}.{'.'.join(keys)}` reads into `{name}`, which is {V.type_label(f.type)}, not json")
        if len(keys) == 1:
            k0 = keys[0]

            def read1(row, env):
                v = row.get(name)
                return v.get(k0) if type(v) is dict else None
            return read1
        return lambda row, env: read_path(row.get(name), keys)
    return lambda row, env: row.get(name)


def _c(e: A.Expr, ctx: Ctx) -> Fn:  # noqa: C901 - a dispatch over node kinds
    # isinstance, not `type(e) is`, so mypy narrows `e`: no node class subclasses another
    # (ql/ast.py), so each node takes the branch of its own class.
    if isinstance(e, A.Lit):
        return _const(e.value)
    if isinstance(e, A.Param):
        n = e.n - 1
        ctx.nparams = max(ctx.nparams, e.n)
        return lambda row, env: env.params[n]
    if isinstance(e, (A.Field, A.Path)):
        if not ctx.row:
            raise qerr(f"`{e.name}` names a field, but there is no row here: a value is written without one")
        if ctx.schema is None:
            raise qerr("no collection to read fields from")
        return field_reader(ctx.schema, e.name, e.keys if isinstance(e, A.Path) else ())
    if isinstance(e, A.New):
        if not ctx.new:
            raise qerr("`new.` names the incoming document, only in `if absent else set` and access transitions")
        if ctx.schema is not None:
            ctx.schema.field(e.name)
        name, keys = e.name, e.keys
        return lambda row, env: read_path(env.new.get(name), keys)
    if isinstance(e, A.Claim):
        if not ctx.claims:
            raise qerr("`$jwt.` claims are read only inside access rules")
        keys = e.keys

        def claim(row, env):
            v = read_path(env.claims, keys, V.MISSING)
            if v is V.MISSING:
                raise _Missing()
            return v
        return claim
    if isinstance(e, A.Duration):
        raise qerr("a duration such as 15m is written only inside @ttl(...) and as bucket's interval")
    if isinstance(e, A.Arith):
        lf, rf, op = _c(e.left, ctx), _c(e.right, ctx), e.op
        right, left = e.right, e.left
        if op == "+" and isinstance(right, A.Lit) and type(right.value) is int:
            c = right.value
            if isinstance(left, A.Call) and left.name == "now" and not left.args:
                # `now() + 30000`, a lease's end: one addition, no dispatch on kinds (the
                # general path gives the same timestamp, or the same error past its range).
                def now_plus(row, env):
                    r = env.now + c
                    if V.TS_MIN <= r <= V.TS_MAX:
                        return V.Ts(r)
                    return arith("+", env.now, c)
                return now_plus
            if isinstance(left, A.Field) and left.name != "id":
                name = left.name

                def field_plus(row, env, lo=V.INT_MIN, hi=V.INT_MAX):  # `attempts + 1`: no reader to call
                    a = row.get(name)
                    if type(a) is int:
                        r = a + c
                        if lo <= r <= hi:
                            return r
                    return arith("+", lf(row, env), c)
                return field_plus
        if op == "+":
            def add(row, env):
                a = lf(row, env)
                b = rf(row, env)
                if type(a) is int and type(b) is int:
                    r = a + b
                    if V.INT_MIN <= r <= V.INT_MAX:
                        return r
                return arith("+", a, b)
            return add
        return lambda row, env: arith(op, lf(row, env), rf(row, env))
    if isinstance(e, A.Cmp):
        return _cmp(e, ctx)
    if isinstance(e, A.Match):
        lf, rf = _c(e.left, ctx), _c(e.right, ctx)

        def match(row, env):
            a, b = lf(row, env), rf(row, env)
            return type(a) is str and type(b) is str and b.lower() in a.lower()
        return match
    if isinstance(e, A.Has):
        lf, rf = _c(e.left, ctx), _c(e.right, ctx)

        def has(row, env):
            a = lf(row, env)
            if type(a) is not list and type(a) is not tuple:
                return False
            b = rf(row, env)
            return any(eq(x, b) for x in a)
        return has
    if isinstance(e, A.In):
        lf = _c(e.left, ctx)
        if e.items is not None:
            for i in e.items:
                if not isinstance(i, (A.Lit, A.Param, A.Claim, A.ListExpr, A.ObjectExpr)):
                    raise qerr("a list holds literals, parameters and claims only")
            if all(isinstance(i, A.Lit) for i in e.items):
                # no function per item: a large list's functions, freed at once, held the GIL for the whole free
                consts = [i.value for i in e.items if isinstance(i, A.Lit)]  # all are: the test narrows for mypy
                return _in_consts(lf, consts)
            fns = [_c(i, ctx) for i in e.items]
            return lambda row, env: any(eq(lf(row, env), f(row, env)) for f in fns)
        sf = _c(cast(A.Expr, e.source), ctx)  # without items the parser always gives a source

        def in_src(row, env):
            src = sf(row, env)
            if type(src) not in (list, tuple):
                src = [src]
            a = lf(row, env)
            return any(eq(a, x) for x in src)
        return in_src
    if isinstance(e, A.IsNull):
        f = _c(e.expr, ctx)
        if e.negated:
            return lambda row, env: f(row, env) is not None
        return lambda row, env: f(row, env) is None
    if isinstance(e, A.And):
        fns = [_bool(i, ctx) for i in e.items]
        if len(fns) == 2:
            f1, f2 = fns
            return lambda row, env: f1(row, env) and f2(row, env)
        return lambda row, env: all(f(row, env) for f in fns)
    if isinstance(e, A.Or):
        fns = [_bool(i, ctx) for i in e.items]
        return lambda row, env: any(f(row, env) for f in fns)
    if isinstance(e, A.Not):
        f = _bool(e.expr, ctx)
        return lambda row, env: not f(row, env)
    if isinstance(e, A.Case):
        whens = [(_bool(c, ctx), _c(v, ctx)) for c, v in e.whens]
        else_ = _c(e.else_, ctx) if e.else_ is not None else _const(None)

        def case(row, env):
            for c, v in whens:
                if c(row, env):
                    return v(row, env)
            return else_(row, env)
        return case
    if isinstance(e, A.ListExpr):
        for i in e.items:
            if not isinstance(i, (A.Lit, A.Param, A.Claim, A.ListExpr, A.ObjectExpr)):
                raise qerr("a list holds literals, parameters and claims only")
        fns = [_c(i, ctx) for i in e.items]
        return lambda row, env: [f(row, env) for f in fns]
    if isinstance(e, A.ObjectExpr):
        # Object keys are kept sorted (§3.3), so equal objects compare equal and answer alike.
        items = sorted(((k, _c(v, ctx)) for k, v in e.items), key=lambda kv: kv[0])
        return lambda row, env: {k: f(row, env) for k, f in items}
    if isinstance(e, A.Call):
        return _call(e, ctx)
    raise qerr(f"cannot compile {type(e).__name__}")


def _bool(e: A.Expr, ctx: Ctx) -> Fn:
    f = _c(e, ctx)
    if isinstance(e, (A.Cmp, A.And, A.Or, A.Not, A.IsNull, A.In, A.Has, A.Match)):
        return f
    return lambda row, env: V.truthy(f(row, env))


def _cmp(e: A.Cmp, ctx: Ctx) -> Fn:
    lf, rf = _c(e.left, ctx), _c(e.right, ctx)
    op = e.op
    if op == "<=" and isinstance(e.left, A.Field):
        name = e.left.name

        def le_field(row, env):
            a = row.get(name) if name != "id" else row["id"]
            b = rf(row, env)
            if a is None or b is None:
                return False
            ta = type(a)
            if ta is type(b):
                if ta is V.Ts or ta is int or ta is str or ta is float:
                    return a <= b  # lists and objects are not Python-comparable: cmp3 orders them
            elif ta is V.Ts and type(b) is int:
                return a <= b
            return cmp3(a, b) <= 0
        return le_field
    fn = CMP[op]
    return lambda row, env: fn(lf(row, env), rf(row, env))


def _nargs(e: A.Call, lo: int, hi: int | None = None) -> None:
    n = len(e.args)
    hi = lo if hi is None else hi
    if n < lo or (hi >= 0 and n > hi):
        want = str(lo) if lo == hi else (f"{lo} or more" if hi < 0 else f"{lo} to {hi}")
        raise qerr(f"{e.name}() takes {want} argument{'s' if want != '1' else ''}, found {n}")


def _call(e: A.Call, ctx: Ctx) -> Fn:  # noqa: C901
    name = e.name
    if name == "now":
        _nargs(e, 0)
        return lambda row, env: env.now
    if name == "coalesce":
        _nargs(e, 1, -1)
        fns = [_c(a, ctx) for a in e.args]

        def coalesce(row, env):
            for f in fns:
                v = f(row, env)
                if v is not None:
                    return v
            return None
        return coalesce
    if name in ("greatest", "least"):
        _nargs(e, 1, -1)
        fns = [_c(a, ctx) for a in e.args]
        pick_max = name == "greatest"

        def extreme(row, env):
            best = None
            for f in fns:
                v = f(row, env)
                if v is None:
                    continue
                if best is None or (cmp3(v, best) > 0 if pick_max else cmp3(v, best) < 0):
                    best = v
            return best
        return extreme
    if name in ("lower", "upper"):
        up = name == "upper"

        def case_map(v: Any) -> Any:
            if type(v) is not str:
                raise terr(f"{name}() takes text, found {V.kind_name(v)}")
            return v.upper() if up else v.lower()
        return _of_one(e, ctx, case_map)
    if name == "len":
        def length(v: Any) -> Any:
            if type(v) in (str, list, tuple, bytes, dict):
                return len(v)
            raise terr(f"len() takes text or a list, found {V.kind_name(v)}")
        return _of_one(e, ctx, length)
    if name == "timestamp":
        def to_ts(v: Any) -> Any:
            t = type(v)
            if t is V.Ts:
                return v
            if t is int:
                return V.make_ts(v)
            if t is str:
                ms = V.parse_time(v)
                if ms is None:
                    raise terr(f"timestamp() could not read {v[:64]!r} as a time")
                return V.make_ts(ms)
            raise terr(f"timestamp() takes epoch ms or ISO text, found {V.kind_name(v)}")
        return _of_one(e, ctx, to_ts)
    if name == "bucket":
        _nargs(e, 2)
        f = _c(e.args[0], ctx)
        iv_node = e.args[1]
        if isinstance(iv_node, A.Duration):
            iv = interval(iv_node)
            return lambda row, env: bucket(f(row, env), iv)
        ivf = _c(iv_node, ctx)
        return lambda row, env: bucket(f(row, env), interval(ivf(row, env)))
    if name == "distance":
        _nargs(e, 2)
        fa, fb = _c(e.args[0], ctx), _c(e.args[1], ctx)
        return lambda row, env: distance(fa(row, env), fb(row, env))
    if name == "within":
        _nargs(e, 2)
        fa, fb = _c(e.args[0], ctx), _c(e.args[1], ctx)
        return lambda row, env: within(fa(row, env), fb(row, env))
    if name == "expired":
        _nargs(e, 0)
        if not ctx.where:
            raise qerr("expired() is read only in a `where`")
        ttl = ctx.schema.ttl_field if ctx.schema is not None else None
        if ttl is None:
            raise qerr(f"expired() needs a @ttl field, and `{ctx.schema.name if ctx.schema else '?'}` has none")
        fname, d = ttl.name, ttl.ttl_ms

        def expired(row, env):
            v = row.get(fname)
            return v is not None and v + d <= env.now
        return expired
    raise qerr(f"unknown function `{name}()`")


def _of_one(e: A.Call, ctx: Ctx, of_value: Callable[[Any], Any]) -> Fn:
    """A function of one argument, null for null: `of_value` sees every other value."""
    _nargs(e, 1)
    f = _c(e.args[0], ctx)

    def call(row, env):
        v = f(row, env)
        return None if v is None else of_value(v)
    return call


_KNOWN = ("int", "timestamp", "text", "bool")


def static_type(e: A.Expr, schema: Schema) -> str | None:
    """The field type every non-null value of `e` has, known from the schema alone, or None.
    A write converts a value to its field's type; a value already of that type (or null) comes
    through the conversion unchanged, so a patch skips it: `attempts + 1` into an int field,
    `now() + 30000` into a timestamp. Only kinds whose conversion is the identity are named."""
    if isinstance(e, A.Lit):
        return {bool: "bool", int: "int", str: "text"}.get(type(e.value))
    if isinstance(e, A.Field):
        f = schema.fields.get(e.name)
        return f.type if f is not None and f.type in _KNOWN else None
    if isinstance(e, A.Call):
        return "timestamp" if e.name == "now" and not e.args else None
    if isinstance(e, A.Arith):
        a, b = static_type(e.left, schema), static_type(e.right, schema)
        if a == "int" and b == "int":
            return "int"  # int with int is an int in range, or an error (§9.3)
        if e.op in ("+", "-") and a == "timestamp" and b == "int":
            return "timestamp"
        if e.op == "+" and a == "int" and b == "timestamp":
            return "timestamp"
    return None


def guard_missing(f: Fn) -> Fn:
    """A filter reading a claim the token lacks keeps no row. An error of another row's filter
    names that row (`FenecError.row`), for the token's statement to withhold its message when
    the token may not read the row (engine/scoped.py); at no cost until something raises."""
    def guarded(row, env):
        try:
            return f(row, env)
        except _Missing:
            return False
        except FenecError as e:
            if e.row is None:
                e.row = row
            raise
    return guarded
