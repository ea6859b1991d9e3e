"""The file layer: every OS call the log makes goes through one object, so tests can swap it.

`OsFiles` is the real thing (thin wrappers over `os`). `FaultyFiles` is the same layer with
a schedule of failures and a count of every call, in the spirit of beanstalkd's swapped file
calls: a test says "the 3rd `fsync` raises EIO" or "crash on `rename`" and checks what the
log does, with no real disk fault needed.

A simulated crash raises `SimulatedCrash`, a `BaseException`, so no `except Exception` in the
log can swallow it; the test then calls `FaultyFiles.release()` to close every descriptor the
dead "process" held (as the kernel would) before opening the file again.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .kernel_aio import DatasyncRing, Ring
from .sync_thread import open_thread

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
_fallocate: Callable[[int, int, int], None] | None = getattr(os, "posix_fallocate", None)


DATASYNC_ENV = "FENECDB_DATASYNC"  # thread (the default), aio or inplace: OsFiles.datasync_ring


class OsFiles:
    """Real file calls. Every method raises `OSError` on failure, as `os` does."""

    def open(self, path: str) -> int:
        """Open (creating if missing) for reading and writing."""
        return os.open(path, _OPEN_FLAGS, 0o644)

    def create(self, path: str) -> int:
        """Create empty (truncating a leftover) for reading and writing."""
        return os.open(path, _OPEN_FLAGS | os.O_TRUNC, 0o644)

    def lock(self, fd: int) -> None:
        """Take the exclusive advisory lock that keeps a second server off the file."""
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def read(self, fd: int, n: int, offset: int) -> bytes:
        return os.pread(fd, n, offset)

    # The two calls of every durable write are the OS's own functions, not methods that call them:
    # the log calls them from compiled code (setup.py), and a method of this class would run in
    # the interpreter. `writev(fd, buffers, offset)` returns the bytes written; `datasync(fd)` is
    # fdatasync where the OS has it (not the mtime; the size only when it changed), else fsync.
    writev: Callable[[int, Sequence[bytes], int], int] = staticmethod(os.pwritev)
    datasync: Callable[[int], None] = staticmethod(_fdatasync)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def datasync_ring(self, fd: int) -> Ring | None:
        """A way to run fdatasyncs of `fd` while the caller goes on, tried once on it: a thread of
        its own (`sync_thread.py`), else the kernel's AIO, else None: the caller then runs
        `datasync` in place. FENECDB_DATASYNC=aio or =inplace in the environment skips the ways
        before it (to measure one against another: bench/durable_cost.py)."""
        way = os.environ.get(DATASYNC_ENV, "")
        if way == "inplace":
            return None
        return (None if way == "aio" else open_thread(fd)) or DatasyncRing.open(fd)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """Reserve `length` bytes at `offset`, reading as zeros (the file grows to cover them).
        Raises OSError, EOPNOTSUPP-like where the OS or file system cannot."""
        if _fallocate is None:
            raise OSError(errno.EOPNOTSUPP, "posix_fallocate is not available here")
        _fallocate(fd, offset, length)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        """fsync the directory holding `path`, so a create or rename in it is durable."""
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def remove(self, path: str) -> None:
        os.remove(path)


class SimulatedCrash(BaseException):
    """The process "died" inside a file call (raised by `FaultyFiles`)."""


@dataclass
class _Fault:
    op: str
    error: BaseException | None  # None = a simulated crash
    nth: int  # fire on the nth matching call from now (1 = the next one)
    when: Callable[[str], bool]  # matches the path the call concerns
    partial: bool  # writev only: write the first half of the bytes before failing
    times: int  # how many matching calls fail once it fires (-1 = every one after)


class FaultyFiles(OsFiles):
    """`OsFiles` with counted calls and scheduled faults, for tests."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._faults: list[_Fault] = []
        self._paths: dict[int, str] = {}

    def fail(
        self,
        op: str,
        error: BaseException | int | None = None,
        *,
        nth: int = 1,
        path_endswith: str = "",
        partial: bool = False,
        times: int = 1,
    ) -> None:
        """Make the `nth` next call of `op` (on a path ending with `path_endswith`) raise.

        `error` is an exception, an errno (raised as `OSError(errno, strerror)`), or None for
        a simulated crash. `times` further calls fail after it (-1: all of them).
        """
        if isinstance(error, int):
            error = OSError(error, os.strerror(error))
        self._faults.append(
            _Fault(op, error, nth, lambda p: p.endswith(path_endswith), partial, times)
        )

    def crash(self, op: str, **kw: object) -> None:
        """Schedule a simulated crash inside the `nth` next call of `op`."""
        self.fail(op, None, **kw)  # type: ignore[arg-type]

    def release(self) -> None:
        """Close every descriptor still open, as the kernel does for a dead process."""
        for fd in list(self._paths):
            try:
                os.close(fd)
            except OSError:
                pass
        self._paths.clear()

    def _check(self, op: str, path: str, before: Callable[[], object] | None = None) -> None:
        self.calls[op] += 1
        for fault in self._faults:
            if fault.op != op or not fault.when(path):
                continue
            if fault.nth > 1:
                fault.nth -= 1
                continue
            if fault.times == 0:
                continue
            if fault.times > 0:
                fault.times -= 1
            if before is not None and fault.partial:
                before()
            if fault.error is None:
                raise SimulatedCrash(f"crash in {op} on {path}")
            raise fault.error

    def _path(self, fd: int) -> str:
        return self._paths.get(fd, "")

    def open(self, path: str) -> int:
        self._check("open", path)
        fd = super().open(path)
        self._paths[fd] = path
        return fd

    def create(self, path: str) -> int:
        self._check("create", path)
        fd = super().create(path)
        self._paths[fd] = path
        return fd

    def writev(self, fd: int, buffers: Sequence[bytes], offset: int) -> int:
        data = b"".join(buffers)

        def half() -> None:
            os.pwrite(fd, data[: len(data) // 2], offset)

        self._check("writev", self._path(fd), half)
        return super().writev(fd, buffers, offset)

    def fsync(self, fd: int) -> None:
        self._check("fsync", self._path(fd))
        super().fsync(fd)

    def datasync(self, fd: int) -> None:
        self._check("datasync", self._path(fd))
        super().datasync(fd)

    def datasync_ring(self, fd: int) -> Ring | None:
        ring = super().datasync_ring(fd)
        return None if ring is None else _CountedRing(self, ring)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        self._check("allocate", self._path(fd))
        super().allocate(fd, offset, length)

    def truncate(self, fd: int, size: int) -> None:
        self._check("truncate", self._path(fd))
        super().truncate(fd, size)

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        self._check("close", "")
        super().close(fd)

    def rename(self, src: str, dst: str) -> None:
        self._check("rename", src)
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        self._check("fsync_dir", path)
        super().fsync_dir(path)


ENOSPC = errno.ENOSPC
EIO = errno.EIO


class _CountedRing:
    """A ring (the thread or the kernel's AIO) whose submits count, and fail as scheduled, as
    `datasync` calls."""

    def __init__(self, files: FaultyFiles, ring: Ring) -> None:
        self._files = files
        self._ring = ring

    @property
    def in_flight(self) -> bool:
        return self._ring.in_flight

    def fileno(self) -> int:
        return self._ring.fileno()

    def submit(self, fd: int) -> None:
        self._files._check("datasync", self._files._path(fd))
        self._ring.submit(fd)

    def reap(self, block: bool) -> int | None:
        return self._ring.reap(block)

    def clear(self) -> None:
        self._ring.clear()

    def close(self) -> None:
        self._ring.close()
