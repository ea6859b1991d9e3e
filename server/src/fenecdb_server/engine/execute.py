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
from ..plan.schema import FieldInfo, Schema, check_annotation, no_collection
from ..ql import ast as A
from .access import pick
from .collection import Collection
from .prepare import Prepared, Rows, render

if TYPE_CHECKING:
    from .engine import Engine


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
    row: dict[str, Any] = {"id": rid}
    for k, v in data.items():
        f = schema.fields.get(k)
        if f is None:
            continue
        t = f.type
        if t == "timestamp":
            row[k] = V.Ts(v)
        elif t == "bytes":
            row[k] = bytes.fromhex(v)
        elif t == "geo":
            row[k] = (v[0], v[1])
        elif isinstance(t, tuple):
            inner = t[1]
            if inner == "timestamp":
                row[k] = [V.Ts(x) if x is not None else None for x in v]
            elif inner == "bytes":
                row[k] = [bytes.fromhex(x) if x is not None else None for x in v]
            else:
                row[k] = v
        else:
            row[k] = v
    return row


def _set_path(obj: Any, keys: tuple[str, ...], value: Any, target: str) -> dict:
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
        out[k] = _set_path(obj.get(k), keys[1:], value, target)
    return {key: out[key] for key in sorted(out)}


def _in_field(e: FenecError, name: str) -> FenecError:
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
                row[target.name] = _set_path(row.get(target.name), target.keys, jv, target.text)
            else:
                row[target.name] = C.coerce(v, ftype)
    except FenecError as e:
        raise (_in_field(e, target.text) if target is not None else e) from None
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


def run_get(eng: Engine, p: Prepared, env: Env, pieces: int = 0) -> Any:
    """A get's answer; past `pieces` rows (0: never) the rows unrendered, as `Rows`."""
    coll = eng.collection(p.coll)
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


def run_set(eng: Engine, p: Prepared, env: Env, blk: Block) -> Any:
    coll = eng.collection(p.coll)
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
        schema = coll.schema
        blk.touch(coll)
        undo = blk.undo
        if coll.unique:
            # Each row is checked against the rows before it already written (§4.4).
            alive = p.alive
            for old, new in zip(picked, news, strict=False):
                if coll.required:
                    check_required(schema, new)
                coll.unique_check(new, (lambda r: alive(r, env)) if alive else (lambda r: True), undo)
                coll.replace(old, new, undo)
        else:
            if coll.required:
                for new in news:
                    check_required(schema, new)
            coll.replace_all(picked, news, undo)
        name = coll.name
        blk.ops += [("p", name, new["id"], new) for new in news]
        blk.writes += 1
        blk.taken += len(picked)
    if p.require is not None and len(picked) != p.require:
        raise unmet("set", p.coll, len(picked), p.require)
    if p.cols is not None:
        return render(p.cols, news if picked else [], env)
    return {"affected": len(picked)}


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
        schema = coll.schema
        blk.touch(coll)
        undo = blk.undo
        alive = p.alive
        name = coll.name
        for at in range(0, len(picked), PACE_ROWS):
            hand_over()
            olds, part = picked[at:at + PACE_ROWS], news[at:at + PACE_ROWS]
            if coll.unique:
                for old, new in zip(olds, part, strict=False):
                    if coll.required:
                        check_required(schema, new)
                    coll.unique_check(new, (lambda r: alive(r, env)) if alive else (lambda r: True), undo)
                    coll.replace(old, new, undo)
            else:
                if coll.required:
                    for new in part:
                        check_required(schema, new)
                coll.replace_all(olds, part, undo)
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
        raise _in_field(e, _failing(plain[0], env)) from None
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
        raise _in_field(e, name) from None
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


