"""Which collections are job queues, what state each job is in, and what each write did to them.

A collection is a queue when its schema has the shape of one (docs/metrics.md says the same to
users; the dashboard's app.js applies the same rule to `GET /collections`):

* a field `owner` of type text and a field `attempts` of type int, and
* a ready-time field: `run_at` when it is a timestamp; otherwise the one timestamp field with an
  `@sorted` index (other than `done_at`), when there is exactly one.

Optional fields it reads when present: `error` (any type), `done_at` (timestamp: the queue keeps
done jobs), `queue` (text: the collection holds several queues, one per value; a job with no
value is in the queue named "").

A job's state at time `now`, by its ready time `r`:

    ready     r <= now
    leased    r > now and owner is not null
    delayed   r > now and owner is null
    dead      r is null and (no done_at field, or done_at is null)
    done      r is null and done_at is not null       (a kept-done job: run_at null, done_at set)
    retrying  ready or delayed, attempts > 0 and error is not null (counted besides ready/delayed)

What a write did (`Tally`: queued by the write, counted when the counters are read), by
the row before (`old`, None for an insert) and after (`new`, None for a delete):

    enqueued      a row inserted into a queue
    claimed       new.owner is not null and new.attempts > old's (or inserted with an owner):
                  the claim's `owner: $1, ..., attempts: attempts + 1`; an extension is not one
    acked         old.owner is not null, and the row is deleted or becomes done
    failed        old.owner is not null, and new.owner is null with the row not done
                  (given back to run again, or dead-lettered)
    dead_lettered the row becomes dead from any other state

A pop (`del ... where run_at <= now() ... returning`) of a job nobody held is none of these.
Counters start at zero with the process; a restart's replay is not counted.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..pacing import PACE_ROWS, hand_over
from ..plan.schema import Schema
from .collection import Collection

if TYPE_CHECKING:
    from .catalog import Catalog

EVENTS = ("enqueued", "claimed", "acked", "failed", "dead_lettered")
STATES = ("ready", "leased", "delayed", "retrying", "dead", "done")
MAX_VALUES = 1000  # per collection: past this many distinct queue values, counters go to OTHER
OTHER = "(other)"
# The fields a queue's shape names (the module doc): every reader of a job's state reads these.
OWNER = "owner"
ATTEMPTS = "attempts"
RUN_AT = "run_at"
DONE_AT = "done_at"
ERROR = "error"
QUEUE = "queue"


@dataclass(frozen=True, slots=True)
class Shape:
    """A queue collection's fields: its ready time, and the optional ones (None when absent)."""

    ready: str
    done: str | None
    error: str | None
    queue: str | None


def shape_of(schema: Schema) -> Shape | None:
    fields = schema.fields
    owner, attempts = fields.get(OWNER), fields.get(ATTEMPTS)
    if owner is None or owner.type != "text" or attempts is None or attempts.type != "int":
        return None
    run_at = fields.get(RUN_AT)
    if run_at is not None and run_at.type == "timestamp":
        ready = RUN_AT
    else:
        sorted_ts = [f.name for f in fields.values()
                     if f.type == "timestamp" and f.index == "sorted" and f.name != DONE_AT]
        if len(sorted_ts) != 1:
            return None
        ready = sorted_ts[0]
    done = fields.get(DONE_AT)
    queue = fields.get(QUEUE)
    return Shape(ready=ready,
                 done=DONE_AT if done is not None and done.type == "timestamp" else None,
                 error=ERROR if ERROR in fields else None,
                 queue=QUEUE if queue is not None and queue.type == "text" else None)


def value_of(shape: Shape, row: dict) -> str:
    if shape.queue is None:
        return ""
    v = row.get(shape.queue)
    return "" if v is None else str(v)


def counts(shape: Shape, rows: Iterable[dict], now: int) -> dict[str, dict[str, int]]:
    """Per queue value: each state's count and `oldest_ready_ms` (0 when none is ready).
    One pass over the rows (long on a large queue), which `stats` makes over a list of them copied
    under the shared lock."""
    out: dict[str, dict[str, int]] = {}
    ready_f, done_f, error_f, queue_f = shape.ready, shape.done, shape.error, shape.queue
    oldest: dict[str, int] = {}
    for row in rows:
        value = ""
        if queue_f is not None:
            v = row.get(queue_f)
            value = "" if v is None else str(v)
        c = out.get(value)
        if c is None:
            c = out[value] = {s: 0 for s in STATES}
        r = row.get(ready_f)
        if r is None:
            if done_f is not None and row.get(done_f) is not None:
                c["done"] += 1
            else:
                c["dead"] += 1
            continue
        if r <= now:
            c["ready"] += 1
            if value not in oldest or r < oldest[value]:
                oldest[value] = r
        elif row.get(OWNER) is not None:
            c["leased"] += 1
            continue
        else:
            c["delayed"] += 1
        if error_f is not None and row.get(error_f) is not None and (row.get(ATTEMPTS) or 0) > 0:
            c["retrying"] += 1
    for value, c in out.items():
        c["oldest_ready_ms"] = now - int(oldest[value]) if value in oldest else 0
    return out


