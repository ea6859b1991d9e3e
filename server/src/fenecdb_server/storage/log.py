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

Recovery (`Log.open`, code in `recovery.py` and `format.scan`). Check the file header (an empty file, or one
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
turn are described in `sync.py`; the tickets' side is `group_commit.py`). The log's syncs are fdatasync (fsync where the OS lacks
it): only data changed, or the size, which fdatasync covers too; a created or renamed file
gets an fsync and its directory one, as before. A failed write or sync marks the log
failed: that call and every later append raise `StorageFailed`, and a failed sync is never
retried. `synced`, where set (a primary's replication feed), is called each time an fsync
covers more records, on the thread that synced and holding the log's lock: it must only
note it (the feed wakes its streams, replication/feed.py).

Preallocation: the file is grown ahead of the appends in steps of `PREALLOCATE` (4 MiB,
`preallocation.py`) with posix_fallocate, so an append writes inside the file's size and its fdatasync flushes the
data blocks alone (plus, on ext4, the extent's written flag). The space reads as zeros, which
recovery takes for the log's end (rule 0); a record torn inside it (a header, then zeros or
part of the payload) is a torn tail as anywhere. Where the OS or file system cannot
preallocate (or the disk is full), the log logs it once and appends grow the file as they
always did. A clean close gives the zeros back (truncate to the last record): a closed file
is its records alone, so a copy carries no megabytes of zeros and an older server reads it;
a crash leaves them, and they read as the end. A backup (`Database.backup`) is a snapshot
written afresh, never a copy of the file, so it holds no zeros either.

There is no in-process write buffer (server.md §3 allows one of about 1 MB): handing each
record to the OS is one syscall an append, cheap beside the claim it records (bench/README.md,
"Numbers the code's comments used to carry"), and it means a process kill loses nothing acknowledged
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
from .failure import CorruptLog, StorageFailed, reason
from .files import OsFiles
from .format import FILE_HEADER_SIZE, RECORD_HEADER_SIZE, record_header
from .group_commit import Deferred, GroupCommit
from .kernel_aio import Ring
from .preallocation import PREALLOCATE, reserve
from .recovery import open_file
from .sync import Policy, Syncer, parse_policy

log = logging.getLogger("fenecdb.storage")


class Log:
    """One data file. `append` is called under the engine's write lock (a replica's `append_framed`
    under its database's own, database.py `Ahead`); everything else not.

    The Log holds where the records end and the file's space (`append`, preallocation,
    compaction's hand-over); `commit` (group_commit.py) holds the tickets and their syncs;
    `open` reads the file through recovery.py."""

    def __init__(self, path: str | os.PathLike[str], *, sync: object = 250, files: OsFiles | None = None,
                 preallocate: int = PREALLOCATE) -> None:
        self.path = os.fspath(path)
        self.side_path = self.path + ".compact"
        self.policy: Policy = parse_policy(sync)
        self.files = files if files is not None else OsFiles()
        self.commit = GroupCommit(self.files, self.path, self.policy)
        self._fd = -1
        self._end = 0  # bytes of records in the file: the next record goes here
        self._allocated = 0  # the file's size: `_end` plus the preallocated zeros after it
        self.preallocate = preallocate  # 0: none (also once the OS refused to)
        self._snapshot_end = 0
        self._records = 0  # write records in the file after its snapshot
        self.last_head = b""  # the header of the last record `append` wrote (the replication feed's frame)
        self._lock = threading.Lock()  # the log's own lock: appends vs. compaction's swap
        self._closed = False
        self._compacting = False
        self._syncer: Syncer | None = None

    # -- open -------------------------------------------------------------------------------

    def open(self) -> tuple[bytes | None, list[bytes]]:
        """Open or create the file; return (snapshot payload or None, write payloads in order)."""
        fd, found, size = open_file(self.files, self.path, self.side_path)
        self._fd = self.commit.fd = fd
        self._end = found.end
        self._allocated = max(size, found.end)  # zeros after the end: preallocated, kept
        self._snapshot_end = found.snapshot_end
        self._records = len(found.records)
        if isinstance(self.policy, int):
            self._syncer = Syncer(self.policy, self.commit.dirty, self.commit.in_background)
        return found.snapshot, found.records

    # -- append ------------------------------------------------------------------------------

    def append(self, payload: bytes) -> int:
        """Frame and write one record; return its ticket. Raises StorageFailed."""
        head = record_header(payload)
        with self._lock:
            self._write([head, payload], len(head) + len(payload), 1)
            self.last_head = head
            return self.commit.appended

    def append_framed(self, frames: bytes, records: int) -> int:
        """Write `records` whole records already framed with this format's header (a replica's
        block as its primary's stream carries it, each record checked by the follower), in one
        write; return the last one's ticket, each record's being one more than the one before's.
        Raises StorageFailed."""
        with self._lock:
            self._write([frames], len(frames), records)
            return self.commit.appended

    def _write(self, parts: list[bytes], want: int, records: int) -> None:
        """Under `_lock`: write `parts` (`want` bytes, `records` whole records) at the end."""
        commit = self.commit
        if commit.failure is not None:
            raise StorageFailed(f"writes are refused after a storage error: {commit.failure}")
        if self._closed:
            raise StorageFailed("writes are refused: the data file is closed")
        offset = self._end
        if offset + want > self._allocated and self.preallocate:
            self._grow(offset + want)
        try:
            done = self.files.writev(self._fd, parts, offset)
            while done < want:  # a short write: finish it, or fail on the next call
                rest = b"".join(parts)[done:]
                n = self.files.writev(self._fd, [rest], offset + done)
                if n <= 0:
                    raise OSError(0, "the disk accepted no more bytes")
                done += n
        except OSError as error:
            raise commit.fail(f"could not write the log: {reason(error)}") from error
        self._end = offset + want
        if self._end > self._allocated:
            self._allocated = self._end
        self._records += records
        commit.appended += records

    def _grow(self, need: int) -> None:
        """Under `_lock`: reserve the file up to `need` and a step beyond. If the OS cannot
        (no support, or a full disk), go on without: the write itself then grows the file,
        and fails, as it always did, if the disk is full."""
        try:
            self._allocated = reserve(self.files, self._fd, self._allocated, need, self.preallocate)
        except OSError as error:
            self.preallocate = 0
            log.warning("%s: not preallocating the file any more (%s): each append grows it",
                        self.path, reason(error))

    # -- durability: the tickets' side, `commit` (group_commit.py; the policies in sync.py) ------

    @property
    def failed(self) -> bool:
        """True once the disk refused a write or an fsync."""
        return self.commit.failure is not None

    @property
    def failure(self) -> str | None:
        """Why the log failed (the first refusal), or None."""
        return self.commit.failure

    @property
    def appended(self) -> int:
        """The ticket of the last record appended (0: none since open)."""
        return self.commit.appended

    @property
    def durable(self) -> int:
        """The ticket of the last record an fsync has covered."""
        return self.commit.durable

    @property
    def dirty(self) -> bool:
        """Some appended record is not yet covered by an fsync."""
        return self.commit.dirty()

    @property
    def fsyncs(self) -> int:
        """fsyncs of the live file since open."""
        return self.commit.fsyncs

    @property
    def synced(self) -> Callable[[], None] | None:
        """Told each time an fsync covers more records (the module's docstring)."""
        return self.commit.synced

    @synced.setter
    def synced(self, note: Callable[[], None] | None) -> None:
        self.commit.synced = note

    def wait_durable(self, ticket: int) -> None:
        """Return once `ticket` is as durable as the policy promises (see `sync.py`); inside
        `deferred()` on this thread, note the ticket for the caller to make durable instead."""
        self.commit.wait(ticket)

    def deferred(self, owner: int) -> Deferred:
        """A scope on the calling thread in which `wait_durable` does not wait but notes the
        ticket (`.ticket`, 0 if none): the caller then owes `sync_upto(ticket)` before it
        says the write happened. The server's loop uses it to share one fdatasync among
        every write of its turn (`http/durable.py`, the table in `sync.py`).

        Only on the thread `owner` (a `threading.get_ident()`), the one that pays what it owes:
        entered on any other thread the scope defers nothing, and a write there waits for its
        own sync before the scope ends. So a ticket is never noted where no one will sync it (a
        request run on a worker thread, whose caller would drop it: an answer with no sync)."""
        return self.commit.deferred(owner)

    def sync_upto(self, ticket: int) -> None:
        """Make every record up to `ticket` durable (group commit, as `wait_durable` does under
        `always`, whatever the policy). Raises StorageFailed."""
        self.commit.upto(ticket)

    def datasync_ring(self) -> Ring | None:
        """A ring for `sync_begin` on this file (made once, closed with the log), or None where
        fdatasyncs cannot run async here: the caller syncs in place (`sync_upto`)."""
        return self.commit.datasync_ring()

    def sync_begin(self, ring: Ring) -> bool:
        """Start an fdatasync covering every record appended so far, without waiting for it
        (`sync_thread.py`, `kernel_aio.py`): the caller watches `ring` and calls `sync_reap`. False
        if there is nothing to start: nothing dirty, or a sync is already running. The same
        leader step as `sync_upto`'s; raises StorageFailed as it does."""
        return self.commit.begin(ring)

    def sync_reap(self) -> bool:
        """After `sync_begin`, once its ring is readable: True if the fdatasync is over (then
        `durable` and `failure` tell its outcome), False if it is still running."""
        return self.commit.reap()

    def sync(self) -> bool:
        """fsync now if anything is dirty (shutdown, tests); return whether it was dirty."""
        commit = self.commit
        if not commit.dirty() or commit.failure is not None:
            return False
        commit.upto(commit.appended)
        return True

    # -- compaction's hand-over (compaction.py does the copy) ------------------------------------

    def compaction_start(self, behind_bytes: int = 0, behind_records: int = 0) -> tuple[int, int]:
        """Under the engine's write lock: the position the snapshot being taken stands at, the
        file's end but for its last `behind_records` records (`behind_bytes`, headers included),
        which the snapshot does not hold (a replica's records not replayed yet): they are copied
        after it as the ones appended later are."""
        with self._lock:
            if self._compacting:
                raise FenecError("busy", "a compaction is already running")
            if self.commit.failure is not None:
                raise StorageFailed(f"compaction refused after a storage error: {self.commit.failure}")
            self._compacting = True
            return (self._end - behind_bytes, self._records - behind_records)

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

    # compaction.py reads these under `_lock`, and calls this holding it and `commit.cond`
    def _swap(self, fd: int, end: int, snapshot_end: int, records: int, allocated: int) -> None:
        old = self._fd
        self._fd = fd
        self.commit.switch(fd)  # the new file was fsynced holding every record
        self._end = end
        self._allocated = max(allocated, end)
        self._snapshot_end = snapshot_end
        self._records = records
        self.files.close(old)

    # -- the rest ----------------------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        return {
            "file_bytes": self._end,
            "records": self._records,
            "bytes_since_snapshot": self._end - self._snapshot_end,
            "snapshot_bytes": self._snapshot_end - FILE_HEADER_SIZE - (RECORD_HEADER_SIZE if self._snapshot_end > FILE_HEADER_SIZE else 0),
            "fsyncs": self.commit.fsyncs,
            "appended": self.commit.appended,
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
            try:
                dirty = self.commit.close()
                if self.commit.failure is None and self._allocated > self._end:
                    self._trim()
            finally:
                self.files.close(self._fd)
                self._fd = self.commit.fd = -1
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
                        self.path, reason(error))

    def __repr__(self) -> str:
        return f"Log({self.path!r}, sync={self.policy!r}, bytes={self._end})"


__all__ = ["Log", "CorruptLog", "StorageFailed"]