def run_del(eng: Engine, p: Prepared, env: Env, blk: Block) -> Any:
    coll = eng.collection(p.coll)
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
    inline: bench/claim_bytecodes.py counts the call.)"""
    if p.require is not None and len(rows) != p.require:
        raise unmet(verb, p.coll, len(rows), p.require)
    if p.cols is not None:
        return render(p.cols, rows, env)
    return {"affected": len(rows)}


def _documents(p: Prepared, env: Env) -> list[dict]:
    """Each document as {target: value}, evaluated without a row."""
    schema = p.schema
    assert schema is not None
    if p.docs is not None:
        return [_doc_values(schema, entries, env) for entries in p.docs]
    stmt = p.stmt
    assert isinstance(stmt, A.Put) and stmt.param is not None
    src = env.params[stmt.param - 1]
    if type(src) is dict:
        src = [src]
    if type(src) is not list or not all(type(d) is dict for d in src):
        raise FenecError("type", f"`{stmt.verb} {p.coll} ${stmt.param}` takes an object or a list of objects")
    if len(src) > PACE_ROWS:
        out: list[dict] = []
        for at in range(0, len(src), PACE_ROWS):
            hand_over()
            out += _bulk_documents(schema, src[at:at + PACE_ROWS])
        return out
    if len(src) >= BULK_DOCS:
        return _bulk_documents(schema, src)
    return [_document(schema, d) for d in src]


# From this many documents a put converts them through a table of its fields' converters
# (`_bulk_documents`), built once for the statement: a bulk load's largest cost in the engine.
BULK_DOCS = 16


def _document(schema: Schema, d: dict) -> dict:
    """One document's fields converted to their types (an `id` as given, a dotted path into
    its json field)."""
    row: dict[str, Any] = {}
    for k, v in d.items():
        if k == "id":
            row["id"] = v
            continue
        if "." in k:
            name, *keys = k.split(".")
            f = schema.field(name)
            if f.type != "json":
                raise FenecError("query", f"`{k}` writes into `{name}`, which is not json")
            row[name] = _set_path(row.get(name), tuple(keys), C.to_json_value(v), k)
        else:
            try:
                row[k] = C.coerce(v, schema.field(k).type)
            except FenecError as e:
                raise _in_field(e, k) from None
    return row


def _bulk_documents(schema: Schema, src: list[dict]) -> list[dict]:
    """`_document` of each, through each field's converter (`C.coercer`) looked up by name; a
    document naming anything else (its `id`, a path, a field the schema lacks) goes the
    general way. Measured in process, 10 000 jobs a statement: tests/unit/test_bulk_documents.py
    holds the two ways to the same rows and the same refusals."""
    get = {name: C.coercer(f.type) for name, f in schema.fields.items()}.get
    out = []
    for d in src:
        row: dict[str, Any] = {}
        for k, v in d.items():
            convert = get(k)
            if convert is None:
                row = _document(schema, d)
                break
            try:
                row[k] = convert(v)
            except FenecError as e:
                raise _in_field(e, k) from None
        out.append(row)
    return out


def _doc_values(schema: Schema, entries: list, env: Env) -> dict:
    row: dict[str, Any] = {}
    for target, fn, convert in entries:  # prepare._doc's
        v = fn(None, env)
        if target.name == "id" and not target.keys:
            row["id"] = v
        elif target.keys:
            row[target.name] = _set_path(row.get(target.name), target.keys, C.to_json_value(v), target.text)
        else:
            try:
                row[target.name] = convert(v)
            except FenecError as e:
                raise _in_field(e, target.name) from None
    return row


def _doc_id(v: Any) -> int:
    if type(v) is float and v == int(v):
        v = int(v)
    if type(v) is not int or v < 1 or v > V.INT_MAX:
        raise FenecError("type", f"an `id` is a positive integer, found {V.kind_name(v)}")
    return v


class PutRules:
    """What a put's documents are judged by beyond the schema: nothing, as the server token. A
    token's rules (scoped.py `TokenPut`) refuse documents naming `id`, admit each new row under an
    insert rule (filling in what it pins), judge an upsert's rewrite as an update, and tell of a
    @unique clash the field only."""

    def check(self, docs: list[dict]) -> None:
        """Refuse the documents before any is written."""

    def admit(self, coll: Collection, doc: dict, rid: int, env: Env) -> dict:
        """The new row `doc` becomes, with id `rid`."""
        row = {"id": rid}
        for f in coll.schema.fields:
            if f in doc:
                row[f] = doc[f]
        return row

    def judge_update(self, coll: Collection, old: dict, new: dict, env: Env) -> None:
        """Refuse an upsert's rewrite of `old` into `new`."""

    def unique_check(self, coll: Collection, row: dict, alive: Callable[[dict], bool], undo: list) -> None:
        coll.unique_check(row, alive, undo)


