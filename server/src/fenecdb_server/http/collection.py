"""Automatic garbage collection held off while a large statement is parsed and run off the loop.

A statement of hundreds of thousands of items (`in [1, 1, …]` of 1 MB: half a million AST nodes) makes
Python's collector run a full collection over every object it tracks, holding the GIL for the whole pass:
the event loop stopped answering health checks and claims for 187 ms at a time (bench/stall_probe.py), while
the statement itself ran in a worker thread. Those nodes are freed by reference counting once the statement
is answered (a text that large is never cached), so nothing is lost by not collecting during it: the
collector is turned off while any large statement runs and on again when the last one ends. Cycles made
meanwhile wait for the next collection.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_running = 0  # large statements running now


def deferred(run: Callable[[], T]) -> T:
    """`run()`, with automatic collection held off until it and every other such run have ended."""
    global _running
    with _lock:
        _running += 1
        if _running == 1:
            gc.disable()
    try:
        return run()
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                gc.enable()
