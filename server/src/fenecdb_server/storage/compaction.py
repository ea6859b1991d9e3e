"""Compaction: replace the file by its snapshot plus the records written since (server.md §2).

    engine, under its write lock:   mark = log.compaction_start()   (file end at the snapshot,
                                        less a replica's records not replayed yet)
                                    snapshot = <serialize the live data>
    engine, no lock:                log.compaction_finish(snapshot, mark) -> run() below

    1. Create `<path>.compact`: file header + the snapshot record; the      (no lock)
       snapshot comes in parts, written a MiB at a time after the room
       for the headers, its crc32 carried along, the headers last.
    2. Copy the live file's bytes from the mark to its current end, again
       while more than 1 MiB arrived meanwhile (appends go on).            (no lock)
    3. Preallocate the side file a step past its end, as the live file is
       (preallocation.py), and fsync it.                                            (no lock)
    4. Take the log's lock (appends wait): copy the last few records,
       fsync again if any, wait out a group-commit fsync in flight,
       rename the side file over the file, switch appends to it.           (log lock, briefly)
    5. fsync the directory, so the rename survives a power loss.

A crash before the rename leaves the old file whole (plus a side file that the next open
removes); the rename is atomic; after it the new file is whole because it was fsynced first.
A failure before the rename leaves the live log untouched (the error is raised, the side file
removed); a failed directory fsync after it marks the log failed, like any failed fsync.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import FenecError
from .format import FILE_HEADER_SIZE, RECORD_HEADER_SIZE, check_size, file_header, record_head
from .preallocation import reserve

if TYPE_CHECKING:
    from .files import OsFiles
    from .log import Log

_COPY_CHUNK = 1 << 20
_CATCH_UP = 1 << 20  # copy outside the lock until less than this is left
_BLOCK = 1 << 20  # the snapshot's parts are joined into writes of about this many bytes


def _write_all(files: OsFiles, fd: int, buffers: list[bytes], offset: int) -> int:
    data = b"".join(buffers)
    done = 0
    while done < len(data):
        n = files.writev(fd, [data[done:]], offset + done)
        if n <= 0:
            raise OSError(0, "the disk accepted no more bytes")
        done += n
    return done


def _blocks(parts: list[bytes]) -> Iterator[bytes]:
    """The parts joined into blocks of about `_BLOCK` bytes: each join holds the interpreter lock
    for a MiB's copy (the crc32 and the write of a block let it go), where joining a million
    rows' snapshot whole held it for tens of ms at a time."""
    group: list[bytes] = []
    size = 0
    for part in parts:
        group.append(part)
        size += len(part)
        if size >= _BLOCK:
            yield group[0] if len(group) == 1 else b"".join(group)
            group = []
            size = 0
    if group:
        yield b"".join(group)


def _write_snapshot(files: OsFiles, fd: int, parts: list[bytes]) -> int:
    """File header, snapshot record header, and the snapshot's parts, written to the new file
    `fd`; answer the offset past them. The payload goes first, after the room for the headers,
    as its crc32 is known only once it is all read; nothing reads the file before its fsync."""
    pos = FILE_HEADER_SIZE + RECORD_HEADER_SIZE
    crc = 0
    for block in _blocks(parts):
        crc = zlib.crc32(block, crc)
        pos += _write_all(files, fd, [block], pos)
    head = record_head(pos - FILE_HEADER_SIZE - RECORD_HEADER_SIZE, crc, snapshot=True)
    _write_all(files, fd, [file_header(), head], 0)
    return pos


def _copy(files: OsFiles, src: int, dst: int, start: int, end: int, at: int) -> int:
    copied = 0
    while start + copied < end:
        chunk = files.read(src, min(_COPY_CHUNK, end - start - copied), start + copied)
        if not chunk:
            raise OSError(0, f"the data file ended at {start + copied}, before {end}")
        _write_all(files, dst, [chunk], at + copied)
        copied += len(chunk)
    return copied


def _preallocate(lg: Log, fd: int, end: int) -> int:
    """Reserve the side file up to the next step past `end`; answer its size. Where the OS
    cannot, the file stays at `end` (appends grow it, as `Log._grow` says)."""
    if not lg.preallocate:
        return end
    try:
        return reserve(lg.files, fd, end, end, lg.preallocate)
    except OSError:
        return end


def run(lg: Log, snapshot: bytes | list[bytes], mark: tuple[int, int]) -> dict[str, int]:
    """`snapshot`: the payload, whole or as the parts of it (records.encode_snapshot)."""
    files = lg.files
    mark_end, mark_records = mark
    before = lg._end
    parts = [snapshot] if isinstance(snapshot, bytes) else snapshot
    try:
        check_size(sum(len(part) for part in parts))
    except ValueError as error:
        raise FenecError("io", f"compaction failed: {error}") from None
    side = files.create(lg.side_path)
    swapped = False
    try:
        pos = _write_snapshot(files, side, parts)
        snapshot_end = pos
        copied = mark_end
        for _ in range(4):
            end = lg._end  # every byte below it is already written
            if end - copied < _CATCH_UP:
                break
            pos += _copy(files, lg._fd, side, copied, end, pos)
            copied = end
        allocated = _preallocate(lg, side, pos)
        files.fsync(side)
        with lg._lock:
            locked = time.perf_counter()
            end = lg._end
            if end > copied:
                pos += _copy(files, lg._fd, side, copied, end, pos)
                files.fsync(side)
            commit = lg.commit
            with commit.cond:
                while commit.syncing:
                    commit.await_sync()
                files.lock(side)
                files.rename(lg.side_path, lg.path)
                swapped = True
                lg._swap(side, pos, snapshot_end, lg._records - mark_records, allocated)
                commit.cond.notify_all()  # waiters' records are in the fsynced new file
            try:
                files.fsync_dir(lg.path)
            except OSError as error:
                raise commit.fail(f"fsync of the directory after compaction failed: {error}",
                               "the compacted file is in place, its rename may not survive a power loss") from error
            held = time.perf_counter() - locked
    except Exception as error:
        if not swapped:
            try:
                files.close(side)
                files.remove(lg.side_path)
            except OSError:
                pass
            if isinstance(error, OSError):
                raise FenecError("io", f"compaction failed, the data file is unchanged: {error}") from error
        raise
    return {"bytes_before": before, "bytes_after": pos, "lock_us": int(held * 1e6)}