SERVER_TOKEN = PutRules()


def run_put(eng: Engine, p: Prepared, env: Env, blk: Block, rules: PutRules = SERVER_TOKEN) -> Any:
    """put, insert and upsert (`if absent`, `else`): each document is a new row, or with an
    explicit `id` the row of that id; `if absent` passes over (or, with `else`, updates) the live
    row holding the document's id or one of its @unique values."""
    coll = eng.collection(p.coll)
    stmt = p.stmt
    assert isinstance(stmt, A.Put)
    schema = coll.schema
    docs = _documents(p, env)
    if env.writes and len(blk.ops) + len(docs) > env.writes:
        raise too_many_writes(env.writes, len(blk.ops) + len(docs))
    rules.check(docs)
    blk.touch(coll)
    alive_fn = p.alive
    alive = (lambda r: alive_fn(r, env)) if alive_fn else (lambda r: True)
    uniques = [t for t, (k, _, _) in coll.indexes.items() if k == "unique"]
    written = 0
    name = coll.name
    for at in range(0, len(docs), PACE_ROWS):
        if at:
            hand_over()
        for doc in docs[at:at + PACE_ROWS]:
            explicit = "id" in doc
            if explicit:
                rid = _doc_id(doc["id"])
                doc["id"] = rid
            holder = _holder(coll, doc, uniques, alive) if stmt.if_absent else None
            if holder is not None:
                if stmt.else_patch is None:
                    continue
                # upsert: the holder is updated with the patch, `new.` reading the incoming doc
                upd_env = Env(env.params, env.now, env.claims, doc)
                patch = p.else_patch
                try:
                    new = apply_entries(schema, holder, patch, [fn(holder, upd_env) for _, fn, _, _ in patch])
                except FenecError as e:
                    e.row = holder  # the row that holds the value: maybe one a token may not read
                    raise
                rules.judge_update(coll, holder, new, env)
                check_required(schema, new)
                if uniques:
                    rules.unique_check(coll, new, alive, blk.undo)
                coll.replace(holder, new, blk.undo)
                blk.ops.append(("p", name, new["id"], new))
                written += 1
                continue
            cur = coll.rows.get(doc["id"]) if explicit else None
            if cur is not None and stmt.verb == "insert" and alive(cur):
                raise FenecError("exists", f"`{name}` already holds a document with id {doc['id']}")
            row = rules.admit(coll, doc, doc["id"] if explicit else coll.next_id, env)
            check_required(schema, row)
            if uniques:  # no @unique field: nothing another row could hold
                rules.unique_check(coll, row, alive, blk.undo)
            if cur is not None:
                coll.replace(cur, row, blk.undo)
            else:
                coll.insert(row, blk.undo)
            blk.ops.append(("p", name, row["id"], row))
            written += 1
    if written:
        blk.writes += 1
    if stmt.require is not None and written != stmt.require:
        raise unmet(stmt.verb, p.coll, written, stmt.require)
    return {"affected": written}


def _holder(coll: Collection, doc: dict, uniques: list[str], alive: Callable[[dict], bool]) -> dict | None:
    """The live row an `if absent` document meets: the one of its explicit id, or one holding
    one of its @unique values."""
    if "id" in doc:
        cur = coll.rows.get(doc["id"])
        if cur is not None and alive(cur):
            return cur
    for t in uniques:
        v = V.read_target(doc, t)
        if v is None:
            continue
        for other in coll.index(t).lookup(v):
            if alive(coll.rows[other]):
                return coll.rows[other]
    return None


# ---------------------------------------------------------------- schema statements


