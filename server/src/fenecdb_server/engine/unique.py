"""Unique jobs: `@unique(pending)`, a key that one pending job at a time may hold.

A plain `@unique` value is held by every live document, a job done or dead included, so a
queue that keeps its finished jobs could never take the same key again. `@unique(pending)` is
held only while the job is pending: ready, delayed or leased, which in a queue's shape
(engine/queues.py) is "its ready field is not null". A done or dead job (ready field null)
holds no key, and is left where it is: it is neither refused nor deleted.

The modes users ask for are the put's own `if absent` (fenecql.md §6):

    put jobs {key: "k", ...} if absent                              skip the duplicate: answers
                                                                    {"affected": 0}, no error
    put jobs {key: "k", ...} if absent else set {payload: new.payload}   replace its payload
    put jobs {key: "k", ...} if absent else set {run_at: new.run_at}     debounce: push it out

Exact under any number of producers: the check (`holder`, `check`) and the write run in the
same statement under the engine's one writer, so no second pending job of a key can be written
between them. The index itself is an ordinary hash index over every job's key (a key may be held
by many jobs, at most one of them pending): the rule is applied where a row is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import FenecError
from ..plan.schema import Schema

KIND = "unique_pending"
SHOWN = "@unique(pending)"


def ready_field(schema: Schema) -> str:
    """The field whose being set makes a job pending; 400 for a collection that is no queue."""
    from .queues import shape_of  # queues.py imports collection.py, which imports this module

    shape = shape_of(schema)
    if shape is None:
        raise FenecError("query", f"{SHOWN} is for a job queue's key: `{schema.name}` needs the fields of a "
                                  "queue (owner text, attempts int and a ready time: docs/queues.md)")
    return shape.ready


def check(coll: Any, target: str, idx: Any, read: Callable[[dict], Any], row: dict) -> None:
    """Refuse (409) a pending `row` whose key another pending job holds."""
    ready = ready_field(coll.schema)
    if row.get(ready) is None:
        return  # not pending: it holds no key
    v = read(row)
    if v is None:
        return
    rid = row["id"]
    rows = coll.rows
    for other in idx.lookup(v):
        if other != rid and rows[other].get(ready) is not None:
            raise FenecError("exists", f"`{coll.name}.{target}` is {SHOWN}, and {_show(v)} is held by "
                                       f"pending job {other}")


def unchanged(coll: Any, olds: list[dict], news: list[dict]) -> bool:
    """Whether writing `news` over `olds` can break no unique rule, so that a set may skip the
    row-by-row checks: every unique index is `@unique(pending)`, no row's key changes, and no row
    becomes pending that was not (a claim, an extension, a fail, an ack kept done). Each key had
    at most one pending job before, so it still has."""
    reads = []
    for kind, _idx, read in coll.indexes.values():
        if kind == "unique":
            return False
        if kind == KIND:
            reads.append(read)
    ready = ready_field(coll.schema)
    for old, new in zip(olds, news, strict=True):
        if old.get(ready) is None and new.get(ready) is not None:
            return False
        for read in reads:
            a, b = read(old), read(new)
            if a is not b and (a != b or type(a) is not type(b)):
                return False
    return True


def holder(coll: Any, idx: Any, v: Any) -> dict | None:
    """The pending job holding key `v`, or None."""
    ready = ready_field(coll.schema)
    rows = coll.rows
    for other in idx.lookup(v):
        row = rows[other]
        if row.get(ready) is not None:
            return row
    return None


def check_existing(coll: Any, target: str, read: Callable[[dict], Any]) -> None:
    """`create index ... @unique(pending)` on a queue already holding jobs: refused (409) when
    two pending jobs hold one key."""
    ready = ready_field(coll.schema)
    seen: dict[Any, int] = {}
    from .. import values as V

    for rid, row in coll.ids_in_order().items():
        if row.get(ready) is None:
            continue
        v = read(row)
        if v is None:
            continue
        hk = V.hashable(v)
        if hk in seen:
            raise FenecError("exists", f"`{coll.name}.{target}` cannot be {SHOWN}: {_show(v)} is held by "
                                       f"pending jobs {seen[hk]} and {rid}")
        seen[hk] = rid


def _show(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v[:64] + '"'
    return repr(v)[:64]
