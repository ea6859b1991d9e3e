"""A `put`: its documents evaluated and converted to their fields' types, checked whole (required
fields, unique values, a bound on the writes) before the first is inserted into the block.

`PutRules` is what a put is allowed: the server token's allows all, a token's (scoped.py) judges
each document by its rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import convert as C
from .. import values as V
from ..errors import FenecError
from ..pacing import PACE_ROWS, hand_over
from ..plan.compile import Env
from ..plan.schema import Schema
from ..ql import ast as A
from . import unique as U
from .collection import Collection
from .execute import Block, apply_entries, check_required, in_field, set_path, too_many_writes, unmet
from .prepare import Doc, Prepared

if TYPE_CHECKING:
    from .catalog import Catalog


def _documents(p: Prepared, env: Env) -> list[dict]:
    """Each document as {target: value}, evaluated without a row."""
    schema = p.schema
    assert schema is not None
    if p.docs is not None:
        return [_doc_values(doc, env) for doc in p.docs]
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
            row[name] = set_path(row.get(name), tuple(keys), C.to_json_value(v), k)
        else:
            try:
                row[k] = C.coerce(v, schema.field(k).type)
            except FenecError as e:
                raise in_field(e, k) from None
    return row


def _bulk_documents(schema: Schema, src: list[dict]) -> list[dict]:
    """`_document` of each, through each field's converter (`C.coercer`) looked up by name; a
    document naming anything else (its `id`, a path, a field the schema lacks) goes the
    general way, the slower one for a statement of many documents; tests/unit/test_bulk_documents.py
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
                raise in_field(e, k) from None
        out.append(row)
    return out


def _doc_values(doc: Doc, env: Env) -> dict:
    """A document's row (prepare.Doc): its fixed values, fresh copies of their objects and
    lists, and then each value worked out now, in the order written."""
    row = doc.fixed.copy()
    for name, flat in doc.copied:
        v = row[name]
        row[name] = v.copy() if flat else _fresh(v)
    for target, fn, convert in doc.worked:
        v = fn(None, env)
        if target.name == "id" and not target.keys:
            row["id"] = v
        elif target.keys:
            row[target.name] = set_path(row.get(target.name), target.keys, C.to_json_value(v), target.text)
        else:
            try:
                row[target.name] = convert(v)
            except FenecError as e:
                raise in_field(e, target.name) from None
    return row


def _fresh(v: Any) -> Any:
    """A copy of a stored object or list, down to its last object or list (json nests at most
    JSON_DEPTH levels): what a row holds is its own."""
    t = type(v)
    if t is dict:
        return {k: _fresh(x) if type(x) is dict or type(x) is list else x for k, x in v.items()}
    if t is list:
        return [_fresh(x) if type(x) is dict or type(x) is list else x for x in v]
    return v


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


def run_put(catalog: Catalog, p: Prepared, env: Env, blk: Block, rules: PutRules = SERVER_TOKEN) -> Any:
    """put, insert and upsert (`if absent`, `else`): each document is a new row, or with an
    explicit `id` the row of that id; `if absent` passes over (or, with `else`, updates) the live
    row holding the document's id or one of its @unique values."""
    coll = catalog.collection(p.coll)
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
    uniques = [t for t, (k, _, _) in coll.indexes.items() if k == "unique" or k == U.KIND]
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
        kind, idx, _ = coll.indexes[t]
        if kind == U.KIND:
            pending = U.holder(coll, idx, v)
            if pending is not None and alive(pending):
                return pending
            continue
        for other in idx.lookup(v):
            if alive(coll.rows[other]):
                return coll.rows[other]
    return None
