"""Queue controls: which queues are paused, and their caps and rate limits (docs/queues.md,
"Pausing a queue" and "Caps and rate limits"; fenecql.md §15). This module keeps them and runs
the statements that change and show them; engine/limits.py enforces them inside the claim.

A target is a collection and, optionally, a queue name: `queue jobs` is every job of `jobs`,
`queue jobs "mail"` the jobs whose `queue` field holds "mail" (engine/queues.py; a job with no
value is in the queue named ""). A job is under the controls of both targets that hold it. Each
target has its `Target`: paused or not, and its limits, at most one per (kind, per-field):

    leased   at most n of its jobs leased at once (queues.py's state: ready time > now and an
             owner), counted apart for each value of `by` when given
    claimed  at most n of its jobs taken by claims in each window [k*per_ms, (k+1)*per_ms) of the
             clock's epoch ms, counted apart for each value of `by` when given

Durable as the log's own op (engine/records.py): `["q", coll, queue, state]` written by each
statement that changes a target, `state` the target as it is after it
(`{"paused": bool, "limits": [[kind, n, per_ms, by], ...]}`), or null when nothing is left of it;
replayed by setting that state. A snapshot keeps every target under `"queues"` as
`[[coll, queue, state], ...]`. Dropping a collection forgets its targets. Any change forgets the
prepared plans (`Catalog.schema_changed`), so a claim's gate is decided once, when it is
prepared (prepare.py), never per row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import FenecError
from ..plan.schema import Schema, no_collection
from ..ql import ast as A
from .queues import ATTEMPTS, OWNER, Shape, shape_of

if TYPE_CHECKING:
    from .catalog import Catalog
    from .execute import Block
    from .limits import Books, Feed, Gate

KINDS = ("leased", "claimed")


@dataclass(frozen=True, slots=True)
class Limit:
    kind: str  # leased | claimed
    n: int
    per_ms: int | None  # claimed: the window's length
    by: str | None  # counted apart for each value of this field

    def to_json(self) -> list:
        return [self.kind, self.n, self.per_ms, self.by]

    def text(self) -> str:
        out = f"{self.n} {self.kind}"
        if self.per_ms is not None:
            out += f" per {_duration(self.per_ms)}"
        if self.by is not None:
            out += f" per {self.by}"
        return out


@dataclass(frozen=True, slots=True)
class Target:
    paused: bool
    limits: tuple[Limit, ...]

    def to_json(self) -> dict | None:
        if not self.paused and not self.limits:
            return None
        return {"paused": self.paused, "limits": [lim.to_json() for lim in self.limits]}


NONE = Target(False, ())


def target_of(state: dict | None) -> Target:
    if not state:
        return NONE
    return Target(bool(state.get("paused")),
                  tuple(Limit(k, int(n), per, by) for k, n, per, by in state.get("limits") or ()))


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


class Controls:
    """Every target's controls, by collection; and what enforcing them keeps (limits.py)."""

    def __init__(self) -> None:
        self.targets: dict[str, dict[str | None, Target]] = {}
        # the rate windows: (coll, queue, by, per_ms) -> [window number, {key: claimed}]
        self.rates: dict[tuple, list] = {}
        self.books: Books | None = None  # the leases of collections with a `leased` limit (limits.py)
        self.feed: Feed | None = None  # the engine's change number and write observers (set by the engine)

    def on(self, coll: str) -> bool:
        return coll in self.targets

    def of(self, coll: str) -> dict[str | None, Target] | None:
        return self.targets.get(coll)

    def gate(self, coll: str, stmt: A.Statement, schema: Schema) -> Gate | None:
        """The gate of a claim on `coll` (prepare.py): a `set` writing `owner` (not a literal
        null) and `attempts`, on a queue with some control; None for any other statement."""
        targets = self.targets.get(coll)
        if targets is None or type(stmt) is not A.Set:
            return None
        written = {e.target.name: e.value for e in stmt.patch if not e.target.keys}
        owner = written.get(OWNER)
        if owner is None or ATTEMPTS not in written or (type(owner) is A.Lit and owner.value is None):
            return None
        shape = shape_of(schema)
        if shape is None:
            return None
        from .limits import Gate  # limits imports execute, which this module must not load first
        return Gate(self, coll, shape, targets)

    def set(self, catalog: Catalog, coll: str, queue: str | None, target: Target) -> Callable[[], None]:
        """Make `target` the controls of (coll, queue); answer the undo."""
        per = self.targets.get(coll)
        old = per.get(queue, NONE) if per is not None else NONE
        self._put(coll, queue, target)
        catalog.schema_changed()

        def undo() -> None:
            self._put(coll, queue, old)
            catalog.schema_changed()
        return undo

    def _put(self, coll: str, queue: str | None, target: Target) -> None:
        per = self.targets.setdefault(coll, {})
        if target == NONE:
            per.pop(queue, None)
            if not per:
                del self.targets[coll]
        else:
            per[queue] = target
        kept = {(coll, queue, lim.by, lim.per_ms) for lim in target.limits if lim.kind == "claimed"}
        for key in [k for k in self.rates if k[0] == coll and k[1] == queue and k not in kept]:
            del self.rates[key]
        if self.books is not None:
            self.books.forget(coll)

    def forget(self, catalog: Catalog, coll: str) -> Callable[[], None]:
        """Drop every control of `coll` (the collection is dropped); answer the undo."""
        old = self.targets.pop(coll, None)
        rates = {k: v for k, v in self.rates.items() if k[0] == coll}
        for k in rates:
            del self.rates[k]
        if self.books is not None:
            self.books.forget(coll)
        if old is not None:
            catalog.schema_changed()

        def undo() -> None:
            if old is not None:
                self.targets[coll] = old
                self.rates.update(rates)
                catalog.schema_changed()
        return undo

    # ---------------------------------------------------------------- the log and snapshots

    def replay(self, coll: str, queue: str | None, state: dict | None) -> None:
        self._put(coll, queue, target_of(state))

    def to_json(self) -> list:
        return [[coll, queue, t.to_json()] for coll, per in self.targets.items() for queue, t in per.items()]

    def load(self, entries: list) -> None:
        for coll, queue, state in entries:
            self._put(coll, queue, target_of(state))