_GONE: Any = object()


class Tally:
    """The event counters per (collection, queue value): `snapshot()[(coll, value)]` is a list
    in the order of EVENTS.

    The write path only queues what a committed block did (`note`: one deque append under the
    write lock, where classifying its rows in place would cost the claim several times more);
    `drain`, run by whoever reads the
    counters (a scrape, the once-a-second sampler) or once more than PENDING_MAX blocks or
    PENDING_ROWS changed rows wait, classifies them: the rows of the blocks waiting stay alive until then, so the bound
    keeps a bulk load with no scrape from holding millions of them. A few blocks at a time, their
    rows are still in the CPU's caches, which a larger bound loses (bench/README.md, "Numbers the
    code's comments used to carry"). A block's undo list holds each changed
    row as it was before (its first entry per id), its ops the rows as written (the last)."""

    PENDING_MAX = 8
    PENDING_ROWS = 65_536

    def __init__(self, collections: dict[str, Collection]) -> None:
        self.counters: dict[tuple[str, str], list[int]] = {}
        self._collections = collections
        self._shapes: dict[str, tuple[Any, Shape | None]] = {}
        self._values: dict[str, int] = {}
        self._pending: deque[tuple[list, list]] = deque()
        self._rows = 0  # changed rows waiting, about: reset by drain
        self._draining = threading.Lock()

    def note(self, undo: list, ops: list) -> None:
        if undo:
            self._pending.append((undo, ops))
            self._rows += len(undo)
            if len(self._pending) > self.PENDING_MAX or self._rows > self.PENDING_ROWS:
                self.drain()

    def shape(self, name: str) -> Shape | None:
        coll = self._collections.get(name)
        if coll is None:
            return None
        got = self._shapes.get(name)
        if got is None or got[0] is not coll.schema:
            got = (coll.schema, shape_of(coll.schema))
            self._shapes[name] = got
        return got[1]

    def drain(self) -> None:
        with self._draining:
            self._rows = 0
            pending = self._pending
            while pending:
                try:
                    undo, ops = pending.popleft()
                except IndexError:
                    break
                self._block(undo, ops)

    def _block(self, undo: list, ops: list) -> None:
        """Count what one block did: each row it changed, from its first state in `undo` to
        its last in `ops`, one collection at a time (`_part`); nearly every block writes one.
        Counters are kept per collection, so a block of several counts as its parts would.
        tests/unit/test_queues.py holds this to the row-by-row rule on random blocks."""
        name = ""
        after: dict[int, dict | None] = {}
        for i, op in enumerate(ops):
            if i % PACE_ROWS == 0 and i:
                hand_over()
            kind = op[0]
            if kind == "p" or kind == "d":
                if op[1] != name:
                    if name:
                        self._parts(undo, ops)
                        return
                    name = op[1]
                after[op[2]] = op[3] if kind == "p" else None
        if not name:
            return
        for entry in undo:
            if entry[0].name != name:
                self._parts(undo, ops)
                return
        self._part(name, undo, after)

    def _parts(self, undo: list, ops: list) -> None:
        """`_block` of a block that wrote rows of several collections: each collection's part."""
        parts: dict[str, tuple[list, dict[int, dict | None]]] = {}
        for entry in undo:
            parts.setdefault(entry[0].name, ([], {}))[0].append(entry)
        for op in ops:
            kind = op[0]
            if kind == "p" or kind == "d":
                parts.setdefault(op[1], ([], {}))[1][op[2]] = op[3] if kind == "p" else None
        for name, (part_undo, after) in parts.items():
            self._part(name, part_undo, after)

    def _part(self, name: str, undo: list, after: dict[int, dict | None]) -> None:
        """The rows of one collection a block changed, `after` their last states by id (taken
        out as the rows are met, so a row changed twice counts once): the shape looked up once,
        and without a queue field the three events every worker makes (a put, a claim, an ack)
        added once, as `_one` counts them: the blocks every worker makes are the ones worth a
        path of their own."""
        shape = self.shape(name)
        if shape is None:
            return
        if shape.queue is not None:
            for i, (_coll, rid, old) in enumerate(undo):
                if i % PACE_ROWS == 0 and i:
                    hand_over()  # a block of many rows (pacing.py)
                new = after.pop(rid, _GONE)
                if new is not _GONE:
                    self._one(name, shape, old, new)
            return
        ready = shape.ready
        puts = claims = acks = 0
        for i, (_coll, rid, old) in enumerate(undo):
            if i % PACE_ROWS == 0 and i:
                hand_over()
            new = after.pop(rid, _GONE)
            if new is _GONE:
                continue  # not written in the end, or a later undo entry of a row already counted
            if new is None:  # an ack
                if old is not None and old.get(OWNER) is not None:
                    acks += 1
            elif old is None:  # a put
                puts += 1
                if new.get(OWNER) is not None:
                    claims += 1
            elif old.get(OWNER) is None and new.get(ready) is not None:  # a claim
                if new.get(OWNER) is not None and (new.get(ATTEMPTS) or 0) > (old.get(ATTEMPTS) or 0):
                    claims += 1
            else:
                self._one(name, shape, old, new)
        if puts or claims or acks:
            plain = self._slot(name, "")
            plain[0] += puts
            plain[1] += claims
            plain[2] += acks

    def _slot(self, name: str, value: str) -> list[int]:
        key = (name, value)
        c = self.counters.get(key)
        if c is None:
            if self._values.get(name, 0) >= MAX_VALUES:
                key = (name, OTHER)
                c = self.counters.get(key)
                if c is not None:
                    return c
            else:
                self._values[name] = self._values.get(name, 0) + 1
            c = self.counters[key] = [0] * len(EVENTS)
        return c

    def _one(self, name: str, shape: Shape, old: dict | None, new: dict | None) -> None:
        ready, done = shape.ready, shape.done
        if new is None:
            if old is not None and old.get(OWNER) is not None:
                self._slot(name, value_of(shape, old))[2] += 1  # acked
            return
        c = self._slot(name, value_of(shape, new))
        new_owner = new.get(OWNER)
        if old is None:
            c[0] += 1  # enqueued
            if new_owner is not None:
                c[1] += 1
            return
        new_dead = new.get(ready) is None
        new_done = new_dead and done is not None and new.get(done) is not None
        if new_done:
            new_dead = False
        if new_owner is not None and (new.get(ATTEMPTS) or 0) > (old.get(ATTEMPTS) or 0):
            c[1] += 1  # claimed
        if old.get(OWNER) is not None:
            if new_done:
                c[2] += 1  # acked, kept done
            elif new_owner is None:
                c[3] += 1  # failed
        if new_dead:
            old_dead = old.get(ready) is None and not (done is not None and old.get(done) is not None)
            if not old_dead:
                c[4] += 1  # dead-lettered

    def snapshot(self) -> dict[tuple[str, str], list[int]]:
        self.drain()
        return {k: list(v) for k, v in list(self.counters.items())}


