"""Under `--sync always`: one fdatasync per loop turn, shared by every write of that turn.

Redis's pattern for `appendfsync always`: a write runs on the loop as any request does (the
engine appends its record to the OS file at once, `storage/log.py`), but its answer is parked;
the first write of a turn schedules a flush with `call_soon`, which runs after every callback
already ready, i.e. once this turn's requests have all run; the flush makes every record
appended so far durable with one `Log.sync_upto` (group commit's fdatasync) and then releases
every parked answer. Requests that arrive while the fdatasync runs wait in the kernel's socket
buffers and make up the next turn's batch, so the busier the server, the more writes share one
fdatasync.

    turn T     request a: execute, append record 41, park     (flush scheduled)
               request b: execute, append record 42, park
    turn T+1   flush: fdatasync (covers 41 and 42), release a and b; on the short way
               (http/protocol.py) their answers are written right there
    turn T+2   a request on the ASGI path sends its answer (its task wakes)

The `Log.deferred()` scope is what keeps `Database.execute` from waiting itself: inside it, on
the loop thread, `wait_durable` notes the record's ticket instead of blocking, and `App.run`
(app.py) owes that ticket a flush before it answers. An Idempotency-Key replay waits for the
flush too, as the write it answers for may be in this very turn. A read is not parked: it may
see a write whose fdatasync has not finished (as it could before, from another thread). A write
that runs off the loop (a large request in a worker thread, the sweeper, a compaction) waits in
its own thread by group commit, as the in-process `Database` always does.

Why not a thread: measured over HTTP (bench/durable_syscalls.py, strace counts; bench/README.md),
the former hand-off of every write to a 4-thread pool cost 31-37 futex calls a write with 8
writers and a third `write` (the pool waking the loop), and only 1.2-1.3 writes shared an
fsync: the threads fought over the GIL while the server was CPU-bound. The flush on the loop
costs no futex and no wake-up. A single syncer thread (prototyped, not kept: the loop kicks it
once a turn, it hands completions back in one `call_soon_threadsafe` a batch) cost 8 futex
calls and 3 writes a write with 1 writer, 2.5 and 2.3 with 8, for the same writes per sync;
writes/s were lower with 1 writer and level with 8 within the shared machine's noise. The loop
does sit idle during the fdatasync (0.13-0.17 ms on this machine's virtual disk, about one
request's CPU); on a disk whose flush takes milliseconds a syncer thread would overlap it with
the next turn's requests and take more writers a second.

Tried again once the short way wrote these answers from the flush (issue 20, same sitting, 8 writers of
6 000 puts, `bench/durable_syscalls.py`): a flush of two or more writes handed to a one-thread syncer while
the loop went on, a lone write synced on the loop as here. More writes shared a sync (4.7-5.0 against
4.2-4.3) but fewer writes a second (5 859-6 583 against 7 235-7 349): the syncer needs the GIL back to
say it is done, and the busy loop gives it up only at the interpreter's 5 ms switch interval.

A failed fdatasync fails every write parked on it with the log's "outcome unknown" 500, and the
log refuses every later write (`Log._lead_sync`), as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..storage import StorageFailed


class TurnSync:
    """The parked answers of one loop turn's writes and the flush that releases them."""

    __slots__ = ("log", "_loop", "_parked", "_upto", "flushes")

    def __init__(self, log: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.log = log  # a storage.Log under --sync always
        self._loop = loop
        self._parked: list[Callable[[StorageFailed | None], None]] = []
        self._upto = 0  # the highest ticket parked since the last flush
        self.flushes = 0  # flushes run (each one fdatasync at most): tests count them

    def after(self, ticket: int, then: Callable[[StorageFailed | None], None]) -> None:
        """Call `then(None)` once `ticket` is durable, `then(error)` if its fdatasync failed: from
        the flush itself, so the short way's answer is written in the flush's turn (no task)."""
        if not self._parked:
            self._loop.call_soon(self._flush)
        self._parked.append(then)
        if ticket > self._upto:
            self._upto = ticket

    def durable(self, ticket: int) -> asyncio.Future[None]:
        """A future done once `ticket` is durable (or failed with StorageFailed): the ASGI path's."""
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

    def _flush(self) -> None:
        parked, self._parked = self._parked, []
        upto, self._upto = self._upto, 0
        self.flushes += 1
        error: StorageFailed | None = None
        try:
            self.log.sync_upto(upto)  # nothing to do if a thread's group commit covered it
        except StorageFailed as e:
            error = e
        for then in parked:
            then(error)
