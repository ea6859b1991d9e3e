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

So the thread pays where a CPU is idle beside the loop's, and costs nothing where the clients
keep both busy (bench/README.md, "The fdatasync on a thread of its own", has the measurements).

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
