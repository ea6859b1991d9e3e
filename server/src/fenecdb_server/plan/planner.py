"""What an index can do for a filter and an order (fenecql.md §14).

The planner reads the statement once, at compile time, and records every term of the
top-level `and` chain that an index could serve, with its bound compiled as a closure over
`env` (parameters and the statement's `now()`, folded before the walk: rule 1). Which of them
is used is decided per run by the engine (`engine/access.py`), once the bounds are known,
because only then can it count a range (rules 4 and 5). The full filter is always tested on
every row an index yields, so an index only ever narrows the rows read: plans change cost,
never answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ql import ast as A
from ..ql.ast import mentions
from .compile import Ctx, Fn, compile_expr
from .schema import Schema


@dataclass(slots=True)
class RangeTerm:
    target: str  # field name, path text, or "id"
    op: str  # < <= > >= =
    bound: Fn  # env -> value  (called as bound(None, env))


@dataclass(slots=True)
class EqTerm:
    target: str
    bounds: list[Fn]  # any of these values


@dataclass(slots=True)
class GeoTerm:
    target: str
    kind: str  # radius | box
    point: Fn | None = None
    radius: Fn | None = None
    box: Fn | None = None


@dataclass(slots=True)
class Access:
    ranges: dict[str, list[RangeTerm]] = field(default_factory=dict)
    eqs: list[EqTerm] = field(default_factory=list)
    geos: list[GeoTerm] = field(default_factory=list)
    walk: str | None = None  # order by one indexed field (or id): walk it
    walk_desc: bool = False
    geo_walk: str | None = None  # order distance(field, point) asc
    geo_point: Fn | None = None


FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


def bindable(e: A.Expr) -> bool:
    """No row is read: literals, parameters, claims, now(), arithmetic and lists of those."""
    return not mentions(e, lambda n: isinstance(n, (A.Field, A.Path, A.New))
                        or (isinstance(n, A.Call) and n.name in ("expired",)))


def _target(e: A.Expr) -> str | None:
    if isinstance(e, A.Field):
        return e.name
    if isinstance(e, A.Path):
        return ".".join((e.name, *e.keys))
    return None


def and_terms(where: A.Expr | None) -> list[A.Expr]:
    if where is None:
        return []
    if isinstance(where, A.And):
        out: list[A.Expr] = []
        for it in where.items:
            out.extend(and_terms(it))
        return out
    return [where]


def index_kind(schema: Schema, target: str) -> str | None:
    if target == "id":
        return "id"
    if "." in target:
        return schema.indexes.get(target)
    f = schema.fields.get(target)
    return f.index if f is not None else None


def plan_access(schema: Schema, where: A.Expr | None, order: tuple[A.OrderKey, ...], ctx: Ctx) -> Access:
    acc = Access()
    bctx = Ctx(schema, row=False, claims=ctx.claims, new=ctx.new)
    for term in and_terms(where):
        if isinstance(term, A.Cmp) and term.op != "!=":
            lt, rt = _target(term.left), _target(term.right)
            if lt is not None and bindable(term.right):
                tgt, op, other = lt, term.op, term.right
            elif rt is not None and bindable(term.left):
                tgt, op, other = rt, FLIP[term.op], term.left
            else:
                tgt = None
            if tgt is not None:
                kind = index_kind(schema, tgt)
                if kind in ("sorted", "ttl", "id") or (kind in ("hash", "unique", "unique_pending") and op == "="):
                    fn = compile_expr(other, bctx)
                    if op == "=" and kind in ("hash", "unique", "unique_pending", "id"):
                        acc.eqs.append(EqTerm(tgt, [fn]))
                    if kind in ("sorted", "ttl", "id"):
                        acc.ranges.setdefault(tgt, []).append(RangeTerm(tgt, op, fn))
            # distance(f, p) <= r  /  r >= distance(f, p)
            geo = _geo_radius(term, schema, bctx)
            if geo is not None:
                acc.geos.append(geo)
        elif isinstance(term, A.In) and term.items is not None:
            tgt = _target(term.left)
            if tgt is not None and all(bindable(i) for i in term.items):
                kind = index_kind(schema, tgt)
                if kind in ("hash", "unique", "unique_pending", "id"):
                    acc.eqs.append(EqTerm(tgt, [compile_expr(i, bctx) for i in term.items]))
        elif isinstance(term, A.Call) and term.name == "within" and len(term.args) == 2:
            tgt = _target(term.args[0])
            if tgt is not None and index_kind(schema, tgt) == "geo" and bindable(term.args[1]):
                acc.geos.append(GeoTerm(tgt, "box", box=compile_expr(term.args[1], bctx)))
    if len(order) == 1:
        key = order[0]
        tgt = _target(key.expr)
        if tgt is not None and index_kind(schema, tgt) in ("sorted", "ttl", "id"):
            acc.walk = tgt
            acc.walk_desc = key.desc
        elif (not key.desc and isinstance(key.expr, A.Call) and key.expr.name == "distance"
              and len(key.expr.args) == 2):
            a, b = key.expr.args
            ta, tb = _target(a), _target(b)
            if ta is not None and index_kind(schema, ta) == "geo" and bindable(b):
                acc.geo_walk, acc.geo_point = ta, compile_expr(b, bctx)
            elif tb is not None and index_kind(schema, tb) == "geo" and bindable(a):
                acc.geo_walk, acc.geo_point = tb, compile_expr(a, bctx)
    return acc


def _geo_radius(term: A.Cmp, schema: Schema, bctx: Ctx) -> GeoTerm | None:
    op = term.op
    call, other = term.left, term.right
    if not (isinstance(call, A.Call) and call.name == "distance"):
        call, other = term.right, term.left
        op = FLIP.get(op, op)
    if not (isinstance(call, A.Call) and call.name == "distance" and len(call.args) == 2):
        return None
    if op not in ("<", "<=") or not bindable(other):
        return None
    a, b = call.args
    ta, tb = _target(a), _target(b)
    if ta is not None and index_kind(schema, ta) == "geo" and bindable(b):
        return GeoTerm(ta, "radius", point=compile_expr(b, bctx), radius=compile_expr(other, bctx))
    if tb is not None and index_kind(schema, tb) == "geo" and bindable(a):
        return GeoTerm(tb, "radius", point=compile_expr(a, bctx), radius=compile_expr(other, bctx))
    return None
