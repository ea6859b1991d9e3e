"""A collection: its rows (id -> row dict), its id counter and its indexes.

Rows are never changed in place: a write puts a new dict in the row's place, so a row handed
out (an answer, a snapshot, the undo log) stays as it was. Every change goes through
`insert`, `replace` and `delete`, which keep the indexes and record what undoes them in the
block's undo list; a block that fails plays that list backwards (fenecql.md §13).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import FenecError
from ..plan.schema import Schema
from ..values import read_path
from . import unique as U
from .geo_index import GeoIndex
from .hash_index import HashIndex
from .sorted_index import PackedIndex, SortedIndex


def _reader(target: str) -> Callable[[dict], Any]:
    if target == "id":
        return lambda row: row["id"]
    if "." not in target:
        return lambda row: row.get(target)
    name, *keys = target.split(".")
    return lambda row: read_path(row.get(name), keys)


class Collection:
    __slots__ = ("schema", "name", "rows", "next_id", "indexes", "in_order", "dead_bytes", "required", "unique")

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.name = schema.name  # a collection is never renamed
        self.rows: dict[int, dict] = {}
        self.next_id = 1
        # target -> (kind, index, reader)
        self.indexes: dict[str, tuple[str, Any, Callable[[dict], Any]]] = {}
        self.in_order = True  # rows dict iterates in ascending id
        self.required = [f.name for f in schema.fields.values() if f.required]  # fixed at creation
        self.unique = False  # any @unique index (kept by _make_index and drop_index)
        for f in schema.fields.values():
            if f.index:
                self._make_index(f.name, f.index)
        for target, kind in schema.indexes.items():
            self._make_index(target, kind)

    def _make_index(self, target: str, kind: str) -> Any:
        keyed = "." in target
        f = None if keyed else self.schema.fields.get(target)
        ftype = f.type if f is not None else None
        if kind in ("sorted", "ttl") and ftype in ("int", "timestamp"):
            idx: Any = PackedIndex(ftype == "timestamp", target)
        elif kind in ("sorted", "ttl"):
            idx = SortedIndex(keyed)
        elif kind in ("hash", "unique", U.KIND):
            idx = HashIndex(kind == "unique", keyed)
        elif kind == "geo":
            idx = GeoIndex()
        else:
            raise FenecError("query", f"unknown index @{kind}")
        self.indexes[target] = (kind, idx, _reader(target))
        self.unique = any(k == "unique" or k == U.KIND for k, _, _ in self.indexes.values())
        return idx

    def build_index(self, target: str, kind: str) -> None:
        idx = self._make_index(target, kind)
        read = self.indexes[target][2]
        for rid, row in self.rows.items():
            idx.add(rid, read(row))

    def drop_index(self, target: str) -> None:
        self.indexes.pop(target, None)
        self.unique = any(k == "unique" or k == U.KIND for k, _, _ in self.indexes.values())

    def index(self, target: str) -> Any:
        entry = self.indexes.get(target)
        return entry[1] if entry else None

    # ---------------------------------------------------------------- reading

    def ids_in_order(self) -> dict[int, dict]:
        if not self.in_order:
            self.rows = dict(sorted(self.rows.items()))
            self.in_order = True
        return self.rows

    # ---------------------------------------------------------------- writing

    def insert(self, row: dict, undo: list | None) -> None:
        rid = row["id"]
        rows = self.rows
        if rows and self.in_order and rid < next(reversed(rows)):
            self.in_order = False
        rows[rid] = row
        for _, idx, read in self.indexes.values():
            idx.add(rid, read(row))
        if rid >= self.next_id:
            self.next_id = rid + 1
        if undo is not None:
            undo.append((self, rid, None))

    def replace(self, old: dict, new: dict, undo: list | None) -> None:
        rid = old["id"]
        self.rows[rid] = new
        for _, idx, read in self.indexes.values():
            a, b = read(old), read(new)
            if a is not b and a != b or type(a) is not type(b):
                idx.remove(rid, a)
                idx.add(rid, b)
        if undo is not None:
            undo.append((self, rid, old))

    def replace_all(self, olds: list[dict], news: list[dict], undo: list) -> None:
        """`replace` for each pair, with each packed index moved once for all of them: a claim's
        ten entries go out and back in as two slices (engine/sorted_ints.py). Only for writes
        that check no @unique value, which must see each row's predecessors already written."""
        undo.extend([(self, old["id"], old) for old in olds])
        rows = self.rows
        for new in news:
            rows[new["id"]] = new
        for _, idx, read in self.indexes.values():
            if type(idx) is PackedIndex:
                idx.move_rows(olds, news)
                continue
            for old, new in zip(olds, news, strict=True):
                a, b = read(old), read(new)
                if a is not b and a != b or type(a) is not type(b):
                    rid = old["id"]
                    idx.remove(rid, a)
                    idx.add(rid, b)

    def apply_net(self, rids: list[int], olds: list[dict | None], news: list[dict | None]) -> None:
        """Row `rids[i]` from `olds[i]` to `news[i]` (None: no such row), in that order, with no
        undo: the net effect of several records at once on a replica (engine/records.py,
        `replay_all`). A row put and deleted among them (None both) only moves the id counter
        past it. Rows new here go in in the order given, as inserts in that order would; the
        packed indexes take their old keys out and their new ones in as two sorted lists
        (`PackedIndex.move_net`), the others a row at a time, as `replace` moves them."""
        rows = self.rows
        for rid, old, new in zip(rids, olds, news, strict=True):
            if new is None:
                if old is not None:
                    del rows[rid]
            else:
                if old is None and rows and self.in_order and rid < next(reversed(rows)):
                    self.in_order = False
                rows[rid] = new
            if old is None and rid >= self.next_id:
                self.next_id = rid + 1
        for _, idx, read in self.indexes.values():
            if type(idx) is PackedIndex:
                idx.move_net(rids, olds, news)
                continue
            for rid, old, new in zip(rids, olds, news, strict=True):
                if old is None:
                    if new is not None:
                        idx.add(rid, read(new))
                elif new is None:
                    idx.remove(rid, read(old))
                else:
                    a, b = read(old), read(new)
                    if a is not b and a != b or type(a) is not type(b):
                        idx.remove(rid, a)
                        idx.add(rid, b)

    def delete(self, old: dict, undo: list | None) -> None:
        rid = old["id"]
        del self.rows[rid]
        for _, idx, read in self.indexes.values():
            idx.remove(rid, read(old))
        if undo is not None:
            undo.append((self, rid, old))

    def undo_one(self, rid: int, old: dict | None) -> None:
        """Put back one change: old None means the row was inserted."""
        cur = self.rows.get(rid)
        if cur is not None:
            del self.rows[rid]
            for _, idx, read in self.indexes.values():
                idx.remove(rid, read(cur))
        if old is not None:
            if self.rows and rid < next(reversed(self.rows)):
                self.in_order = False  # it goes back at the end of the dict, out of id order
            self.rows[rid] = old
            for _, idx, read in self.indexes.values():
                idx.add(rid, read(old))

    def unique_check(self, row: dict, alive: Callable[[dict], bool], undo: list | None) -> None:
        """Refuse (409) a row whose @unique value another live row holds; a holder past its
        @ttl gives the value up and is deleted in the same statement (fenecql.md §4.4)."""
        rid = row["id"]
        for target, (kind, idx, read) in self.indexes.items():
            if kind != "unique":
                if kind == U.KIND:
                    U.check(self, target, idx, read, row)
                continue
            v = read(row)
            if v is None:
                continue
            for other in idx.lookup(v):
                if other == rid:
                    continue
                holder = self.rows[other]
                if alive(holder):
                    raise FenecError("exists", f"`{self.name}.{target}` is @unique, and {_show(v)} is held by "
                                               f"document {other}")
                self.delete(holder, undo)


def _show(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v[:64] + '"'
    return repr(v)[:64]
