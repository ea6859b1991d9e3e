"""Statements -> prepared statements: everything worked out from the text and the schema,
once, so a run only binds parameters and the time (STYLE.md point 5).

A prepared read or picking write holds a `Query` (engine/access.py); a write holds its patch or
documents as closures that convert each value to its field's type on the way in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, final

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
        # fills the fields a row leaves out with null, in one C call a row. A row holds only
        # id and declared fields; one that held more goes the long way.
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
                 "uses_claims", "require", "count", "verb", "alive", "schema", "plain", "gate")

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
        self.docs: list[Doc] | None = None
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
        # A claim on a queue with controls: engine/limits.py's Gate, which runs it (None: none)
        self.gate: Any = None


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


def prepare(stmt: A.Statement, schemas: dict[str, Schema], allow_claims: bool = False,
            controls: Any = None) -> Prepared:
    """`controls`: the engine's queue controls (engine/controls.py), which give a claim on a
    queue with any its gate, here once rather than per run or per row."""
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
            if controls is not None and controls.on(coll):
                p.gate = controls.gate(coll, stmt, schema)
    elif isinstance(stmt, A.Put):
        vctx = Ctx(schema, row=False)
        if stmt.documents is not None:
            types: dict[int, Any] = {}
            converters: dict[Any, Callable] = {}
            calls: dict[tuple[str, Any], tuple[Callable, Callable]] = {}
            p.docs = [_doc(schema, d, coll, vctx, types, converters, calls) for d in stmt.documents]
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


class Doc:
    """A put's document prepared. `fixed`: each value the text alone decides (a literal, or an
    object or a list of literals) converted to its field's type once, here; `copied`: the fields
    of `fixed` holding an object or a list, each with whether it holds none (a shallow copy
    will do), copied for each row so that no two rows share one (a prepared statement may run
    again); `worked`: (target, value closure, conversion) for each
    other value (a call, a parameter), worked out and converted at each run, in the order written.
    A row is `fixed`'s copy with `worked` written over it: the same row the closures of every value
    would build, without a closure or a conversion per literal at each run."""

    __slots__ = ("fixed", "copied", "worked")

    def __init__(self, fixed: dict[str, Any], copied: list[tuple[str, bool]], worked: list) -> None:
        self.fixed = fixed
        self.copied = copied
        self.worked = worked


_VARIES: Final[Any] = object()  # what `_constant` answers for a value that only a run can work out
_CONSTANT_DEPTH: Final = 64  # objects and lists nested deeper go through the compiler (its depth check)
_LIT: Final = A.Lit
_OBJECT: Final = A.ObjectExpr
_LIST: Final = A.ListExpr
_CALL: Final = A.Call


def _constant(e: A.Expr, depth: int) -> Any:
    """The value a literal, or an object or a list of literals, works out to, as its closure
    (plan/compile.py) would build it, but for the order of an object's keys, which is left to
    the conversion (a json field's sorts them; every other type refuses an object); `_VARIES`
    for anything else."""
    t = type(e)
    if t is _LIT:
        return e.value  # type: ignore[attr-defined]
    if depth >= _CONSTANT_DEPTH:
        return _VARIES
    if t is _OBJECT:
        out: dict[str, Any] = {}
        for k, item in e.items:  # type: ignore[attr-defined]
            v = _constant(item, depth + 1)
            if v is _VARIES:
                return _VARIES
            out[k] = v
        return out
    if t is _LIST:
        items: list[Any] = []
        for item in e.items:  # type: ignore[attr-defined]
            v = _constant(item, depth + 1)
            if v is _VARIES:
                return _VARIES
            items.append(v)
        return items
    return _VARIES


def _flat(v: Any) -> bool:
    """Whether an object or a list holds no object or list: a shallow copy of it is a whole one."""
    for x in (v.values() if type(v) is dict else v):
        if type(x) is dict or type(x) is list:
            return False
    return True


def _doc(schema: Schema, entries: tuple[A.Entry, ...], coll: str, ctx: Ctx, types: dict[int, Any],
         converters: dict[Any, Callable], calls: dict[tuple[str, Any], tuple[Callable, Callable]]) -> Doc:
    """The document prepared (`Doc`), each value's conversion picked once as `_plain` picks a
    patch's (a put's `now()` and `0` need none). `types`: each target's field type, by the target
    node (the documents of a put read by ql/literals.py share one node per key), `converters`
    each field type's conversion, and `calls` each call without arguments compiled, by its name
    and field type: kept while the statement is prepared. A document writing a path
    (`payload.to`) has every value worked at each run, in the order written."""
    plain = True
    for e in entries:
        if e.target.keys:
            plain = False  # a path writes into the value its field holds so far: all in order
    fixed: dict[str, Any] = {}
    copied: list[tuple[str, bool]] = []
    worked: list = []
    worked_names: list[str] = []  # a value fixed after one worked for the same field would come first
    for e in entries:
        t = e.target
        ftype = types.get(id(t))
        if ftype is None:
            ftype = types[id(t)] = _target_type(schema, t, coll)
        value = e.value
        if plain and t.name not in worked_names:
            v = _constant(value, 0)
            if v is not _VARIES:
                if t.name == "id":
                    fixed["id"] = v  # as written: the put checks it (execute._doc_id)
                    continue
                convert = converters.get(ftype)
                if convert is None:
                    convert = converters[ftype] = C.coercer(ftype)
                try:
                    stored = convert(v)
                except FenecError:
                    pass  # refused at the run, in its turn among the document's values, as it always was
                else:
                    fixed[t.name] = stored
                    if type(stored) is dict or type(stored) is list:
                        copied.append((t.name, _flat(stored)))
                    continue
        if type(value) is _CALL and not value.args:
            # `now()` in each of a thousand documents: compiled once (a call without arguments
            # works out the same wherever it is written), converted as its field's type asks
            key = (value.name, ftype)
            done = calls.get(key)
            if done is None:
                convert = C.same if static_type(value, schema) == ftype else C.coercer(ftype)
                done = calls[key] = (compile_expr(value, ctx), convert)
            worked.append((t, done[0], done[1]))
        else:
            convert = C.same if static_type(value, schema) == ftype else C.coercer(ftype)
            worked.append((t, compile_expr(value, ctx), convert))
        worked_names.append(t.name)
    return Doc(fixed, copied, worked)


__all__ = ["prepare", "Prepared", "Doc", "Rows", "render", "columns", "field_reader", "make_alive"]
