"""Pauses, caps and rate limits enforced inside the claim, under the one writer (docs/queues.md,
"Pausing a queue" and "Caps and rate limits"; the controls themselves: controls.py).

A claim here is a `set` that writes `owner` (not a literal null) and `attempts`: every worker's
claim. On a collection with controls, prepare.py gives such a set a `Gate`, and execute.run_set
hands it over (one test of an attribute set at prepare time: a claim on a collection without
controls runs as before). Every row the claim would take, in the claim's own order:

1. Paused: a row of a paused target (its collection, or its queue) is passed over.
2. Caps: for each limit of a target holding the row (its `by` value, as the claim writes the row,
   keying the count), `used` is
     leased:  the target's jobs leased now (ready time > now and an owner, queues.py) with that
              key, plus those this claim already took and leaves leased (a row the claim would not
              leave leased uses nothing);
     claimed: the rows claims took with that key in this window [k*per, (k+1)*per) of the
              clock's epoch ms, plus this claim's;
   and the row is passed over when `used >= n` for any of them.
3. Passed-over rows are not answered and the pick goes on in order, reading candidates in pages
   that double, until it has its `limit` or the candidates end. So a claim takes fewer rows than
   its `limit`, or none, never more than a limit allows, whatever number of workers claim.

The candidates are first filtered by a test that reads no state of the claim itself (rule 1,
and rule 2 without this claim's rows): a capped tenant's rows are not candidates at all, so a
claim reads its page, plus the rows of keys it fills itself.

What it keeps:
* `Books`: for each collection with a `leased` limit, the lease end of every job with an owner,
  by (limit, key). Built from the rows at first use (after a restart, or any change of the
  controls or schema), then kept by a write observer (`note`, under the write lock after each
  commit: a lease ended by an ack, a failure or an extension is seen there); a lapsed lease stops
  counting when the clock passes its end, and is dropped then. A block's own earlier writes are
  not committed yet: they are counted from its undo list (`Budget._delta`).
* The rate windows (`Controls.rates`): claimed per key in the current window, added as a claim
  takes its rows and taken off again if its block rolls back. In memory only: a restart starts
  the current window's count again from zero.

A held claim's look (engine/holds.py) reads through the same filter, so a paused queue or a full
cap leaves it waiting: the lease ending (an ack, a failure: a write to the collection; a lapse:
the lease's end, a time wake) or the window turning (`Gate.next_turn`, a time wake) wakes it.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .. import values as V
from ..errors import Overflow
from ..plan.compile import Env
from .access import Query, pick
from .collection import Collection
from .controls import Controls, Limit, Target
from .execute import Block, _rewrite, _rewrite_plain, _within, answer_of, check_required
from .prepare import Prepared
from .queues import OWNER, Shape, value_of

if TYPE_CHECKING:
    from .catalog import Catalog


class Feed(Protocol):
    """What the books need of the engine: its change number, and a write observer added while a
    lock of it is held (engine.py `observe`, `locked`)."""

    seq: int

    def observe(self, note: Callable[[int, list], None], locked: bool = False) -> int: ...


def _key(row: dict, by: str | None) -> Any:
    return None if by is None else V.hashable(row.get(by))


class Gate:
    """A claim's controls (prepare.py sets it on the claim's `Prepared`): its collection's
    targets as they were when it was prepared (any change forgets the plans)."""

    __slots__ = ("controls", "coll", "shape", "targets", "limits", "leased", "stopped", "paused")

    def __init__(self, controls: Controls, coll: str, shape: Shape, targets: dict[str | None, Target]) -> None:
        self.controls = controls
        self.coll = coll
        self.shape = shape
        self.targets = targets
        whole = targets.get(None)
        self.stopped = whole is not None and whole.paused  # the whole collection paused
        self.paused = frozenset(q for q, t in targets.items() if q is not None and t.paused)
        # (target queue, limit, its slot): a book's index for `leased`, a rate key for `claimed`
        self.limits: list[tuple[str | None, Limit, Any]] = []
        self.leased: list[tuple[str | None, Limit]] = []
        for queue, t in targets.items():
            for lim in t.limits:
                if lim.kind == "leased":
                    self.limits.append((queue, lim, len(self.leased)))
                    self.leased.append((queue, lim))
                else:
                    self.limits.append((queue, lim, (coll, queue, lim.by, lim.per_ms)))

    def budget(self, catalog: Catalog, coll: Collection, now: int, blk: Block | None) -> Budget:
        return Budget(self, catalog, coll, now, blk)

    def look_query(self, catalog: Catalog, coll: Collection, q: Query, now: int) -> Query | None:
        """The query a held claim's look reads (None: the queue is paused whole)."""
        b = Budget(self, catalog, coll, now, None)
        return None if b.stopped else b.query(q)

    def next_turn(self, now: int) -> int | None:
        """The next moment a rate window turns, or None when the claim has no rate limit."""
        best = None
        for _queue, lim, _slot in self.limits:
            if lim.per_ms is not None:
                m = (now // lim.per_ms + 1) * lim.per_ms
                if best is None or m < best:
                    best = m
        return best

    def run(self, catalog: Catalog, p: Prepared, env: Env, blk: Block) -> Any:
        """execute.run_set for a claim with controls: the rows the budget admits, written."""
        coll = catalog.collection(p.coll)
        b = Budget(self, catalog, coll, int(env.now), blk)
        olds: list[dict] = []
        news: list[dict] = []
        if not b.stopped:
            olds, news = _choose(coll, p, env, b)
        if env.writes or env.rows:
            _within(p, env, blk, len(olds))
        if olds:
            schema = coll.schema
            blk.touch(coll)
            undo = blk.undo
            if coll.required:
                for new in news:
                    check_required(schema, new)
            if coll.unique:  # each row checked against those before it already written (as run_set)
                alive_fn = p.alive
                alive = (lambda r: alive_fn(r, env)) if alive_fn else (lambda r: True)
                for old, new in zip(olds, news, strict=True):
                    coll.unique_check(new, alive, undo)
                    coll.replace(old, new, undo)
            else:
                coll.replace_all(olds, news, undo)
            name = coll.name
            blk.ops += [("p", name, new["id"], new) for new in news]
            blk.writes += 1
            blk.taken += len(olds)
        return answer_of("set", p, news, env)


def _choose(coll: Collection, p: Prepared, env: Env, b: Budget) -> tuple[list[dict], list[dict]]:
    """The rows a claim takes, in its order, and their written forms (the module's rules)."""
    plain = p.plain
    schema = coll.schema
    # a value that reads no row: its error is the statement's, raised before any row is read
    if plain is not None:
        _rewrite_plain(plain, [], env)
    else:
        _rewrite(schema, p.patch, [], env)

    def rewrite(rows: list[dict]) -> list[dict]:
        if plain is not None:
            return _rewrite_plain(plain, rows, env)
        return _rewrite(schema, p.patch, rows, env)
    q = b.query(p.query)
    limit = p.query.limit
    need = limit
    olds: list[dict] = []
    news: list[dict] = []
    cands = pick(coll, q, env, need_override=need)
    i = 0
    while True:
        rest = cands[i:]
        try:
            written = rewrite(rest)  # every candidate at once, as run_set does
        except Overflow:
            if limit is None:
                raise
            written = []
            for old in rest:  # one at a time: a row that overflows is passed over (execute._pass_over)
                try:
                    written.extend(rewrite([old]))
                except Overflow:
                    written.append(None)  # type: ignore[arg-type]
        for old, new in zip(rest, written, strict=True):
            i += 1
            if limit is not None and len(olds) >= limit:
                break
            if new is not None and b.admit(new):
                olds.append(old)
                news.append(new)
        if limit is None or need is None or len(olds) >= limit or len(cands) < need:
            return olds, news
        need *= 2
        cands = pick(coll, q, env, need_override=need)


class Budget:
    """What one claim (or one look) may still take, as of `now`: the module's rules 1 and 2."""

    __slots__ = ("gate", "stopped", "paused", "limits", "now", "blk", "coll", "catalog", "book", "_used",
                 "taken", "_delta", "shape")

    def __init__(self, gate: Gate, catalog: Catalog, coll: Collection, now: int, blk: Block | None) -> None:
        self.gate = gate
        self.catalog = catalog
        self.coll = coll
        self.now = now
        self.blk = blk
        self.shape = gate.shape
        self.stopped = gate.stopped
        self.paused = gate.paused
        self.limits = gate.limits
        self.book: Book | None = None
        self._used: dict[tuple[int, Any], int] = {}
        self.taken: dict[tuple[int, Any], int] = {}
        self._delta: dict[tuple[int, Any], int] | None = None

    def query(self, q: Query) -> Query:
        """`q` with the candidates' test (rules 1 and 2 without this claim's own rows)."""
        base = q.filter
        is_open = self.open

        def filt(row: dict, env: Env) -> bool:
            return (base is None or bool(base(row, env))) and is_open(row)
        return Query(filt, q.access, q.order, q.limit, q.offset, filt)

    def open(self, row: dict) -> bool:
        shape = self.shape
        queue = value_of(shape, row)
        if queue in self.paused:
            return False
        for i, (tq, lim, _slot) in enumerate(self.limits):
            if tq is not None and tq != queue:
                continue
            if self.used(i, _key(row, lim.by)) >= lim.n:
                return False
        return True

    def admit(self, new: dict) -> bool:
        """Whether the claim may take the row it would write as `new`; if so it is counted."""
        queue = value_of(self.shape, new)
        if queue in self.paused:
            return False
        hits = []
        for i, (tq, lim, _slot) in enumerate(self.limits):
            if tq is not None and tq != queue:
                continue
            if lim.kind == "leased" and not self._leased(new):
                continue
            key = _key(new, lim.by)
            if self.used(i, key) + self.taken.get((i, key), 0) >= lim.n:
                return False
            hits.append((i, key))
        for hit in hits:
            self.taken[hit] = self.taken.get(hit, 0) + 1
            if self.blk is not None:
                slot = self.limits[hit[0]][2]
                if type(slot) is tuple:
                    self._count_claim(slot, self.limits[hit[0]][1], hit[1])
        return True

    def _leased(self, row: dict) -> bool:
        end = row.get(self.shape.ready)
        return row.get(OWNER) is not None and end is not None and end > self.now

    def used(self, i: int, key: Any) -> int:
        got = self._used.get((i, key))
        if got is not None:
            return got
        _tq, lim, slot = self.limits[i]
        if type(slot) is tuple:
            assert lim.per_ms is not None
            entry = self.gate.controls.rates.get(slot)
            n = entry[1].get(key, 0) if entry is not None and entry[0] == self.now // lim.per_ms else 0
        else:
            if self.book is None:
                self.book = books(self.gate.controls).book(self.coll, self.gate, self.blk)
            n = self.book.count(slot, key, self.now) + self._block_delta().get((slot, key), 0)
        self._used[(i, key)] = n
        return n

    def _count_claim(self, slot: tuple, lim: Limit, key: Any) -> None:
        assert lim.per_ms is not None and self.blk is not None
        rates = self.gate.controls.rates
        window = self.now // lim.per_ms
        entry = rates.get(slot)
        if entry is None or entry[0] != window:
            entry = rates[slot] = [window, {}]
        counts = entry[1]
        counts[key] = counts.get(key, 0) + 1

        def undo() -> None:
            if rates.get(slot) is entry and counts.get(key, 0) > 0:
                counts[key] -= 1
        self.blk.schema_undo.append(undo)

    def _block_delta(self) -> dict[tuple[int, Any], int]:
        """The leases this block's earlier statements made or ended, by (book index, key): the
        book holds what is committed, the rows as they were before the block."""
        if self._delta is not None:
            return self._delta
        delta: dict[tuple[int, Any], int] = {}
        self._delta = delta
        blk = self.blk
        if blk is None or not blk.undo:
            return delta
        coll = self.coll
        seen: set[int] = set()
        for c, rid, old in blk.undo:
            if c is not coll or rid in seen:
                continue
            seen.add(rid)
            for row, sign in ((old, -1), (coll.rows.get(rid), 1)):
                if row is None or not self._leased(row):
                    continue
                queue = value_of(self.shape, row)
                for li, (tq, lim) in enumerate(self.gate.leased):
                    if tq is None or tq == queue:
                        k = (li, _key(row, lim.by))
                        delta[k] = delta.get(k, 0) + sign
        return delta


class Book:
    """The leases of one collection, for its `leased` limits (the module doc)."""

    __slots__ = ("seq", "limits", "shape", "ends", "heaps", "where")

    def __init__(self, seq: int, gate: Gate) -> None:
        self.seq = seq
        self.limits = gate.leased
        self.shape = gate.shape
        # per limit, per key: the lease end of each job by id, and the same as a heap of (end, id)
        # (an entry whose id has another end, or none, is stale: skipped when it comes up), so a
        # count drops the lapsed leases from the heap's top instead of reading every lease
        self.ends: list[dict[Any, dict[int, Any]]] = [{} for _ in self.limits]
        self.heaps: list[dict[Any, list[tuple[Any, int]]]] = [{} for _ in self.limits]
        self.where: dict[int, list[tuple[int, Any]]] = {}

    def add(self, row: dict) -> None:
        if row.get(OWNER) is None:
            return
        end = row.get(self.shape.ready)
        if end is None:
            return
        rid = row["id"]
        queue = value_of(self.shape, row)
        for li, (tq, lim) in enumerate(self.limits):
            if tq is not None and tq != queue:
                continue
            key = _key(row, lim.by)
            d = self.ends[li].get(key)
            if d is None:
                d = self.ends[li][key] = {}
                self.heaps[li][key] = []
            d[rid] = end
            heapq.heappush(self.heaps[li][key], (end, rid))
            self.where.setdefault(rid, []).append((li, key))

    def remove(self, rid: int) -> None:
        for li, key in self.where.pop(rid, ()):
            d = self.ends[li].get(key)
            if d is not None:
                d.pop(rid, None)

    def count(self, li: int, key: Any, now: int) -> int:
        """Leases of limit `li` and `key` that end after `now`; the lapsed ones are dropped (the
        clock does not go back, and a lease that changes is written, so `note` sees it)."""
        d = self.ends[li].get(key)
        if d is None:
            return 0
        heap = self.heaps[li][key]
        while heap and heap[0][0] <= now:
            end, rid = heapq.heappop(heap)
            if d.get(rid) == end:
                del d[rid]
        return len(d)


class Books:
    """Every collection's `Book`, and the write observer that keeps them (registered with the
    engine the first time a book is built: until then a commit pays nothing for them)."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.by_coll: dict[str, Book] = {}
        self._mutex = threading.Lock()  # looks build books under the shared read lock

    def forget(self, coll: str) -> None:
        self.by_coll.pop(coll, None)

    def book(self, coll: Collection, gate: Gate, blk: Block | None) -> Book:
        """The collection's book as of its last commit: one built now (after a change, a
        restart, a replayed record) reads the rows a block under way changed as they were."""
        b = self.by_coll.get(coll.name)
        if b is not None and b.seq == self.feed.seq and b.limits == gate.leased:
            return b
        b = Book(self.feed.seq, gate)
        rows = coll.rows
        before: dict[int, dict | None] = {}
        if blk is not None:
            for c, rid, old in blk.undo:
                if c is coll and rid not in before:
                    before[rid] = old
        for rid, row in list(rows.items()):
            if rid not in before:
                b.add(row)
        for old in before.values():
            if old is not None:
                b.add(old)
        with self._mutex:
            self.by_coll[coll.name] = b
        return b

    def note(self, seq: int, ops: list) -> None:
        """Under the write lock, after a write committed as change `seq`: its rows' leases."""
        by_coll = self.by_coll
        if not by_coll:
            return
        for op in ops:
            kind = op[0]
            if kind == "p" or kind == "d":
                b = by_coll.get(op[1])
                if b is not None:
                    b.remove(op[2])
                    if kind == "p":
                        b.add(op[3])
            elif kind in ("c", "x", "i"):
                by_coll.pop(op[1], None)
        for b in by_coll.values():
            b.seq = seq


_BOOKS_MUTEX = threading.Lock()


def books(controls: Controls) -> Books:
    got = controls.books
    if got is None:
        with _BOOKS_MUTEX:
            got = controls.books
            if got is None:
                feed = controls.feed
                assert feed is not None  # set by the engine that owns the catalog
                got = Books(feed)
                feed.observe(got.note, locked=True)
                controls.books = got
    return got


__all__ = ["Gate", "Budget", "Book", "Books", "books"]

