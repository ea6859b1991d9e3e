"""The bytes of the data file: encoding a record, and reading a whole file back.

The format, its validity rule and the recovery algorithm are documented at the top of
`log.py`; this module is their code, kept free of any file or thread so that it can be
fuzzed on plain bytes (`scan` raises nothing but `CorruptLog`).
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field

from .failure import CorruptLog

MAGIC = b"FENECLOG"
VERSION = 1
FILE_HEADER = struct.Struct("<8sII")  # magic, version, crc32 of the 12 bytes before it
FILE_HEADER_SIZE = FILE_HEADER.size  # 16
RECORD_HEADER_SIZE = 12
SNAPSHOT_BIT = 0x8000_0000
MAX_PAYLOAD = SNAPSHOT_BIT - 1  # 31 bits of length: 2 GiB - 1

_HEAD8 = struct.Struct("<II")  # size word, payload crc
_U32 = struct.Struct("<I")
_HEAD12 = struct.Struct("<III")  # size word, payload crc, header crc
_ZERO_HEAD = bytes(RECORD_HEADER_SIZE)  # never a valid header: crc32 of 8 zero bytes is not 0
_NONZERO = re.compile(rb"[^\x00]")


def file_header() -> bytes:
    start = MAGIC + _U32.pack(VERSION)
    return start + _U32.pack(zlib.crc32(start))


def record_header(payload: bytes, snapshot: bool = False) -> bytes:
    """The 12 bytes written before `payload`. Raises ValueError past `MAX_PAYLOAD`."""
    return record_head(len(payload), zlib.crc32(payload), snapshot)


def check_size(n: int) -> None:
    """Raises ValueError when a payload of `n` bytes is past `MAX_PAYLOAD`."""
    if n > MAX_PAYLOAD:
        raise ValueError(f"a record of {n} bytes is over the {MAX_PAYLOAD}-byte limit")


def record_head(n: int, crc: int, snapshot: bool = False) -> bytes:
    """The 12 bytes written before a payload of `n` bytes whose crc32 is `crc` (a payload written
    in parts: its crc carried from part to part, `zlib.crc32(part, crc)`)."""
    check_size(n)
    head8 = _HEAD8.pack(n | SNAPSHOT_BIT if snapshot else n, crc)
    return head8 + _U32.pack(zlib.crc32(head8))


@dataclass
class Scan:
    """What a file holds: its snapshot, its records, where its valid part ends."""

    snapshot: bytes | None = None
    records: list[bytes] = field(default_factory=list)
    end: int = 0  # offset just past the last valid record (the file is cut here)
    snapshot_end: int = 0  # offset just past the snapshot (or the file header)
    torn: str | None = None  # why the bytes after `end` are a torn tail, if there are any
    zeros: int = 0  # bytes of zeros after `end` (preallocated, never written) when not torn


def valid_record_at(data: bytes, view: memoryview, q: int) -> bool:
    """Whether a whole valid record (both checks pass) starts at offset `q`."""
    if len(data) - q < RECORD_HEADER_SIZE:
        return False
    word, pcrc, hcrc = _HEAD12.unpack_from(data, q)
    if zlib.crc32(view[q : q + 8]) != hcrc:
        return False
    end = q + RECORD_HEADER_SIZE + (word & MAX_PAYLOAD)
    return end <= len(data) and zlib.crc32(view[q + RECORD_HEADER_SIZE : end]) == pcrc


def _valid_record_from(data: bytes, view: memoryview, start: int) -> int | None:
    """The first offset >= `start` where a valid record starts, or None.

    Only run once, at the first invalid record: over a torn tail this is the size of the
    writes in flight at the crash; over real corruption the next record is found quickly.
    Runs of zeros (a preallocated tail: megabytes) are skipped in C: a record's 12 header
    bytes are never all zero, so none starts more than 11 bytes before a nonzero byte.
    """
    last = len(data) - RECORD_HEADER_SIZE
    q = start
    while q <= last:
        if data[q] == 0 and data[q : q + RECORD_HEADER_SIZE] == _ZERO_HEAD:
            found = _NONZERO.search(data, q + RECORD_HEADER_SIZE)
            if found is None:
                return None
            q = found.start() - RECORD_HEADER_SIZE + 1
            continue
        if valid_record_at(data, view, q):
            return q
        q += 1
    return None


def _zeros_from(data: bytes, pos: int) -> bool:
    """Whether every byte from `pos` to the end is zero: preallocated space, the log's end."""
    return _NONZERO.search(data, pos) is None


def scan(data: bytes) -> Scan:
    """Read a whole file image by the recovery algorithm of `log.py`.

    An empty image, or one that is a prefix of the file header (a crash while the file was
    being created), reads as an empty log with `end` 0: the caller writes a fresh header.
    """
    size = len(data)
    if size < FILE_HEADER_SIZE:
        if file_header().startswith(bytes(data)):
            return Scan(end=0, torn="a file header cut short" if size else None)
        raise CorruptLog(0, "not a FenecDB data file (no file header)")
    magic, version, crc = FILE_HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise CorruptLog(0, "not a FenecDB data file (bad magic)")
    if zlib.crc32(data[:12]) != crc:
        raise CorruptLog(0, "the file header fails its check")
    if version != VERSION:
        raise CorruptLog(0, f"format version {version} is not supported (this server reads {VERSION})")

    out = Scan(end=FILE_HEADER_SIZE, snapshot_end=FILE_HEADER_SIZE)
    records = out.records
    view = memoryview(data)
    unpack = _HEAD12.unpack_from
    crc32 = zlib.crc32
    pos = FILE_HEADER_SIZE
    while pos < size:
        if size - pos < RECORD_HEADER_SIZE:
            if _zeros_from(data, pos):
                out.zeros = size - pos
            else:
                out.torn = "a record header cut short"
            break
        word, pcrc, hcrc = unpack(data, pos)
        if crc32(view[pos : pos + 8]) != hcrc:
            later = _valid_record_from(data, view, pos + 1)
            if later is not None:
                raise CorruptLog(pos, f"a record header fails its check, and a valid record follows at {later}")
            if _zeros_from(data, pos):
                out.zeros = size - pos
            elif data[pos : pos + RECORD_HEADER_SIZE] == _ZERO_HEAD:
                out.torn = "zeros, then bytes that hold no valid record"
            else:
                out.torn = "a record header that fails its check, with no valid record after it"
            break
        n = word & MAX_PAYLOAD
        start = pos + RECORD_HEADER_SIZE
        end = start + n
        if end > size:
            out.torn = f"a record of {n} bytes cut short at {size - start}"
            break
        payload = view[start:end]
        if crc32(payload) != pcrc:
            later = _valid_record_from(data, view, end)
            if later is None:
                out.torn = "a record whose payload fails its check, with no valid record after it"
                break
            raise CorruptLog(pos, f"a record's payload fails its check, and a valid record follows at {later}")
        if word & SNAPSHOT_BIT:
            if pos != FILE_HEADER_SIZE:
                raise CorruptLog(pos, "a snapshot record after the first record")
            out.snapshot = payload.tobytes()
            out.snapshot_end = end
        else:
            records.append(payload.tobytes())
        pos = end
    out.end = pos
    return out
