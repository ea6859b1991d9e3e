"""Statements -> prepared statements: everything worked out from the text and the schema,
once, so a run only binds parameters and the time (STYLE.md point 5).

A prepared read or picking write holds a `Query` (engine/access.py); a write holds its patch or
documents as closures that convert each value to its field's type on the way in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

from .. import convert as C
from .. import values as V
from ..errors import FenecError
from ..plan.compile import Ctx, Fn, compile_expr, field_reader, guard_missing, static_type
from ..plan.planner import and_terms, bindable, plan_access
from ..plan.schema import Schema, no_collection
from ..ql import ast as A
from ..ql.ast import mentions
from .access import Query


class Column:
    __slots__ = ("name", "read")

    def __init__(self, name: str, read: Callable) -> None:
        self.name = name
        self.read = read


@final  # lets mypy narrow render's `type(cols) is AllColumns` both ways
class AllColumns:
    """`*`: id and every field in declaration order. Rendered without a closure per column:
    the row's values are copied as they are and only the fields whose type answers in another
    form (timestamps as ISO text, points and bytes as lists) are converted."""

    __slots__ = ("names", "convert", "blank")

    def __init__(self, schema: Schema) -> None:
        self.names = list(schema.fields)
        self.blank = dict.fromkeys(["id", *self.names])
        self.convert = [(n, V.format_time if f.type == "timestamp" else V.answer_value)
                        for n, f in schema.fields.items() if f.type not in ("int", "float", "text", "bool", "json")]


def columns(schema: Schema, items: tuple[A.SelectItem, ...] | None, ctx: Ctx) -> list[Column] | AllColumns:
    if items is None:
        return AllColumns(schema)
    return [Column(it.name, compile_expr(it.expr, ctx)) for it in items]


def render(cols: list[Column] | AllColumns, rows: list[dict], env: Any) -> list[dict]:
    out = []
    if type(cols) is AllColumns:
        # The blank answer merged with the row (`blank | r`, in C) keeps the declared order and
        # fills the fields a row leaves out with null: 52 bytecodes a row became about 30. A
        # row holds only id and declared fields; one that held more goes the long way.
        blank = cols.blank
        width = len(blank)
        out = [blank | r for r in rows]
        if sum(map(len, out)) != width * len(out):  # each holds at least the blank's keys
            out = [{"id": r["id"], **{n: r.get(n) for n in cols.names}} for r in rows]
        for n, conv in cols.convert:
            for d in out:
                v = d[n]
                if v is not None:
                    d[n] = conv(v)
        return out
    av = V.answer_value
    for r in rows:
        d = {}
        for c in cols:
            v = c.read(r, env)
            t = type(v)
            d[c.name] = v if (t is int or t is str or v is None or t is float or t is bool or t is dict) else av(v)
        out.append(d)
    return out


@final  # lets mypy narrow `type(rows) is Rows` both ways (http/app.py)
class Rows:
    """A `get`'s answer of many rows, kept as the rows it picked and rendered a slice at a time
    when asked (`slice`), so an answer nobody reads holds no rendered row: the engine's answer of
    such a get where its caller asked for it (`Engine.execute`'s `pieces`). The answer is still
    what the statement saw under its lock: a row is never changed in place (collection.py), so
    the dicts picked stay as they were when picked, whatever is written after."""

    __slots__ = ("cols", "rows", "env")

    def __init__(self, cols: list[Column] | AllColumns, rows: list[dict], env: Any) -> None:
        self.cols = cols
        self.rows = rows
        self.env = env

    def __len__(self) -> int:
        return len(self.rows)

    def slice(self, start: int, stop: int) -> list[dict]:
        """The answer's rows from `start` to `stop`, rendered now."""
        return render(self.cols, self.rows[start:stop], self.env)


class Prepared:
    __slots__ = ("stmt", "kind", "coll", "query", "cols", "patch", "docs", "else_patch", "nparams",
                 "uses_claims", "require", "count", "verb", "alive", "schema", "plain")

    def __init__(self, stmt: A.Statement) -> None:
        self.stmt = stmt
        self.kind = type(stmt).__name__.lower()
        # `coll`, `query`, `patch` and `else_patch` are typed as the runs read them: every
        # statement names its collection, and prepare() sets the query of each get, set and del,
        # the patch of each set and the else-patch of each upsert, the only runs that read them.
        # mypy cannot follow the kinds, hence the ignores (a test in the runs would cost each claim).
        self.coll: str = getattr(stmt, "collection", None) or getattr(stmt, "name", None)  # type: ignore[assignment]
        self.query: Query = None  # type: ignore[assignment]
        self.cols: list[Column] | AllColumns | None = None
        # (target, value closure, field type, reads the row?) per entry: see _patch
        self.patch: list[tuple[A.Target, Callable, Any, bool]] = None  # type: ignore[assignment]
        self.docs: list | None = None
        self.else_patch: list[tuple[A.Target, Callable, Any, bool]] = None  # type: ignore[assignment]
        self.nparams = 0
        self.uses_claims = False
        self.require = getattr(stmt, "require", None)
        self.count = getattr(stmt, "count", False)
        self.verb = getattr(stmt, "verb", "")
        self.alive: Callable | None = None
        self.schema: Schema | None = None
        # A patch of whole fields only, split into the values that read no row (worked out
        # once per run) and those that read it: (fixed, per_row), each [(field, fn, convert)].
        self.plain: tuple[list, list] | None = None


def make_alive(schema: Schema) -> Callable[[dict, Any], bool] | None:
    ttl = schema.ttl_field
    if ttl is None:
        return None
    name, d = ttl.name, ttl.ttl_ms

    def alive(row: dict, env: Any) -> bool:
        v = row.get(name)
        return v is None or v + d > env.now
    return alive


def _query(schema: Schema, where: A.Expr | None, order: tuple[A.OrderKey, ...], limit: int | None,
           offset: int | None, ctx: Ctx) -> Query:
    wctx = Ctx(schema, where=True, claims=ctx.claims)
    filt: Fn | None = None
    if where is not None:
        filt = compile_expr(where, wctx)
        if ctx.claims:
            filt = guard_missing(filt)
        if not isinstance(where, (A.Cmp, A.And, A.Or, A.Not, A.IsNull, A.In, A.Has, A.Match)):
            inner = filt
            filt = lambda row, env: V.truthy(inner(row, env))  # noqa: E731
    alive = make_alive(schema)
    if alive is not None and not mentions(where, lambda n: isinstance(n, A.Call) and n.name == "expired"):
        if filt is None:
            filt = alive
        else:
            f0 = filt
            filt = lambda row, env: alive(row, env) and f0(row, env)  # noqa: E731
    okeys = [(compile_expr(k.expr, Ctx(schema, claims=ctx.claims)), k.desc) for k in order]
    acc = plan_access(schema, where, order, ctx)
    covered = alive is None and not ctx.claims and _range_only(schema, where, acc)
    q = Query(filt, acc, okeys, limit, offset or 0, None if covered else filt)
    ctx.nparams = max(ctx.nparams, wctx.nparams)
    return q


def _range_only(schema: Schema, where: A.Expr | None, acc: Any) -> bool:
    """Whether the filter is only `f < x`, `f <= x`, `f > x`, `f >= x` terms on the walked
    `@sorted` int or timestamp field, with bounds that read no row: the bounded walk then yields
    exactly the rows the filter keeps (the index holds no nulls in a range, and compares these
    types as the filter does), so the walk need not test each row again."""
    tgt = acc.walk
    if where is None or tgt is None or tgt == "id" or "." in tgt:
        return False
    f = schema.fields.get(tgt)
    if f is None or f.type not in ("int", "timestamp") or f.index not in ("sorted", "ttl"):
        return False
    terms = and_terms(where)
    for t in terms:
        if not (isinstance(t, A.Cmp) and t.op in ("<", "<=", ">", ">=")):
            return False
        if not ((isinstance(t.left, A.Field) and t.left.name == tgt and bindable(t.right))
                or (isinstance(t.right, A.Field) and t.right.name == tgt and bindable(t.left))):
            return False
    return len(terms) == len(acc.ranges.get(tgt, ()))


def _target_type(schema: Schema, t: A.Target, coll: str) -> Any:
    if t.name == "id":
        return "id"
    f = schema.field(t.name)
    if t.keys:
        if f.type != "json":
            raise FenecError("query", f"`{t.text}` writes into `{t.name}`, which is {V.type_label(f.type)}, not json")
        if len(t.keys) > A.MAX_PATH_KEYS:
            raise FenecError("query", f"a path names at most {A.MAX_PATH_KEYS} keys")
    return f.type


def prepare(stmt: A.Statement, schemas: dict[str, Schema], allow_claims: bool = False) -> Prepared:
    p = Prepared(stmt)
    ctx = Ctx(None, claims=allow_claims)
    if isinstance(stmt, (A.CreateCollection, A.DropCollection, A.CreateIndex)):
        return p
    coll = stmt.collection  # type: ignore[attr-defined]
    schema = schemas.get(coll)
    if schema is None:
        raise no_collection(coll, schemas)  # a scoped plan is given only the collections it may see
    p.schema = schema
    ctx.schema = schema
    if isinstance(stmt, A.Get):
        p.query = _query(schema, stmt.where, stmt.order, stmt.limit, stmt.offset, ctx)
        if not stmt.count:
            p.cols = columns(schema, stmt.select, Ctx(schema, claims=allow_claims))
    elif isinstance(stmt, (A.Set, A.Del)):
        p.query = _query(schema, stmt.where, stmt.order, stmt.limit, None, ctx)
        if stmt.returning is not None or stmt.returning_all:
            p.cols = columns(schema, None if stmt.returning_all else stmt.returning, Ctx(schema))
        if isinstance(stmt, A.Set):
            p.patch = _patch(schema, stmt.patch, coll, Ctx(schema, claims=allow_claims))
            p.plain = _plain(schema, stmt.patch, p.patch)
    elif isinstance(stmt, A.Put):
        vctx = Ctx(schema, row=False)
        if stmt.documents is not None:
            types: dict[int, Any] = {}
            p.docs = [_doc(schema, d, coll, vctx, types) for d in stmt.documents]
        if stmt.else_patch is not None:
            p.else_patch = _patch(schema, stmt.else_patch, coll, Ctx(schema, new=True))
        ctx.nparams = max(ctx.nparams, vctx.nparams, stmt.param or 0)
    p.nparams = ctx.nparams
    p.alive = make_alive(schema)
    return p


def _patch(schema: Schema, entries: tuple[A.Entry, ...], coll: str, ctx: Ctx) -> list:
    """(target, value closure, field type, reads the row?) per entry. A value that reads no row
    (`now() + 30000`, `$1`) is worked out once per run, not once per row."""
    out = []
    for e in entries:
        if e.target.name == "id" and not e.target.keys:
            raise FenecError("query", "a patch cannot change `id`")
        ftype = _target_type(schema, e.target, coll)
        per_row = mentions(e.value, lambda n: isinstance(n, (A.Field, A.Path, A.New)))
        out.append((e.target, compile_expr(e.value, ctx), ftype, per_row))
    return out


def _plain(schema: Schema, entries: tuple[A.Entry, ...], patch: list) -> tuple[list, list] | None:
    names = [t.name for t, _, _, _ in patch]
    if any(t.keys for t, _, _, _ in patch) or len(set(names)) != len(names):
        return None
    fixed: list[tuple[str, Callable, Callable]] = []
    per_row: list[tuple[str, Callable, Callable]] = []
    for e, (t, fn, ftype, reads) in zip(entries, patch, strict=True):
        # A value already of its field's type needs no conversion (plan/compile.static_type):
        # a claim's ten `attempts + 1` skip ten calls.
        convert = C.same if static_type(e.value, schema) == ftype else C.coercer(ftype)
        (per_row if reads else fixed).append((t.name, fn, convert))
    return fixed, per_row


def _doc(schema: Schema, entries: tuple[A.Entry, ...], coll: str, ctx: Ctx, types: dict[int, Any]) -> list:
    """(target, value closure, conversion) per entry: the conversion picked once, as `_plain` picks
    a patch's (a put's `now()` and `0` need none, a json field's `$1` its short way). `types`: each
    target's field type, by the target node (the documents of a put read by ql/literals.py share
    one node per key), kept while the statement is prepared."""
    out = []
    for e in entries:
        ftype = types.get(id(e.target))
        if ftype is None:
            ftype = types[id(e.target)] = _target_type(schema, e.target, coll)
        convert = C.same if static_type(e.value, schema) == ftype else C.coercer(ftype)
        out.append((e.target, compile_expr(e.value, ctx), convert))
    return out


__all__ = ["prepare", "Prepared", "Rows", "render", "columns", "field_reader", "make_alive"]
