"""The fdatasync of `--sync always` on a thread of its own (`datasync_thread.c`), the first way
`OsFiles.datasync_ring` offers the loop; the kernel's AIO (`kernel_aio.py`) where it was not
built, and a sync in place where neither is there.

Both run the fdatasync while the loop goes on and tell its end through an eventfd the loop
watches (http/durable.py). They differ in where the sync's own work runs. The kernel runs an
AIO fdatasync on a worker bound to the CPU that submitted it: the loop's, which is the busiest
CPU under many writers. This thread is the scheduler's to place, on an idle CPU when there is
one. It is written in C because it must say it is done without the GIL: a Python thread would
wait for the busy loop to hand the GIL over, which it does only at the interpreter's switch
interval (5 ms).

Measured on a 2-core machine (server on a fresh file, `--sync always`, busy-poll off, one client
process keeping 8 puts in flight on 8 connections, 20 000 puts, the two alternated three times):
7 080-7 430 puts/s through the kernel's AIO, 8 810-9 240 through this thread, while `--sync 250`
on the same machine answers 9 550-9 820. With eight client processes of the Python client, each
its own connection, as `make queue-compare` runs them, the gain is smaller because those eight
processes share the two CPUs with the server: 6 280-6 520 puts/s against 7 320-7 360 in one
sitting (bench/README.md, "The fdatasync on a thread of its own").

A lone write still syncs in place (durable.py): with nothing to overlap, a hand-off to another
thread only adds its wake-up to the answer's time.
"""

from __future__ import annotations

import os

from .kernel_aio import Ring

try:
    from ._datasync_thread import DatasyncThread
except ImportError:  # installed without compiling (FENECDB_PURE_PYTHON, no compiler): kernel AIO instead
    DatasyncThread = None


def built() -> bool:
    """The thread's extension was compiled with the install."""
    return DatasyncThread is not None


def open_thread(fd: int) -> Ring | None:
    """A thread running fdatasyncs of `fd` for the caller, or None: the extension was not built,
    the descriptor cannot be synced (a pipe, a closed one: tried once here), or no thread can be
    started."""
    if DatasyncThread is None or fd < 0:
        return None
    try:
        os.fdatasync(fd)
    except OSError:
        return None
    try:
        thread: Ring = DatasyncThread()
    except OSError:
        return None
    return thread
