"""The schema statements: `create collection`, `drop collection`, `create index`, each run in a
block whose undo puts the schema back (fenecql.md §13). Only the server token runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import values as V
from ..errors import FenecError
from ..plan.schema import FieldInfo, Schema, check_annotation, no_collection
from ..ql import ast as A
from . import unique as U
from .collection import Collection
from .execute import Block

if TYPE_CHECKING:
    from .catalog import Catalog


def run_create(catalog: Catalog, stmt: A.CreateCollection, blk: Block) -> Any:
    name = stmt.name
    if name in catalog.collections:
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
    if any(f.index == U.KIND for f in fields.values()):
        U.ready_field(schema)
    coll = Collection(schema)
    catalog.add_collection(coll)
    blk.schema_undo.append(lambda: catalog.remove_collection(name))
    blk.ops.append(("c", name, schema.to_json()))
    blk.touched.add(name)
    blk.writes += 1
    return {"message": f"collection `{name}` created"}


def run_drop(catalog: Catalog, stmt: A.DropCollection, blk: Block) -> Any:
    name = stmt.name
    coll = catalog.collections.get(name)
    if coll is None:
        if stmt.if_exists:
            return {"message": f"collection `{name}` does not exist"}
        raise no_collection(name, catalog.collections)  # schema statements are the server token's alone
    catalog.remove_collection(name)
    blk.schema_undo.append(lambda: catalog.add_collection(coll))
    blk.schema_undo.append(catalog.controls.forget(catalog, name))  # its queue controls go with it
    blk.ops.append(("x", name))
    blk.touched.add(name)
    blk.writes += 1
    return {"message": f"collection `{name}` dropped"}


def run_create_index(catalog: Catalog, stmt: A.CreateIndex, blk: Block) -> Any:
    coll = catalog.collections.get(stmt.collection)
    if coll is None:
        raise no_collection(stmt.collection, catalog.collections)
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
    if stmt.index == U.KIND:
        U.ready_field(schema)
        U.check_existing(coll, text, lambda row: V.read_target(row, text))
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
        catalog.schema_changed()
    blk.schema_undo.append(undo)
    catalog.schema_changed()
    blk.ops.append(("i", coll.name, text, stmt.index, stmt.ttl_ms))
    blk.touched.add(coll.name)
    blk.writes += 1
    return {"message": f"index on `{coll.name}.{text}` created"}
