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

Measured on a 2-core machine with `bench/durable_cost.py` (the server on a fresh file, `--sync
always`, busy poll off; one client process keeping a put in flight on each of 8 connections; 20 000
puts a round, two rounds a way, the three ways alternated twice in one sitting): 7 874-9 040
puts/s on this thread, 6 585-7 131 on the kernel's AIO, 7 291-7 773 with every sync in place;
`--sync 250` took 9 418-9 651. With eight processes of the Python client instead, as `make
queue-compare` runs its durable row, the three ways are within the machine's noise of each other
(6 319-7 102, 6 194-6 815 and 6 344-6 923 writes/s, three rounds alternated): those processes
share the two CPUs with the server (bench/README.md, session 16).

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
