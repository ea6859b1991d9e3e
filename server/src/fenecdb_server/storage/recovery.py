"""A data file opened: locked, read, checked and repaired as log.py's docstring states
("Recovery": the rules and the torn tail; `format.scan` reads the records).

`open_file` is `Log.open`'s first half: it answers the file's descriptor, what the scan found
(the snapshot, the write records, their end) and the file's size, the preallocated zeros after
the records included. Nothing is touched before the file's lock is held.
"""

from __future__ import annotations

import logging

from ..errors import FenecError
from .files import OsFiles
from .format import FILE_HEADER_SIZE, Scan, file_header, scan

log = logging.getLogger("fenecdb.storage")

_READ_CHUNK = 1 << 24


def open_file(files: OsFiles, path: str, side_path: str) -> tuple[int, Scan, int]:
    """Open or create the file at `path` under its lock; answer (fd, scan, size)."""
    created = not files.exists(path)
    fd = files.open(path)
    try:
        try:
            files.lock(fd)
        except BlockingIOError:
            raise FenecError("io", f"{path} is in use by another process") from None
        # Only now, the file's lock held: the side file of a server still running is its
        # compaction in progress, never a remnant; nothing is touched before the lock.
        if files.exists(side_path):
            log.warning("removing %s: the remnant of an interrupted compaction", side_path)
            files.remove(side_path)
        size = files.size(fd)
        data = _read_all(files, fd, size)
        found = scan(data)
        del data
        if found.end == 0:  # new, or a creation cut short
            files.truncate(fd, 0)
            files.writev(fd, [file_header()], 0)
            files.fsync(fd)
            if created or size:
                files.fsync_dir(path)
            found.end = found.snapshot_end = FILE_HEADER_SIZE
        elif found.torn is not None:
            files.truncate(fd, found.end)
            files.fsync(fd)
            log.warning(
                "%s: cut a torn tail of %d bytes at offset %d (%s): a record cut short by a crash",
                path, size - found.end, found.end, found.torn,
            )
            size = found.end
    except BaseException:
        files.close(fd)
        raise
    return fd, found, size


def _read_all(files: OsFiles, fd: int, size: int) -> bytes:
    parts = []
    offset = 0
    while offset < size:
        chunk = files.read(fd, min(_READ_CHUNK, size - offset), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)
