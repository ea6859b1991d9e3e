"""A log's tickets and their durability: group commit, the loop's fdatasync, the log's failure.

`Log.append` (log.py) hands each record to the OS and counts it here (`appended`): its ticket.
This part makes tickets durable as the `--sync` policy promises (the table and group commit's
steps are in `sync.py`) and remembers the first refusal of the disk (`failure`), after which
the log takes no more writes. The file format and what recovery does with the records an
fdatasync did not cover are stated once, in log.py's docstring.

    appended   records handed to the OS since open; a ticket is one of these
    durable    records an fdatasync (or fsync) has covered: never more than `appended`
    syncing    one fdatasync is running: in a leader thread (`lead`), or on a ring started by
               `begin` and reaped by `reap` or by a waiter
    failure    the first refusal: set once, never cleared; a failed sync is never retried

Every field but `appended` (written under the log's lock by `append`) changes under `cond`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from .failure import StorageFailed, reason
from .files import OsFiles
from .kernel_aio import Ring
from .sync import Policy

log = logging.getLogger("fenecdb.storage")


def _unknown(why: str) -> str:
    """The 500 of a write appended but never covered by an fsync (server README, Durability)."""
    return (f"the disk refused a write ({why}): this write's outcome is unknown (it was applied in "
            "memory, and after a restart the file may or may not hold it); every later write is "
            "refused until restart")


class GroupCommit:
    """The sync side of one log (`Log.commit`): tickets, fdatasyncs, the failure."""

    def __init__(self, files: OsFiles, path: str, policy: Policy) -> None:
        self.files = files
        self.path = path
        self.policy = policy
        self.fd = -1  # the live file's; compaction's swap points it at the new file
        self.local = threading.local()  # `.slot`: a `Deferred` collecting this thread's tickets
        # The hot paths take `cond_lock` itself, the lock the Condition wraps: on the lock `with`
        # is a C call, on the Condition an interpreted __enter__.
        self.cond_lock = threading.RLock()
        self.cond = threading.Condition(self.cond_lock)
        self.appended = 0
        self.durable = 0
        self.syncing = False
        self.failure: str | None = None
        self.fsyncs = 0  # fsyncs of the live file since open
        self.synced: Callable[[], None] | None = None  # told when `durable` grows (log.py's docstring)
        self._ring: Ring | None = None  # the ring of a sync `begin` started, till reaped
        self._ring_target = 0
        self._async_ring: Ring | None = None  # made by `datasync_ring`, closed by `close`

    def dirty(self) -> bool:
        """Some appended record is not yet covered by an fsync."""
        return self.appended > self.durable

    def wait(self, ticket: int) -> None:
        """`Log.wait_durable`: under `always`, note the ticket in this thread's `Deferred` scope,
        or else make it durable now."""
        if self.policy != "always":
            return
        slot = getattr(self.local, "slot", None)
        if slot is not None:
            if ticket > slot.ticket:
                slot.ticket = ticket
            return
        self.upto(ticket)

    def deferred(self, owner: int) -> Deferred:
        """`Log.deferred`: a scope noting tickets, active on the thread `owner` alone."""
        return Deferred(self.local, threading.get_ident() == owner)

    def upto(self, ticket: int) -> None:
        """Make every record up to `ticket` durable: wait for the running fdatasync, or lead the
        next one. Raises StorageFailed."""
        with self.cond_lock:
            while self.durable < ticket:
                if self.failure is not None:
                    raise StorageFailed(_unknown(self.failure))
                if self.syncing:
                    self.await_sync()
                    continue
                self.lead()

    def await_sync(self) -> None:
        """Holding `cond`, with a sync running: wait for it. One started by `begin` is reaped
        here (its loop may be this very thread), else another thread's ends it."""
        if self._ring is not None:
            self._finish_ring(self._ring.reap(block=True))
        else:
            self.cond.wait()

    def lead(self) -> None:
        """One group-commit fdatasync; called holding `cond`, releases it around the call."""
        self.syncing = True
        target = self.appended  # every record counted here is already in the OS file
        fd = self.fd
        self.cond.release()
        error: OSError | None = None
        try:
            self.files.datasync(fd)  # only data changed, or the size, which fdatasync covers
        except OSError as e:
            error = e
        finally:
            self.cond.acquire()
            self.syncing = False
        self._synced(target, None if error is None else f"fsync failed: {reason(error)}")

    def datasync_ring(self) -> Ring | None:
        """`Log.datasync_ring`: made once, closed with the log; None to sync in place."""
        with self.cond:
            if self._async_ring is None and self.fd >= 0 and self.failure is None and not self.syncing:
                self._async_ring = self.files.datasync_ring(self.fd)
                if self._async_ring is None:
                    log.info("%s: each fdatasync runs in place (no sync thread or kernel AIO here)", self.path)
            return self._async_ring

    def begin(self, ring: Ring) -> bool:
        """`Log.sync_begin`: the leader step of `lead`, its fdatasync started on `ring`."""
        with self.cond_lock:
            if self.failure is not None:
                raise StorageFailed(_unknown(self.failure))
            if self.syncing or self.durable >= self.appended or self.fd < 0:
                return False
            try:
                ring.submit(self.fd)
            except OSError as error:  # a disk error (the ring itself was tried when it was made)
                self._synced(0, f"fsync failed: {reason(error)}")
            self.syncing = True
            self._ring = ring
            self._ring_target = self.appended  # every record counted here is in the OS file
            return True

    def reap(self) -> bool:
        """`Log.sync_reap`: True once the fdatasync `begin` started is over."""
        with self.cond_lock:
            ring = self._ring
            if ring is None:
                return True  # reaped already (by a thread that waited for it)
            result = ring.reap(block=False)
            if result is None:
                return False
            self._finish_ring(result)
            return True

    def _finish_ring(self, result: int | None) -> None:
        """Holding `cond`: the outcome of the fdatasync `begin` started (0, or -errno)."""
        self._ring = None
        self.syncing = False
        why = f"fsync failed: {os.strerror(-result)} (errno {-result})" if result else None
        self._synced(self._ring_target, why)

    def _synced(self, target: int, why: str | None) -> None:
        """Holding `cond`, a sync over: every record up to `target` durable, or (`why`) the
        log failed, the waiters told, and StorageFailed raised."""
        if why is not None:
            if self.failure is None:
                self.failure = why  # never retried: the OS may have dropped the dirty pages
                log.error("sync error: %s; every later write is refused until restart", why)
            self.cond.notify_all()
            raise StorageFailed(_unknown(why))
        if target:
            self.fsyncs += 1
            if target > self.durable:
                self.durable = target
                if self.synced is not None:
                    self.synced()
        self.cond.notify_all()

    def fail(self, why: str, outcome: str = "this write was not applied") -> StorageFailed:
        """A write the disk refused: the log failed (the first refusal kept), the waiters told;
        answer the error for the caller to raise."""
        with self.cond:
            if self.failure is None:
                self.failure = why
                log.error("sync error: %s; every later write is refused until restart", why)
            self.cond.notify_all()
        return StorageFailed(f"the disk refused a write ({why}): {outcome}; "
                             "every later write is refused until restart")

    def in_background(self) -> None:
        """The periodic syncer's step (`sync.Syncer`)."""
        try:
            self.upto(self.appended)
        except StorageFailed:
            pass  # already logged and recorded by the leader step

    def switch(self, fd: int) -> None:
        """Holding `cond`, compaction's swap: appends go to `fd`, fsynced holding every record."""
        self.fd = fd
        self.durable = self.appended
        if self.synced is not None:
            self.synced()

    def close(self) -> bool:
        """At the log's close (under its lock): wait out a running fdatasync, then one more if
        records are dirty and the log has not failed, and let the ring go. Return whether
        records were dirty; a failure of that last fdatasync is raised (StorageFailed)."""
        try:
            with self.cond:
                while self.syncing:
                    try:
                        self.await_sync()
                    except StorageFailed:
                        pass  # recorded: the fdatasync below is not tried
                dirty = self.dirty()
                if dirty and self.failure is None:
                    self.lead()
            return dirty
        finally:
            if self._async_ring is not None:
                self._async_ring.close()
                self._async_ring = None


class Deferred:
    """`Log.deferred()`: while entered, the thread's `wait_durable` calls note their ticket here
    (when `active`: on its owner's thread; else it stands aside and they wait)."""

    __slots__ = ("ticket", "_local", "_outer", "_active")

    def __init__(self, local: threading.local, active: bool) -> None:
        self.ticket = 0
        self._local = local
        self._outer: Deferred | None = None
        self._active = active

    def __enter__(self) -> Deferred:
        if self._active:
            self._outer = getattr(self._local, "slot", None)
            self._local.slot = self
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._active:
            return
        self._local.slot = self._outer
        if self._outer is not None and self.ticket > self._outer.ticket:
            self._outer.ticket = self.ticket
