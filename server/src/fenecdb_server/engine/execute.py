"""Running prepared statements against the collections, inside a block.

A `Block` is one all-or-nothing unit under the writer (fenecql.md §13): every change is applied
at once to the live collections and noted in `undo`; the storage ops that replay it are noted
in `ops`. On failure `rollback` plays the undo list backwards and puts back the id counters
and the schema, so a failed block leaves nothing behind, not even a spent id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import convert as C
from .. import values as V
from ..errors import FenecError, Overflow
from ..pacing import PACE_ROWS, hand_over
from ..plan.compile import Env
from ..plan.schema import Schema
from . import unique as U
from .access import pick
from .collection import Collection
from .prepare import Prepared, Rows, render

if TYPE_CHECKING:
    from .catalog import Catalog


class Block:
    __slots__ = ("undo", "ops", "ids", "schema_undo", "touched", "writes", "taken")

    def __init__(self) -> None:
        self.undo: list[tuple[Collection, int, Any]] = []  # (collection, id, the row before or None)
        self.ops: list = []
        self.ids: dict[Collection, int] = {}  # the id counter each touched collection had
        self.schema_undo: list[Callable[[], None]] = []
        self.touched: set[str] = set()
        self.writes = 0  # write statements that changed something (each counts one change)
        self.taken = 0  # rows the block's set and del statements took (a held claim's "took any")

    def touch(self, coll: Collection) -> None:
        if coll not in self.ids:
            self.ids[coll] = coll.next_id
        self.touched.add(coll.name)

    def rollback(self) -> None:
        """Put everything back. Safe to call twice: the second call finds nothing to undo."""
        for coll, rid, old in self.undo[::-1]:
            coll.undo_one(rid, old)
        for coll, nid in self.ids.items():
            coll.next_id = nid
        for fn in self.schema_undo[::-1]:
            fn()
        self.undo.clear()
        self.ops.clear()
        self.schema_undo.clear()
        self.ids.clear()
        self.writes = 0
        self.taken = 0


def unmet(verb: str, coll: str, got: int, want: int, read: bool = False) -> FenecError:
    if read:
        return FenecError("unmet", f"`get {coll}` answered {got} rows, and requires {want}")
    return FenecError("unmet", f"`{verb} {coll}` wrote {got} rows, and requires {want}")


def encode_row(schema: Schema | None, row: dict) -> dict:
    """A row as the log stores it: JSON-able, typed back by the schema when read."""
    out = {}
    for k, v in row.items():
        if k == "id" or v is None:
            continue
        t = type(v)
        if t is bytes:
            out[k] = v.hex()
        elif t is tuple:
            out[k] = list(v)
        elif t is list and v and type(v[0]) is bytes:
            out[k] = [x.hex() if x is not None else None for x in v]
        else:
            out[k] = v
    return out


def decode_row(schema: Schema, rid: int, data: dict) -> dict:
    """A row as the log holds it (`encode_row`, a snapshot's row) read back: its id first, its
    fields in the order written, each typed back; a name that is no field of the schema is left
    out. Most rows name only fields (and their id): they are copied whole, and only the typed
    fields' values converted (`Schema.typed`)."""
    row: dict[str, Any] = {"id": rid}
    if data.keys() <= schema.known:
        row.update(data)
        row["id"] = rid  # a snapshot's row may hold its id too: the record's place says which row it is
        for k, t in schema.typed.items():
            v = row.get(k)
            if v is not None:
                row[k] = _decoded(t, v)
        return row
    fields = schema.fields
    for k, v in data.items():
        f = fields.get(k)
        if f is not None:
            row[k] = _decoded(f.type, v)
    return row


def _decoded(t: Any, v: Any) -> Any:
    """A value of type `t` from its JSON form in the log."""
    if t == "timestamp":
        return V.Ts(v)
    if t == "bytes":
        return bytes.fromhex(v)
    if t == "geo":
        return (v[0], v[1])
    if isinstance(t, tuple):
        inner = t[1]
        if inner == "timestamp":
            return [V.Ts(x) if x is not None else None for x in v]
        if inner == "bytes":
            return [bytes.fromhex(x) if x is not None else None for x in v]
    return v


def set_path(obj: Any, keys: tuple[str, ...], value: Any, target: str) -> dict:
    """Set one key inside a json object, creating objects where the path finds null."""
    if obj is None:
        obj = {}
    if type(obj) is not dict:
        raise FenecError("type", f"`{target}` passes through a {V.kind_name(obj)}, not an object")
    out = dict(obj)
    k = keys[0]
    if len(keys) == 1:
        out[k] = value
    else:
        out[k] = set_path(obj.get(k), keys[1:], value, target)
    return {key: out[key] for key in sorted(out)}


def in_field(e: FenecError, name: str) -> FenecError:
    """A value's conversion refused (`expected int, found text`), saying which field it was for.
    Only the refusal's path pays for this: the loops that convert catch it outside their body."""
    if e.kind == "type" and e.message.startswith("expected "):
        return FenecError("type", f"field `{name}`: {e.message}", at=e.at)
    return e


def apply_entries(schema: Schema, base: dict, entries: list, vals: list) -> dict:
    row = dict(base)
    target = None
    try:
        for (target, _, ftype, _), v in zip(entries, vals, strict=False):
            if target.keys:
                jv = C.to_json_value(v)
                row[target.name] = set_path(row.get(target.name), target.keys, jv, target.text)
            else:
                row[target.name] = C.coerce(v, ftype)
    except FenecError as e:
        raise (in_field(e, target.text) if target is not None else e) from None
    return row


def check_required(schema: Schema, row: dict) -> None:
    for f in schema.fields.values():
        if f.required and row.get(f.name) is None:
            raise FenecError("type", f"field `{f.name}` is required and cannot be null")


# ---------------------------------------------------------------- the statements


def too_many_rows(cap: int) -> FenecError:
    return FenecError("toolarge", f"the answer is over {cap} rows, the most one statement may answer "
                                  "(--max-answer-rows): narrow it with `limit`, or raise the ceiling")


def too_many_writes(cap: int, n: int = 0) -> FenecError:
    count = f"{n} rows" if n else f"over {cap} rows"
    return FenecError("toolarge", f"the request writes {count}, the most one statement or batch may write is "
                                  f"{cap} (--max-write-rows): send it in parts, or raise the ceiling")


def _write_need(p: Prepared, env: Env, blk: Block) -> int | None:
    """`pick`'s `need_override` for a set or del (None: its own limit): one row past what its
    block may still write and, with `returning`, one past what one statement may answer. Picking
    stops there, so a statement past a ceiling costs the ceiling's work, not its own."""
    need = None
    if env.writes:
        need = max(env.writes - len(blk.ops), 0) + 1
    if env.rows and p.cols is not None and (need is None or env.rows < need):
        need = env.rows + 1
    limit = p.query.limit
    return None if need is None or limit is not None and limit < need else need


def _within(p: Prepared, env: Env, blk: Block, picked: int) -> None:
    if env.writes and len(blk.ops) + picked > env.writes:
        raise too_many_writes(env.writes)
    if env.rows and p.cols is not None and picked > env.rows:
        raise too_many_rows(env.rows)


def _reach(q: Any, cap: int) -> int | None:
    """`pick`'s `need_override` that stops it one row past `cap` (None: the statement's own limit)."""
    if cap and (q.limit is None or q.limit > cap):
        return cap + 1
    return None


def run_get(catalog: Catalog, p: Prepared, env: Env, pieces: int = 0) -> Any:
    """A get's answer; past `pieces` rows (0: never) the rows unrendered, as `Rows`."""
    coll = catalog.collection(p.coll)
    q = p.query
    if p.count:
        if coll.rows and q.filter is None:
            return [{"count": len(coll.rows)}]
        matched = pick(coll, q, env) if coll.rows else []
        return [{"count": len(matched)}]
    cap = env.rows
    rows = pick(coll, q, env, _reach(q, cap))
    if cap and len(rows) > cap:
        raise too_many_rows(cap)
    if p.require is not None and len(rows) != p.require:
        raise unmet("get", p.coll, len(rows), p.require, read=True)
    if pieces and len(rows) > pieces:
        return Rows(p.cols, rows, env)  # type: ignore[arg-type]  # as below
    return render(p.cols, rows, env)  # type: ignore[arg-type]  # not a count: prepare() set the columns


def run_set(catalog: Catalog, p: Prepared, env: Env, blk: Block) -> Any:
    if p.gate is not None:  # a claim on a queue with controls (engine/limits.py)
        return p.gate.run(catalog, p, env, blk)
    coll = catalog.collection(p.coll)
    need = _write_need(p, env, blk)
    picked = pick(coll, p.query, env, need)
    if need is not None:
        _within(p, env, blk, len(picked))
    if len(picked) > PACE_ROWS:  # only in a worker thread: the event loop's statements stop there
        return _set_many(coll, p, env, blk, picked)
    if picked:
        # Work every value out over the rows as they were, before writing any (§6.3); a value
        # that reads no row is worked out, and converted to its field's type, once.
        try:
            news = _rewrite_plain(p.plain, picked, env) if p.plain is not None else \
                _rewrite(coll.schema, p.patch, picked, env)
        except Overflow:
            if p.query.limit is None:
                raise  # a set of every match: an error on any row refuses it whole
            picked, news = _pass_over(coll, p, env)
    if picked:
        blk.touch(coll)
        _write(coll, p, env, blk.undo, picked, news, bool(coll.unique) and not U.unchanged(coll, picked, news))
        name = coll.name
        blk.ops += [("p", name, new["id"], new) for new in news]
        blk.writes += 1
        blk.taken += len(picked)
    if p.require is not None and len(picked) != p.require:
        raise unmet("set", p.coll, len(picked), p.require)
    if p.cols is not None:
        return render(p.cols, news if picked else [], env)
    return {"affected": len(picked)}


def _write(coll: Collection, p: Prepared, env: Env, undo: list, olds: list[dict], news: list[dict],
           unique: bool) -> None:
    """A set's picked rows replaced by their new forms: with `unique`, one at a time, each checked
    against the rows before it already written (§4.4); else all at once."""
    schema = coll.schema
    if unique:
        alive = p.alive
        for old, new in zip(olds, news, strict=False):
            if coll.required:
                check_required(schema, new)
            coll.unique_check(new, (lambda r: alive(r, env)) if alive else (lambda r: True), undo)
            coll.replace(old, new, undo)
        return
    if coll.required:
        for new in news:
            check_required(schema, new)
    coll.replace_all(olds, news, undo)


def _set_many(coll: Collection, p: Prepared, env: Env, blk: Block, picked: list[dict]) -> Any:
    """`run_set` of more than PACE_ROWS picked rows: its steps in the same order, each worked
    PACE_ROWS rows at a time with the GIL handed over between two (pacing.py). Every value is
    still worked out over the rows as they were before any is written; a value that reads no row
    is worked out again for each chunk, to the same value (the statement's time is fixed)."""
    news: list[dict] = []
    try:
        for at in range(0, len(picked), PACE_ROWS):
            if at:
                hand_over()
            part = picked[at:at + PACE_ROWS]
            news += _rewrite_plain(p.plain, part, env) if p.plain is not None else \
                _rewrite(coll.schema, p.patch, part, env)
    except Overflow:
        if p.query.limit is None:
            raise
        picked, news = _pass_over(coll, p, env)
    if picked:
        blk.touch(coll)
        name = coll.name
        for at in range(0, len(picked), PACE_ROWS):
            hand_over()
            part = news[at:at + PACE_ROWS]
            _write(coll, p, env, blk.undo, picked[at:at + PACE_ROWS], part, bool(coll.unique))
            blk.ops += [("p", name, new["id"], new) for new in part]
        blk.writes += 1
        blk.taken += len(picked)
    if p.require is not None and len(picked) != p.require:
        raise unmet("set", p.coll, len(picked), p.require)
    if p.cols is None:
        return {"affected": len(picked)}
    out: list[dict] = []
    for at in range(0, len(news), PACE_ROWS):
        hand_over()
        out += render(p.cols, news[at:at + PACE_ROWS], env)
    return out


def _pass_over(coll: Collection, p: Prepared, env: Env) -> tuple[list[dict], list[dict]]:
    """A picking set (one with `limit`: a claim) met a row whose new values do not fit 64 bits
    (`attempts + 1` on a job a producer put at the maximum): that row is passed over, left as
    it was and not answered, and the pick goes on in order to the next, as it does past a row
    a token could not read (access.md §4.4). So one row never stops every claim of its queue.
    An overflow that reads no row (`{n: 9223372036854775807 + 1}`) is the statement's own:
    raised. The rows are read again in pages that double; a rare path, off the claim's."""
    def rewrite(rows: list[dict]) -> list[dict]:
        return _rewrite_plain(p.plain, rows, env) if p.plain is not None else _rewrite(coll.schema, p.patch, rows, env)

    rewrite([])  # the values that read no row: their overflow is the statement's
    limit = p.query.limit
    assert limit is not None
    need = limit
    while True:
        cands = pick(coll, p.query, env, need_override=need)
        olds: list[dict] = []
        news: list[dict] = []
        for old in cands:
            try:
                (new,) = rewrite([old])
            except Overflow:
                continue
            olds.append(old)
            news.append(new)
            if len(olds) == limit:
                return olds, news
        if len(cands) < need:
            return olds, news
        need *= 2


def _rewrite_plain(plain: tuple[list, list], picked: list[dict], env: Env) -> list[dict]:
    try:
        fixed = {name: convert(fn(None, env)) for name, fn, convert in plain[0]}
    except FenecError as e:
        raise in_field(e, _failing(plain[0], env)) from None
    per_row = plain[1]
    news = [old | fixed for old in picked]
    name = ""
    try:
        if len(per_row) == 1:  # a claim's `attempts: attempts + 1`
            name, fn, convert = per_row[0]
            if convert is C.same:
                for old, new in zip(picked, news, strict=True):
                    new[name] = fn(old, env)
            else:
                for old, new in zip(picked, news, strict=True):
                    new[name] = convert(fn(old, env))
            return news
        for old, new in zip(picked, news, strict=True):
            for name, fn, convert in per_row:
                new[name] = convert(fn(old, env))
    except FenecError as e:
        raise in_field(e, name) from None
    return news


def _failing(entries: list, env: Env) -> str:
    """Which of a patch's row-free values refuses its conversion (worked out again, on the refusal's
    path only: they read no row and have no effect)."""
    for name, fn, convert in entries:
        try:
            convert(fn(None, env))
        except FenecError:
            return str(name)
    return ""


def _rewrite(schema: Schema, patch: list, picked: list[dict], env: Env) -> list[dict]:
    fixed = [None if per_row else fn(None, env) for _, fn, _, per_row in patch]
    fns = [(fn if per_row else None) for _, fn, _, per_row in patch]
    news = []
    for old in picked:
        vals = [f(old, env) if f is not None else c for f, c in zip(fns, fixed, strict=False)]
        news.append(apply_entries(schema, old, patch, vals))
    return news


def run_del(catalog: Catalog, p: Prepared, env: Env, blk: Block) -> Any:
    coll = catalog.collection(p.coll)
    need = _write_need(p, env, blk)
    picked = pick(coll, p.query, env, need)
    if need is not None:
        _within(p, env, blk, len(picked))
    if picked:
        blk.touch(coll)
        name = coll.name
        for old in picked:
            coll.delete(old, blk.undo)
            blk.ops.append(("d", name, old["id"]))
        blk.writes += 1
        blk.taken += len(picked)
    return answer_of("del", p, picked, env)


def answer_of(verb: str, p: Prepared, rows: list[dict], env: Env) -> Any:
    """A set's or a del's answer once its rows are written: its `require` judged, then the rows
    it `returning`s (as written), or how many it touched. (The claim's own set keeps these lines
    inline: the claim is the statement run most, and runs them without the call.)"""
    if p.require is not None and len(rows) != p.require:
        raise unmet(verb, p.coll, len(rows), p.require)
    if p.cols is not None:
        return render(p.cols, rows, env)
    return {"affected": len(rows)}
