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
from typing import Any

from ..plan.schema import Schema

EVENTS = ("enqueued", "claimed", "acked", "failed", "dead_lettered")
STATES = ("ready", "leased", "delayed", "retrying", "dead", "done")
MAX_VALUES = 1000  # per collection: past this many distinct queue values, counters go to OTHER
OTHER = "(other)"


@dataclass(frozen=True, slots=True)
class Shape:
    """A queue collection's fields: its ready time, and the optional ones (None when absent)."""

    ready: str
    done: str | None
    error: str | None
    queue: str | None


def shape_of(schema: Schema) -> Shape | None:
    fields = schema.fields
    owner, attempts = fields.get("owner"), fields.get("attempts")
    if owner is None or owner.type != "text" or attempts is None or attempts.type != "int":
        return None
    run_at = fields.get("run_at")
    if run_at is not None and run_at.type == "timestamp":
        ready = "run_at"
    else:
        sorted_ts = [f.name for f in fields.values()
                     if f.type == "timestamp" and f.index == "sorted" and f.name != "done_at"]
        if len(sorted_ts) != 1:
            return None
        ready = sorted_ts[0]
    done = fields.get("done_at")
    queue = fields.get("queue")
    return Shape(ready=ready,
                 done="done_at" if done is not None and done.type == "timestamp" else None,
                 error="error" if "error" in fields else None,
                 queue="queue" if queue is not None and queue.type == "text" else None)


def value_of(shape: Shape, row: dict) -> str:
    if shape.queue is None:
        return ""
    v = row.get(shape.queue)
    return "" if v is None else str(v)


def counts(shape: Shape, rows: Iterable[dict], now: int) -> dict[str, dict[str, int]]:
    """Per queue value: each state's count and `oldest_ready_ms` (0 when none is ready).
    One pass over the rows (100 000 jobs in 5 queue values: 75-92 ms on the shared 2-core test
    machine), which `Database.stats` makes over a list of them copied under the shared lock."""
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
        elif row.get("owner") is not None:
            c["leased"] += 1
            continue
        else:
            c["delayed"] += 1
        if error_f is not None and row.get(error_f) is not None and (row.get("attempts") or 0) > 0:
            c["retrying"] += 1
    for value, c in out.items():
        c["oldest_ready_ms"] = now - int(oldest[value]) if value in oldest else 0
    return out


class Tally:
    """The event counters per (collection, queue value): `snapshot()[(coll, value)]` is a list
    in the order of EVENTS.

    The write path only queues what a committed block did (`note`: one deque append under the
    write lock; in process a claim of 10 took 21.4 us at the median against 19.8 us with `note`
    off, where classifying its rows in place cost 7-9 us more); `drain`, run by whoever reads the counters (a scrape, the once-a-second sampler)
    or once PENDING_MAX blocks or PENDING_ROWS changed rows wait, classifies them (a bulk load of
    blocks of 1 000 jobs with no scrape kept 4 096 blocks, four million rows, alive). A block's undo list holds each changed
    row as it was before (its first entry per id), its ops the rows as written (the last)."""

    PENDING_MAX = 4096
    PENDING_ROWS = 65_536

    def __init__(self, collections: dict[str, Any]) -> None:
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
        before: dict[tuple[str, int], dict | None] = {}
        for coll, rid, old in undo:
            key = (coll.name, rid)
            if key not in before:
                before[key] = old
        after: dict[tuple[str, int], dict | None] = {}
        for op in ops:
            kind = op[0]
            if kind == "p":
                after[(op[1], op[2])] = op[3]
            elif kind == "d":
                after[(op[1], op[2])] = None
        for key, old in before.items():
            shape = self.shape(key[0])
            if shape is not None and key in after:
                self._one(key[0], shape, old, after[key])

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
            if old is not None and old.get("owner") is not None:
                self._slot(name, value_of(shape, old))[2] += 1  # acked
            return
        c = self._slot(name, value_of(shape, new))
        new_owner = new.get("owner")
        if old is None:
            c[0] += 1  # enqueued
            if new_owner is not None:
                c[1] += 1
            return
        new_dead = new.get(ready) is None
        new_done = new_dead and done is not None and new.get(done) is not None
        if new_done:
            new_dead = False
        if new_owner is not None and (new.get("attempts") or 0) > (old.get("attempts") or 0):
            c[1] += 1  # claimed
        if old.get("owner") is not None:
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