def run_create(eng: Engine, stmt: A.CreateCollection, blk: Block) -> Any:
    name = stmt.name
    if name in eng.collections:
        if stmt.if_not_exists:
            return {"message": f"collection `{name}` exists"}
        raise FenecError("exists", f"collection `{name}` exists")
    if len(name) > A.MAX_NAME:
        raise FenecError("query", f"a name is at most {A.MAX_NAME} characters")
    fields: dict[str, FieldInfo] = {}
    ttl = 0
    for fd in stmt.fields:
        if fd.name in fields:
            raise FenecError("exists", f"field `{fd.name}` is declared twice")
        if fd.index:
            check_annotation(name, fd.name, fd.type, fd.index, False)
        if fd.index == "ttl":
            ttl += 1
            if ttl > 1:
                raise FenecError("query", "a collection takes at most one @ttl field")
        fields[fd.name] = FieldInfo(fd.name, fd.type, fd.required, fd.index, fd.ttl_ms)
    schema = Schema(name, fields)
    coll = Collection(schema)
    eng.add_collection(coll)
    blk.schema_undo.append(lambda: eng.remove_collection(name))
    blk.ops.append(("c", name, schema.to_json()))
    blk.touched.add(name)
    blk.writes += 1
    return {"message": f"collection `{name}` created"}


def run_drop(eng: Engine, stmt: A.DropCollection, blk: Block) -> Any:
    name = stmt.name
    coll = eng.collections.get(name)
    if coll is None:
        if stmt.if_exists:
            return {"message": f"collection `{name}` does not exist"}
        raise no_collection(name, eng.collections)  # schema statements are the server token's alone
    eng.remove_collection(name)
    blk.schema_undo.append(lambda: eng.add_collection(coll))
    blk.ops.append(("x", name))
    blk.touched.add(name)
    blk.writes += 1
    return {"message": f"collection `{name}` dropped"}


def run_create_index(eng: Engine, stmt: A.CreateIndex, blk: Block) -> Any:
    coll = eng.collections.get(stmt.collection)
    if coll is None:
        raise no_collection(stmt.collection, eng.collections)
    schema = coll.schema
    target = stmt.target
    f = schema.field(target.name)
    text = target.text
    if target.keys:
        if f.type != "json":
            raise FenecError("query", f"`{text}` reads into `{target.name}`, which is not json")
        check_annotation(coll.name, text, None, stmt.index, True)
        existing = schema.indexes.get(text)
    else:
        check_annotation(coll.name, text, f.type, stmt.index, False)
        existing = f.index
        if stmt.index == "ttl" and schema.ttl_field is not None:
            raise FenecError("query", "a collection takes at most one @ttl field")
    if existing:
        if stmt.if_not_exists:
            return {"message": f"index on `{coll.name}.{text}` exists"}
        raise FenecError("exists", f"`{coll.name}.{text}` already has an index")
    if stmt.index == "unique":
        seen: dict[Any, int] = {}
        for rid, row in coll.ids_in_order().items():
            v = V.read_target(row, text)
            if v is None:
                continue
            hk = V.hashable(v)
            if hk in seen:
                raise FenecError("exists", f"`{coll.name}.{text}` cannot be @unique: {v!r} is held by documents "
                                           f"{seen[hk]} and {rid}")
            seen[hk] = rid
    old_fields = dict(schema.fields)
    old_indexes = dict(schema.indexes)
    if target.keys:
        schema.indexes[text] = stmt.index
    else:
        schema.fields[target.name] = FieldInfo(f.name, f.type, f.required, stmt.index, stmt.ttl_ms)
    coll.build_index(text, stmt.index)

    def undo() -> None:
        schema.fields.clear()
        schema.fields.update(old_fields)
        schema.indexes.clear()
        schema.indexes.update(old_indexes)
        coll.drop_index(text)
        eng.schema_changed()
    blk.schema_undo.append(undo)
    eng.schema_changed()
    blk.ops.append(("i", coll.name, text, stmt.index, stmt.ttl_ms))
    blk.touched.add(coll.name)
    blk.writes += 1
    return {"message": f"index on `{coll.name}.{text}` created"}
