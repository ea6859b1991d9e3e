"""The data file: an append-only log of checksummed records (server.md §2–§4).

The storage layer holds opaque payloads: the engine serializes each write statement or block
(with its Idempotency-Key answer) to one payload, and each compaction's image to a snapshot
payload. This module frames, checksums, appends, syncs, recovers and compacts them.

File format (all integers little-endian)
----------------------------------------

    file header, 16 bytes, at offset 0
      0   8  magic       b"FENECLOG"
      8   4  version     1
      12  4  header_crc  CRC-32 (zlib) of bytes 0..12

    then records, back to back; each is
      0   4  size_word   bits 0..30: payload length n (< 2 GiB);
                         bit 31: 1 = a snapshot record, 0 = a write record
      4   4  data_crc    CRC-32 of the n payload bytes
      8   4  head_crc    CRC-32 of bytes 0..8 of this record (size_word and data_crc)
      12  n  payload     opaque bytes from the engine

    then, optionally, zeros to the end of the file: space preallocated for the next records
    (see Preallocation below). A file without them (every file before preallocation, and every
    file closed cleanly) is the same format: version 1 covers both.

    A snapshot record may only be the first record of a file (compaction writes it there);
    every write record after it applies on top of it, in file order.

Zeros are never a record. A record's header can never be 12 zero bytes: with size_word and
data_crc zero, head_crc must be CRC-32 of 8 zero bytes, which is not zero (0x6522DF69). An
empty payload's record (n = 0, data_crc = CRC-32 of nothing = 0) starts with 8 zero bytes but
its head_crc is that nonzero value. So at a record boundary, 12 zero bytes mean "no record was
ever written here": the end of the log.

Validity rule. A record is valid when its 12 header bytes are all in the file and head_crc
matches them, its n payload bytes are all in the file, and data_crc matches them. The header
carries its own check so that a damaged length is caught before it is believed: a flipped
length can never pass for "a record cut short by the end of the file".

Recovery (`Log.open`, code in `format.scan`). Check the file header (an empty file, or one
holding only a prefix of the header, is a crash during creation: it is rewritten). Then read
records from offset 16 while they are valid. At the first invalid record, at offset P:

    0. every byte from P to the end of the file is zero                  -> the end: the
       preallocated space, kept as it is (not a torn tail, nothing logged)
    1. fewer than 12 bytes are left                                    -> torn tail
    2. the header is valid and the payload runs past the end of the file -> torn tail
    3. a check fails (header or payload): look for a valid record starting at any later
       offset (after the claimed end when the header is valid, else from P + 1; runs of
       zeros are skipped fast, as no record starts inside one).
       None found -> torn tail: only the remains of the writes in flight at the crash
       (a half-written header, a header whose payload is still zeros, zeros then garbage,
       a payload cut by a power loss) follow P. One found -> CORRUPT at P: a valid record
       would be dropped.

A torn tail is cut off the file (truncate to P, fsync) and logged on the "fenecdb.storage"
logger, so the next append does not land after garbage (the preallocated zeros after it go
too; the next append preallocates again). CORRUPT refuses to open: `CorruptLog`
names the offset P, and nothing is dropped. A damaged *last* record is indistinguishable from
a torn write and is cut like one; damage to any record with a valid record after it is caught.
(After a power loss under `--sync <ms>` or `off`, the OS may have written a later block of the
unsynced tail but not an earlier one; that also reads as CORRUPT, on purpose: the file is
refused rather than a valid record silently dropped.)

Appends and durability: `append` writes the framed record to the OS file at once (one
pwritev) and returns a ticket, the record's number since open; `wait_durable(ticket)`
applies the `--sync` policy (group commit, the syncer and the HTTP loop's one fdatasync a
turn are described in `sync.py`). The log's syncs are fdatasync (fsync where the OS lacks
it): only data changed, or the size, which fdatasync covers too; a created or renamed file
gets an fsync and its directory one, as before. A failed write or sync marks the log
failed: that call and every later append raise `StorageFailed`, and a failed sync is never
retried. `synced`, where set (a primary's replication feed), is called each time an fsync
covers more records, on the thread that synced and holding the log's lock: it must only
note it (the feed wakes its streams, replication/feed.py).

Preallocation: the file is grown ahead of the appends in steps of `PREALLOCATE` (4 MiB) with
posix_fallocate, so an append writes inside the file's size and its fdatasync flushes the
data blocks alone (plus, on ext4, the extent's written flag). The space reads as zeros, which
recovery takes for the log's end (rule 0); a record torn inside it (a header, then zeros or
part of the payload) is a torn tail as anywhere. Where the OS or file system cannot
preallocate (or the disk is full), the log logs it once and appends grow the file as they
always did. A clean close gives the zeros back (truncate to the last record): a closed file
is its records alone, so a copy carries no megabytes of zeros and an older server reads it;
a crash leaves them, and they read as the end. A backup (`Database.backup`) is a snapshot
written afresh, never a copy of the file, so it holds no zeros either.

There is no in-process write buffer (server.md §3 allows one of about 1 MB): handing each
record to the OS costs about 2.2 µs per append with the syscall (measured, 90-byte payload),
cheap enough for the claim path, and it means a process kill loses nothing acknowledged
under any policy, `off` included. An exclusive flock on the open file keeps a second server
off it. Every OS call goes through the file layer (`files.py`) so tests can inject faults.

Compaction (`compaction.py`): a side file `<path>.compact` gets a file header, the snapshot
record and a copy of every record appended since the snapshot's mark; it is preallocated a
step past its end like the live file, fsynced, renamed over the file and the directory
fsynced. Until the rename the old file is whole; after it the
new one is. A side file found at open, once the file's lock is held (a server refused because
another holds it touches nothing), is the remnant of an interrupted compaction: removed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from ..errors import FenecError
from . import compaction
from .failure import CorruptLog, StorageFailed
from .files import OsFiles
from .format import FILE_HEADER_SIZE, RECORD_HEADER_SIZE, file_header, record_header, scan
from .kernel_aio import Ring
from .sync import Policy, Syncer, parse_policy

log = logging.getLogger("fenecdb.storage")

_READ_CHUNK = 1 << 24
# The file grows in steps of this many bytes, reserved ahead of the appends (posix_fallocate):
# an append then neither grows the file nor makes its fdatasync write the inode. Measured here
# (ext4 on a virtual disk, 120-byte records): fdatasync after an append that grew the file
# 220 us, into a preallocated region 140-170 us.
PREALLOCATE = 4 << 20


def _why(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} (errno {error.errno})"
    return str(error) or type(error).__name__


def _unknown(why: str) -> str:
    """The 500 of a write appended but never covered by an fsync (server README, Durability)."""
    return (f"the disk refused a write ({why}): this write's outcome is unknown (it was applied in "
            "memory, and after a restart the file may or may not hold it); every later write is "
            "refused until restart")


class Log:
    """One data file. `append` is called under the engine's write lock; everything else not."""

    def __init__(self, path: str | os.PathLike[str], *, sync: object = 250, files: OsFiles | None = None,
                 preallocate: int = PREALLOCATE) -> None:
        self.path = os.fspath(path)
        self.side_path = self.path + ".compact"
        self.policy: Policy = parse_policy(sync)
        self.files = files if files is not None else OsFiles()
        self._fd = -1
        self._end = 0  # bytes of records in the file: the next record goes here
        self._allocated = 0  # the file's size: `_end` plus the preallocated zeros after it
        self.preallocate = preallocate  # 0: none (also once the OS refused to)
        self._local = threading.local()  # `.slot`: a `Deferred` collecting this thread's tickets
        self._snapshot_end = 0
        self._records = 0  # write records in the file after its snapshot
        self._lock = threading.Lock()  # the log's own lock: appends vs. compaction's swap
        # group commit: _syncing, _durable, _failed. The hot paths take `_cond_lock` itself (`with` on the
        # Condition runs its __enter__ in the interpreter; on the lock it is a C call): the same lock
        self._cond_lock = threading.RLock()
        self._cond = threading.Condition(self._cond_lock)
        self._appended = 0  # records appended since open; a ticket is one of these
        self._durable = 0  # records appended since open that an fsync has covered
        self._syncing = False
        self._ring: Ring | None = None  # the ring of a sync `sync_begin` started, till reaped
        self._ring_target = 0
        self._async_ring: Ring | None = None  # made by `datasync_ring`, closed by `close`
        self._failure: str | None = None
        self._closed = False
        self._compacting = False
        self._syncer: Syncer | None = None
        self.fsyncs = 0  # fsyncs of the live file since open
        self.synced: Callable[[], None] | None = None  # told when `durable` grows (the module's docstring)

    # -- open -------------------------------------------------------------------------------

    def open(self) -> tuple[bytes | None, list[bytes]]:
        """Open or create the file; return (snapshot payload or None, write payloads in order)."""
        files = self.files
        created = not files.exists(self.path)
        fd = files.open(self.path)
        try:
            try:
                files.lock(fd)
            except BlockingIOError:
                raise FenecError("io", f"{self.path} is in use by another process") from None
            # Only now, the file's lock held: the side file of a server still running is its
            # compaction in progress, never a remnant; nothing is touched before the lock.
            if files.exists(self.side_path):
                log.warning("removing %s: the remnant of an interrupted compaction", self.side_path)
                files.remove(self.side_path)
            size = files.size(fd)
            data = self._read_all(fd, size)
            found = scan(data)
            del data
            if found.end == 0:  # new, or a creation cut short
                files.truncate(fd, 0)
                files.writev(fd, [file_header()], 0)
                files.fsync(fd)
                if created or size:
                    files.fsync_dir(self.path)
                found.end = found.snapshot_end = FILE_HEADER_SIZE
            elif found.torn is not None:
                files.truncate(fd, found.end)
                files.fsync(fd)
                log.warning(
                    "%s: cut a torn tail of %d bytes at offset %d (%s): a record cut short by a crash",
                    self.path, size - found.end, found.end, found.torn,
                )
                size = found.end
        except BaseException:
            files.close(fd)
            raise
        self._fd = fd
        self._end = found.end
        self._allocated = max(size, found.end)  # zeros after the end: preallocated, kept
        self._snapshot_end = found.snapshot_end
        self._records = len(found.records)
        if isinstance(self.policy, int):
            self._syncer = Syncer(self.policy, lambda: self.dirty, self._sync_background)
        return found.snapshot, found.records

    def _read_all(self, fd: int, size: int) -> bytes:
        parts = []
        offset = 0
        while offset < size:
            chunk = self.files.read(fd, min(_READ_CHUNK, size - offset), offset)
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
        return b"".join(parts)

    # -- append and sync ---------------------------------------------------------------------

    def append(self, payload: bytes) -> int:
        """Frame and write one record; return its ticket. Raises StorageFailed."""
        head = record_header(payload)
        with self._lock:
            if self._failure is not None:
                raise StorageFailed(f"writes are refused after a storage error: {self._failure}")
            if self._closed:
                raise StorageFailed("writes are refused: the data file is closed")
            want = len(head) + len(payload)
            offset = self._end
            if offset + want > self._allocated and self.preallocate:
                self._grow(offset + want)
            try:
                done = self.files.writev(self._fd, [head, payload], offset)
                while done < want:  # a short write: finish it, or fail on the next call
                    rest = (head + payload)[done:]
                    n = self.files.writev(self._fd, [rest], offset + done)
                    if n <= 0:
                        raise OSError(0, "the disk accepted no more bytes")
                    done += n
            except OSError as error:
                raise self._fail(f"could not write the log: {_why(error)}") from error
            self._end = offset + want
            if self._end > self._allocated:
                self._allocated = self._end
            self._records += 1
            self._appended += 1
            return self._appended

    def _grow(self, need: int) -> None:
        """Under `_lock`: reserve the file up to `need` and a step beyond. If the OS cannot
        (no support, or a full disk), go on without: the write itself then grows the file,
        and fails, as it always did, if the disk is full."""
        step = self.preallocate
        target = (need // step + 1) * step
        try:
            self.files.allocate(self._fd, self._allocated, target - self._allocated)
        except OSError as error:
            self.preallocate = 0
            log.warning("%s: not preallocating the file any more (%s): each append grows it",
                        self.path, _why(error))
            return
        self._allocated = target

    def _fail(self, why: str, outcome: str = "this write was not applied") -> StorageFailed:
        with self._cond:
            if self._failure is None:
                self._failure = why
                log.error("sync error: %s; every later write is refused until restart", why)
            self._cond.notify_all()
        return StorageFailed(f"the disk refused a write ({why}): {outcome}; "
                             "every later write is refused until restart")

    @property
    def failed(self) -> bool:
        """True once the disk refused a write or an fsync."""
        return self._failure is not None

    @property
    def failure(self) -> str | None:
        """Why the log failed (the first refusal), or None."""
        return self._failure

    @property
    def appended(self) -> int:
        """The ticket of the last record appended (0: none since open)."""
        return self._appended

    @property
    def dirty(self) -> bool:
        """Some appended record is not yet covered by an fsync."""
        return self._appended > self._durable

    def wait_durable(self, ticket: int) -> None:
        """Return once `ticket` is as durable as the policy promises (see `sync.py`); inside
        `deferred()` on this thread, note the ticket for the caller to make durable instead."""
        if self.policy != "always":
            return
        slot = getattr(self._local, "slot", None)
        if slot is not None:
            if ticket > slot.ticket:
                slot.ticket = ticket
            return
        self._sync_upto(ticket)

    def deferred(self, owner: int) -> Deferred:
        """A scope on the calling thread in which `wait_durable` does not wait but notes the
        ticket (`.ticket`, 0 if none): the caller then owes `sync_upto(ticket)` before it
        says the write happened. The server's loop uses it to share one fdatasync among
        every write of its turn (`http/durable.py`, the table in `sync.py`).

        Only on the thread `owner` (a `threading.get_ident()`), the one that pays what it owes:
        entered on any other thread the scope defers nothing, and a write there waits for its
        own sync before the scope ends. So a ticket is never noted where no one will sync it (a
        request run on a worker thread, whose caller would drop it: an answer with no sync)."""
        return Deferred(self._local, threading.get_ident() == owner)

    def sync_upto(self, ticket: int) -> None:
        """Make every record up to `ticket` durable (group commit, as `wait_durable` does under
        `always`, whatever the policy). Raises StorageFailed."""
        self._sync_upto(ticket)

    def _sync_upto(self, ticket: int) -> None:
        with self._cond_lock:
            while self._durable < ticket:
                if self._failure is not None:
                    raise StorageFailed(_unknown(self._failure))
                if self._syncing:
                    self._await_sync()
                    continue
                self._lead_sync()

    def _await_sync(self) -> None:
        """Holding `_cond`, with a sync running: wait for it. One started by `sync_begin` is
        reaped here (its loop may be this very thread), else another thread's ends it."""
        if self._ring is not None:
            self._finish_ring(self._ring.reap(block=True))
        else:
            self._cond.wait()

    def datasync_ring(self) -> Ring | None:
        """A ring for `sync_begin` on this file (made once, closed with the log), or None where
        fdatasyncs cannot run async here: the caller syncs in place (`sync_upto`)."""
        with self._cond:
            if self._async_ring is None and self._fd >= 0 and self._failure is None and not self._syncing:
                self._async_ring = self.files.datasync_ring(self._fd)
                if self._async_ring is None:
                    log.info("%s: each fdatasync runs in place (no sync thread or kernel AIO here)", self.path)
            return self._async_ring

    def sync_begin(self, ring: Ring) -> bool:
        """Start an fdatasync covering every record appended so far, without waiting for it
        (`sync_thread.py`, `kernel_aio.py`): the caller watches `ring` and calls `sync_reap`. False
        if there is nothing to start: nothing dirty, or a sync is already running. The same
        leader step as `_lead_sync`; raises StorageFailed as it does."""
        with self._cond_lock:
            if self._failure is not None:
                raise StorageFailed(_unknown(self._failure))
            if self._syncing or self._durable >= self._appended or self._fd < 0:
                return False
            try:
                ring.submit(self._fd)
            except OSError as error:  # a disk error (the ring itself was tried when it was made)
                self._synced(0, f"fsync failed: {_why(error)}")
            self._syncing = True
            self._ring = ring
            self._ring_target = self._appended  # every record counted here is in the OS file
            return True

    def sync_reap(self) -> bool:
        """After `sync_begin`, once its ring is readable: True if the fdatasync is over (then
        `durable` and `failure` tell its outcome), False if it is still running."""
        with self._cond_lock:
            ring = self._ring
            if ring is None:
                return True  # reaped already (by a thread that waited for it)
            result = ring.reap(block=False)
            if result is None:
                return False
            self._finish_ring(result)
            return True

    def _finish_ring(self, result: int | None) -> None:
        """Holding `_cond`: the outcome of the fdatasync `sync_begin` started (0, or -errno)."""
        self._ring = None
        self._syncing = False
        why = f"fsync failed: {os.strerror(-result)} (errno {-result})" if result else None
        self._synced(self._ring_target, why)

    def _synced(self, target: int, why: str | None) -> None:
        """Holding `_cond`, a sync over: every record up to `target` durable, or (`why`) the
        log failed, the waiters told, and StorageFailed raised."""
        if why is not None:
            if self._failure is None:
                self._failure = why  # never retried: the OS may have dropped the dirty pages
                log.error("sync error: %s; every later write is refused until restart", why)
            self._cond.notify_all()
            raise StorageFailed(_unknown(why))
        if target:
            self.fsyncs += 1
            if target > self._durable:
                self._durable = target
                if self.synced is not None:
                    self.synced()
        self._cond.notify_all()

    @property
    def durable(self) -> int:
        """The ticket of the last record an fsync has covered."""
        return self._durable

    def _lead_sync(self) -> None:
        """One group-commit fsync; called holding `_cond`, releases it around the fsync."""
        self._syncing = True
        target = self._appended  # every record counted here is already in the OS file
        fd = self._fd
        self._cond.release()
        error: OSError | None = None
        try:
            self.files.datasync(fd)  # only data changed, or the size, which fdatasync covers
        except OSError as e:
            error = e
        finally:
            self._cond.acquire()
            self._syncing = False
        self._synced(target, None if error is None else f"fsync failed: {_why(error)}")

    def _sync_background(self) -> None:
        try:
            self._sync_upto(self._appended)
        except StorageFailed:
            pass  # already logged and recorded by the leader step

    def sync(self) -> bool:
        """fsync now if anything is dirty (shutdown, tests); return whether it was dirty."""
        if not self.dirty or self._failure is not None:
            return False
        self._sync_upto(self._appended)
        return True

    # -- compaction ------------------------------------------------------------------------

    def compaction_start(self) -> tuple[int, int]:
        """Under the engine's write lock: the position the snapshot being taken stands at."""
        with self._lock:
            if self._compacting:
                raise FenecError("busy", "a compaction is already running")
            if self._failure is not None:
                raise StorageFailed(f"compaction refused after a storage error: {self._failure}")
            self._compacting = True
            return (self._end, self._records)

    def compaction_cancel(self) -> None:
        """Forget a `compaction_start` whose snapshot could not be made."""
        with self._lock:
            self._compacting = False

    def compaction_finish(self, snapshot: bytes | list[bytes], mark: tuple[int, int]) -> dict[str, int]:
        """Write the side file, swap it in; return sizes and the time the log lock was held.
        `snapshot`: the payload, whole or in the parts that make it (written without a join)."""
        try:
            return compaction.run(self, snapshot, mark)
        finally:
            with self._lock:
                self._compacting = False

    # -- the rest ----------------------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        return {
            "file_bytes": self._end,
            "records": self._records,
            "bytes_since_snapshot": self._end - self._snapshot_end,
            "snapshot_bytes": self._snapshot_end - FILE_HEADER_SIZE - (RECORD_HEADER_SIZE if self._snapshot_end > FILE_HEADER_SIZE else 0),
            "fsyncs": self.fsyncs,
            "appended": self._appended,
            "failed": self.failed,
        }

    def close(self) -> bool:
        """Stop the syncer, fsync if dirty (and not failed), close.

        Return whether it was dirty: True when records were waiting for an fsync. If the log
        had already failed, that fsync is not tried (never retried) and those records are at
        the OS's mercy: callers check `failed` before saying the writes reached the disk.
        A failure of this last fsync is raised (StorageFailed), the file closed all the same."""
        if self._syncer is not None:
            self._syncer.stop()
            self._syncer = None
        with self._lock:
            if self._closed or self._fd < 0:
                return False
            self._closed = True
            with self._cond:
                while self._syncing:
                    try:
                        self._await_sync()
                    except StorageFailed:
                        pass  # recorded: the fsync below is not tried
            dirty = self.dirty
            try:
                if dirty and self._failure is None:
                    with self._cond:
                        self._lead_sync()
                if self._failure is None and self._allocated > self._end:
                    self._trim()
            finally:
                self.files.close(self._fd)
                self._fd = -1
                if self._async_ring is not None:
                    self._async_ring.close()
                    self._async_ring = None
            return dirty

    def _trim(self) -> None:
        """At a clean close, give back the preallocated zeros: a closed file is its records
        alone, so a copy of it (or an older server opening it) carries no megabytes of zeros;
        the next open preallocates again, one call. Not synced: if the cut does not survive a
        power loss, the zeros read as the end of the log all the same."""
        try:
            self.files.truncate(self._fd, self._end)
            self._allocated = self._end
        except OSError as error:
            log.warning("%s: could not trim the preallocated tail (%s); it reads as the log's end",
                        self.path, _why(error))

    def __repr__(self) -> str:
        return f"Log({self.path!r}, sync={self.policy!r}, bytes={self._end})"

    # compaction.py reads and swaps these under `_lock` and `_cond`
    def _swap(self, fd: int, end: int, snapshot_end: int, records: int, allocated: int) -> None:
        old = self._fd
        self._fd = fd
        self._end = end
        self._allocated = max(allocated, end)
        self._snapshot_end = snapshot_end
        self._records = records
        self._durable = self._appended  # the new file was fsynced holding every record
        self.files.close(old)
        if self.synced is not None:
            self.synced()


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


__all__ = ["Log", "CorruptLog", "StorageFailed", "Deferred"]