def stats(catalog: Catalog, seq: int) -> dict:
    """Documents per collection, and for a queue how many jobs are ready, leased, delayed,
    retrying, dead and done, with the age of the oldest ready one in ms (0 when none is): the
    totals, and under `queues` the same per value of its `queue` field ("" alone when it has
    none); and the change number `seq`."""
    now = catalog.now()
    out: dict[str, Any] = {"collections": {}, "seq": seq}
    scans = []
    with catalog.reading():
        for name, coll in catalog.collections.items():
            st: dict[str, Any] = {"documents": len(coll.rows)}
            shape = shape_of(coll.schema)
            if shape is not None:
                st["ready_field"] = shape.ready
                st["queue_field"] = shape.queue
                if shape.queue is None and shape.error is None and shape.done is None:
                    per = {"": _index_counts(coll, now, shape.ready)}  # the index alone answers
                    st.update(_totals(per), queues=per)
                else:
                    # rows are never changed in place: a list of them now is a consistent
                    # copy, counted after the lock is let go (a copy holds the lock for a small
                    # part of what counting under it would)
                    scans.append((st, shape, list(coll.rows.values())))
            out["collections"][name] = st
    for st, shape, rows in scans:
        per = counts(shape, rows, now)
        st.update(_totals(per), queues=per)
    return out


def _totals(per: dict[str, dict[str, int]]) -> dict[str, int]:
    out = dict.fromkeys(STATES, 0)
    oldest = 0
    for c in per.values():
        for k in out:
            out[k] += c[k]
        oldest = max(oldest, c["oldest_ready_ms"])
    out["oldest_ready_ms"] = oldest
    return out


def _index_counts(coll: Collection, now: int, ready_f: str) -> dict:
    """The states of a queue with no `queue`, `error` or `done_at` field (so none retrying or
    done), read off its ready field's index where it has a sorted one."""
    ready = leased = delayed = dead = 0
    oldest = None
    has_owner = OWNER in coll.schema.fields
    idx = coll.index(ready_f)
    if idx is not None and hasattr(idx, "count"):
        ready = idx.count(None, True, now, True)
        dead = len(idx.nulls)
        oldest_v = idx.min_value()
        if ready and oldest_v is not None:
            oldest = now - int(oldest_v)
        for rid in idx.walk(now, False, None, True, False, False):
            if has_owner and coll.rows[rid].get(OWNER) is not None:
                leased += 1
            else:
                delayed += 1
    else:
        for row in coll.rows.values():
            v = row.get(ready_f)
            if v is None:
                dead += 1
            elif v <= now:
                ready += 1
                if oldest is None or now - v > oldest:
                    oldest = now - v
            elif has_owner and row.get(OWNER) is not None:
                leased += 1
            else:
                delayed += 1
    return {"ready": ready, "leased": leased, "delayed": delayed, "retrying": 0, "dead": dead, "done": 0,
            "oldest_ready_ms": oldest or 0}
