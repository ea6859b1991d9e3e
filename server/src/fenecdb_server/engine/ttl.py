"""The TTL sweep's two halves: what is past its time (read under the shared lock), and its
deletion as one block (under the write lock; the engine commits it as one record).

A row is swept `SWEEP_GRACE_MS` past its `@ttl` (reads stop answering it at its time already:
fenecql.md), an Idempotency-Key once its own ttl is over. Between the two halves a row may have
been deleted or rewritten, a key kept again: the block passes over those.
"""

from __future__ import annotations

from .catalog import Catalog
from .collection import Collection
from .execute import Block
from .idempotency import Keys

SWEEP_GRACE_MS = 60_000


def expired(catalog: Catalog, keys: Keys, now: int) -> tuple[list[tuple[Collection, dict]], list]:
    """Under the shared lock: the rows more than the grace past their @ttl, and the keys past theirs."""
    doomed: list[tuple[Collection, dict]] = []
    for coll in catalog.collections.values():
        ttl = coll.schema.ttl_field
        if ttl is None:
            continue
        assert ttl.ttl_ms is not None  # a @ttl field always has its duration
        idx = coll.index(ttl.name)
        for rid in idx.walk(None, True, now - ttl.ttl_ms - SWEEP_GRACE_MS, True, False, False):
            doomed.append((coll, coll.rows[rid]))
    return doomed, keys.expired(now)


def delete(doomed: list[tuple[Collection, dict]], old_keys: list, keys: Keys, now: int) -> tuple[Block, int]:
    """Under the write lock: a block deleting what `expired` found and is still there; the rows deleted."""
    blk = Block()
    n = 0
    for coll, row in doomed:
        if coll.rows.get(row["id"]) is row:
            blk.touch(coll)
            coll.delete(row, blk.undo)
            blk.ops.append(("d", coll.name, row["id"]))
            n += 1
    for k in old_keys:
        s = keys.get(k)
        if s is not None and not s.live(now):
            keys.forget(k)
            blk.ops.append(("K", k))
    return blk, n
