"""Under `--sync always`: one fdatasync per loop turn, shared by every write of that turn, and
run while the loop goes on.

Redis's pattern for `appendfsync always`: a write runs on the loop as any request does (the
engine appends its record to the OS file at once, `storage/log.py`), but its answer is pending;
the first write of a turn schedules a flush with `call_soon`, which runs after every callback
already ready, i.e. once this turn's requests have all run. The flush starts one fdatasync for
every record appended so far (the log's leader step, `Log.sync_begin`) on the log's ring (a
thread of its own, `storage/sync_thread.py`, or the kernel's AIO, `storage/kernel_aio.py`) and
the loop goes on reading and running requests; the ring tells the end through an eventfd the
loop watches, and `_reaped` releases every answer the sync
covered, then starts the next one for the writes pending meanwhile. So the busier the server,
the more writes share one fdatasync, and the loop is never idle for a disk.

    turn T     request a: execute, append record 41, pending (flush scheduled)
               request b: execute, append record 42, pending
    turn T+1   flush: start an fdatasync covering 41 and 42
               request c: execute, append record 43, pending (waits: a sync runs)
    turn T+k   the eventfd: release a and b (on the direct path, http/protocol.py, their
               answers are written right there); start an fdatasync covering 43

A turn with a lone write syncs it in place (`Log.sync_upto`, the loop waits): with nothing to
overlap, the ring's round trip (submit, the eventfd's wake, reap) only adds to the answer's
time: over HTTP one writer is faster in place, and eight writers faster with the rule as here
than with every sync in place or every sync on the ring. The sync starts after the turn, not at
a write's append: one writer and eight are both slower with the latter (bench/README.md, "Numbers
the code's comments used to carry"). Where there is neither the thread nor an AIO fdatasync,
every sync runs in place.

The `TurnSync.deferred()` scope (`Log.deferred`) is what keeps `Database.execute` from waiting
itself: inside it, on the loop's thread, `wait_durable` notes the record's ticket instead of
blocking, and `Runner.run_here` (runner.py) answers that ticket, which its caller hands to `after`
before it answers. The scope defers on the loop's thread alone: entered anywhere else it
stands aside, so a write that runs off the loop (a large request, a held claim's large run or
a `/batch` in a worker thread, the sweeper, a compaction) waits in its own thread by group
commit, as the in-process `Database` always does, and no ticket is ever left to a caller that
could drop it. If the sync running is one the loop started, that thread reaps it itself
(`GroupCommit.await_sync`) rather than wait for the loop, which may be the very thread waiting. An
Idempotency-Key replay waits like a write (the engine makes it wait for the last record
appended), as the write it answers for may be in this very turn. A read is not pending: it may
see a write whose fdatasync has not finished, as a read from another thread may.

Why not a Python thread: a pool of them, each write handed over, costs futex calls and a third
`write` (the pool waking the loop) for every write, and its threads fight over the GIL while the
server is CPU-bound, so that few writes share an fsync; a single syncer thread needs the GIL back to
say it is done, and the busy loop gives it up only at the interpreter's 5 ms switch interval.
Neither the kernel's AIO nor the C thread of `storage/sync_thread.py` needs the GIL to finish
(bench/durable_syscalls.py counts the system calls; bench/README.md has the numbers).

A failed fdatasync fails every write pending on it with the log's "outcome unknown" 500, and the
log refuses every later write (`GroupCommit.begin`, `GroupCommit.lead`), as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from ..database import Deferred, StorageFailed


class TurnSync:
    """The pending answers of the writes of the loop's turns and the fdatasyncs that release them."""

    __slots__ = ("log", "_loop", "_loop_thread", "_pending", "_covered", "_ring", "_scheduled", "flushes")

    def __init__(self, log: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.log = log  # a storage.Log under --sync always
        self._loop = loop
        self._loop_thread = threading.get_ident()  # made on the loop's thread (App.start)
        self._pending: list[tuple[int, Callable[[StorageFailed | None], None]]] = []  # no sync started for them
        self._covered: list[tuple[int, Callable[[StorageFailed | None], None]]] = []  # the running sync's
        self._scheduled = False  # a `_flush` is queued with call_soon
        self.flushes = 0  # fdatasyncs started (at most one each): tests count them
        self._ring = log.datasync_ring()  # None: each fdatasync runs in place, on the loop
        if self._ring is not None:
            loop.add_reader(self._ring.fileno(), self._reaped)

    @property
    def overlapped(self) -> bool:
        """True when fdatasyncs run while the loop goes on (the ring), False when in place."""
        return self._ring is not None

    def syncing(self) -> bool:
        """An fdatasync runs on the ring now (the loop goes on meanwhile)."""
        return bool(self._covered)

    def deferred(self) -> Deferred:
        """The scope a request runs in (`Log.deferred`): on the loop's thread its write's sync is
        owed, and the caller hands the ticket to `after` (or `durable`) before it answers; on a
        worker thread it defers nothing, and the write waits for its own sync there."""
        return self.log.deferred(self._loop_thread)

    def after(self, ticket: int, then: Callable[[StorageFailed | None], None]) -> None:
        """Call `then(None)` once `ticket` is durable, `then(error)` if its fdatasync failed: from
        the flush itself, so the direct path's answer is written in the flush's turn (no task)."""
        self._pending.append((ticket, then))
        if not self._scheduled and not self._covered:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def durable(self, ticket: int) -> asyncio.Future[None]:
        """A future done once `ticket` is durable (or failed with StorageFailed): the ASGI door's."""
        future = self._loop.create_future()

        def release(error: StorageFailed | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        self.after(ticket, release)
        return future

    def close(self) -> None:
        """At shutdown: stop watching the ring (the log waits for a sync still running)."""
        if self._ring is not None:
            self._loop.remove_reader(self._ring.fileno())
            self._ring = None

    def _flush(self) -> None:
        """Once the turn's requests have run: one fdatasync for every record appended so far."""
        self._scheduled = False
        if not self._pending or self._covered:
            return
        pending, self._pending = self._pending, []
        upto = max(ticket for ticket, _ in pending)
        self.flushes += 1
        ring = self._ring
        if ring is not None and len(pending) > 1:  # a lone write: in place (see the module text)
            try:
                if self.log.sync_begin(ring):
                    self._covered = pending  # released by `_reaped`; the loop goes on meanwhile
                    return
            except StorageFailed as refused:
                self._release(pending, refused)
                return
        error: StorageFailed | None = None
        try:  # in place: no ring, or nothing to start (a thread's sync covered it, or runs now)
            self.log.sync_upto(upto)
        except StorageFailed as e:
            error = e
        self._release(pending, error)

    def _reaped(self) -> None:
        """The ring is readable: the running fdatasync is over. Release what it covered, and
        start the next one for the writes pending meanwhile. (The eventfd is read here whoever
        reaped the sync: a thread that needed it reaps it itself, and the loop is still woken.)"""
        if self._ring is not None:
            self._ring.clear()
        error: StorageFailed | None = None
        try:
            if not self.log.sync_reap():
                return  # woken early: still running
        except StorageFailed as e:
            error = e
        covered, self._covered = self._covered, []
        if error is None and covered:
            try:  # reaped by a thread that waited for it: this says how it ended (no sync if it covered them)
                self.log.sync_upto(max(ticket for ticket, _ in covered))
            except StorageFailed as e:
                error = e
        self._release(covered, error)
        if self._pending and not self._scheduled:  # after this poll's requests, as from `after`
            self._scheduled = True
            self._loop.call_soon(self._flush)

    @staticmethod
    def _release(pending: list[tuple[int, Callable[[StorageFailed | None], None]]],
                 error: StorageFailed | None) -> None:
        for _ticket, then in pending:
            then(error)