# ---------------------------------------------------------------- the statements


def _queue_shape(catalog: Catalog, stmt: A.QueueControl) -> Shape:
    coll = catalog.collections.get(stmt.collection)
    if coll is None:
        raise no_collection(stmt.collection, catalog.collections)
    shape = shape_of(coll.schema)
    if shape is None:
        raise FenecError("query", f"`{stmt.collection}` is not a queue: a queue has `owner text`, `attempts int` "
                                  "and a ready time (`run_at timestamp`), see docs/queues.md")
    if stmt.queue is not None and shape.queue is None:
        raise FenecError("query", f"`{stmt.collection}` has no `queue` field, so it holds one queue: "
                                  f"`{stmt.verb} queue {stmt.collection}` names it")
    if stmt.by is not None:
        f = coll.schema.fields.get(stmt.by)
        if f is None:
            raise FenecError("query", f"`{stmt.collection}` has no field `{stmt.by}` to count by")
        if f.type in ("json", "geo") or isinstance(f.type, tuple):
            raise FenecError("query", f"a limit counts by a field of one plain value, not a {f.type} field")
    return shape


def _named(stmt: A.QueueControl) -> str:
    return f"queue {stmt.collection}" + (f" {_quoted(stmt.queue)}" if stmt.queue is not None else "")


def _quoted(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_control(catalog: Catalog, stmt: A.QueueControl, blk: Block) -> dict:
    """pause, resume, limit or unlimit: the target's new state, written as one `q` op."""
    _queue_shape(catalog, stmt)
    per = catalog.controls.targets.get(stmt.collection)
    old = per.get(stmt.queue, NONE) if per is not None else NONE
    verb = stmt.verb
    if verb == "pause" or verb == "resume":
        new = Target(verb == "pause", old.limits)
        said = "paused" if verb == "pause" else "resumed"
    elif verb == "limit":
        assert stmt.kind is not None and stmt.n is not None
        lim = Limit(stmt.kind, stmt.n, stmt.per_ms, stmt.by)
        kept = tuple(x for x in old.limits if (x.kind, x.by) != (lim.kind, lim.by))
        new = Target(old.paused, (*kept, lim))
        said = f"limited to {lim.text()}"
    else:
        new = Target(old.paused, tuple(x for x in old.limits
                                       if not ((stmt.kind is None or x.kind == stmt.kind)
                                               and (stmt.by is None or x.by == stmt.by))))
        said = "unlimited" if new.limits != old.limits else "had no such limit"
    if new != old:
        blk.schema_undo.append(catalog.controls.set(catalog, stmt.collection, stmt.queue, new))
        blk.ops.append(("q", stmt.collection, stmt.queue, new.to_json()))
        blk.touched.add(stmt.collection)
        blk.writes += 1
    elif verb in ("pause", "resume"):
        said = f"was {said} already"
    return {"message": f"{_named(stmt)} {said}"}


def show_queues(catalog: Catalog, visible: Callable[[str], bool] | None = None) -> list[dict]:
    """`show queues`: a row per queue collection (its `queue` null) and per named queue with
    controls of its own, in name order: whether it is paused and its limits, as written."""
    rows = []
    for name in sorted(catalog.collections):
        if visible is not None and not visible(name):
            continue
        coll = catalog.collections[name]
        if shape_of(coll.schema) is None:
            continue
        per = catalog.controls.targets.get(name, {})
        queues: list[str | None] = [None, *sorted(q for q in per if q is not None)]
        for queue in queues:
            t = per.get(queue, NONE)
            rows.append({"collection": name, "queue": queue, "paused": t.paused,
                         "limits": [lim.text() for lim in t.limits]})
    return rows


__all__ = ["Controls", "Limit", "Target", "run_control", "show_queues", "KINDS"]

