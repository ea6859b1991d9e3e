"""An fdatasync that runs while the caller goes on: Linux's kernel AIO (`io_submit` of an
`IOCB_CMD_FDSYNC`), its completion told through an eventfd an event loop can watch.

Why: under `--sync always` an fdatasync in place leaves the HTTP server's loop idle for each
turn's sync (on a virtual disk, about one request's CPU), and requests read meanwhile wait in
the kernel. A thread doing the fdatasync would need the GIL back to say it
is done, and a busy loop hands the GIL over only at the interpreter's switch interval (5 ms):
slower (`http/durable.py`). Here the kernel runs the fdatasync on its own worker and
bumps the eventfd; no Python thread and no GIL are involved until the loop reads it.

The log uses it where the thread of `sync_thread.py` was not built (an install without a
compiler): the kernel runs this sync on a worker bound to the submitting CPU, the loop's own.

Only the three calls are used, through `ctypes` and the C library's `syscall` (no library is
needed: glibc has no wrapper for them). One sync is in flight at a time (the log's leader
step, `log.py`). Where the kernel, the architecture or a sandbox does not allow it,
`DatasyncRing.open()` returns None and the caller syncs in place as before.

    struct iocb (64 bytes, little-endian):   aio_data u64 | aio_key u32 | aio_rw_flags u32 |
      aio_lio_opcode u16 | aio_reqprio s16 | aio_fildes u32 | aio_buf u64 | aio_nbytes u64 |
      aio_offset s64 | aio_reserved2 u64 | aio_flags u32 | aio_resfd u32
    struct io_event (32 bytes):   data u64 | obj u64 | res s64 | res2 s64
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
from typing import Protocol

# io_setup, io_destroy, io_getevents, io_submit by architecture (the kernel's syscall tables)
_CALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB = struct.Struct("<QIIHhIQQqQII")
_EVENT = struct.Struct("<QQqq")
_FDSYNC = 3  # IOCB_CMD_FDSYNC
_RESFD = 1  # IOCB_FLAG_RESFD: bump aio_resfd (an eventfd) on completion
_TAG = 0xFE0EC


def drain_eventfd(fd: int) -> None:
    """Read an eventfd (non-blocking) down to zero; nothing if it is already there."""
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


class Ring(Protocol):
    """What the log needs of a ring (tests give one whose completion they hold back)."""

    @property
    def in_flight(self) -> bool: ...

    def fileno(self) -> int: ...

    def submit(self, fd: int) -> None: ...

    def reap(self, block: bool) -> int | None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


class DatasyncRing:
    """One kernel AIO context for fdatasyncs, one in flight at a time. `fileno()` is an eventfd
    readable once the fdatasync submitted has completed; `reap` collects its result."""

    def __init__(self, libc: ctypes.CDLL, calls: tuple[int, int, int, int], ctx: int, eventfd: int) -> None:
        self._syscall = libc.syscall
        self._setup, self._destroy, self._getevents, self._submit = calls
        self._ctx = ctypes.c_ulong(ctx)
        self._eventfd = eventfd
        self._iocb = ctypes.create_string_buffer(_IOCB.size)
        self._pointers = (ctypes.c_void_p * 1)(ctypes.addressof(self._iocb))
        self._events = ctypes.create_string_buffer(_EVENT.size)
        self.in_flight = False

    @classmethod
    def open(cls, fd: int) -> DatasyncRing | None:
        """A ring for fdatasyncs of `fd`, tried once on it, or None where kernel AIO cannot
        run them here (the architecture, a sandbox refusing the calls, a kernel or file system
        refusing an async fdatasync with EINVAL): then the caller syncs in place."""
        calls = _CALLS.get(platform.machine())
        if calls is None or not sys.platform.startswith("linux") or not hasattr(os, "eventfd"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
        except (OSError, AttributeError):
            return None
        ctx = ctypes.c_ulong(0)
        if libc.syscall(ctypes.c_long(calls[0]), ctypes.c_long(1), ctypes.byref(ctx)) != 0:
            return None  # ENOSYS, EAGAIN (aio-max-nr reached), a sandbox's EPERM
        try:
            eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            libc.syscall(ctypes.c_long(calls[1]), ctx)
            return None
        ring = cls(libc, calls, ctx.value, eventfd)
        try:
            ring.submit(fd)
            tried = ring.reap(block=True)
        except OSError:
            tried = -1
        if tried != 0:
            ring.close()
            return None
        ring.clear()
        return ring

    def fileno(self) -> int:
        return self._eventfd

    def submit(self, fd: int) -> None:
        """Start an fdatasync of `fd`. Raises OSError (EINVAL: this kernel cannot do it async)."""
        assert not self.in_flight
        if fd < 0:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        _IOCB.pack_into(self._iocb, 0, _TAG, 0, 0, _FDSYNC, 0, fd, 0, 0, 0, 0, _RESFD, self._eventfd)
        done = self._syscall(ctypes.c_long(self._submit), self._ctx, ctypes.c_long(1), self._pointers)
        if done != 1:
            code = ctypes.get_errno() or errno.EIO
            raise OSError(code, os.strerror(code))
        self.in_flight = True

    def reap(self, block: bool) -> int | None:
        """The fdatasync's result once it has completed (0, or a negative errno), else None;
        `block` waits for it. The eventfd is left as the kernel set it: a loop watching it is
        woken even when another thread reaped the sync (it clears it, `clear`)."""
        if not self.in_flight:
            return None
        timeout = None if block else ctypes.byref((ctypes.c_long * 2)(0, 0))
        while True:
            got = self._syscall(ctypes.c_long(self._getevents), self._ctx, ctypes.c_long(1 if block else 0),
                                ctypes.c_long(1), self._events, timeout)
            if got >= 0 or ctypes.get_errno() != errno.EINTR:
                break
        if got < 0:  # the context itself failed: count it as the sync's failure
            self.in_flight = False
            return -(ctypes.get_errno() or errno.EIO)
        if got == 0:
            return None
        self.in_flight = False
        tag, _obj, result, _result2 = _EVENT.unpack_from(self._events, 0)
        return int(result) if tag == _TAG else -errno.EIO

    def clear(self) -> None:
        """Read the eventfd down to zero (the loop's, once woken), so it is not woken again."""
        drain_eventfd(self._eventfd)

    def close(self) -> None:
        """Wait for a sync in flight, then free the context and the eventfd."""
        if self.in_flight:
            self.reap(block=True)
        if self._eventfd >= 0:
            self._syscall(ctypes.c_long(self._destroy), self._ctx)
            os.close(self._eventfd)
            self._eventfd = -1
