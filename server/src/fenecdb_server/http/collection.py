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
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_running = 0  # large statements running now
_saved_interval = 0.005
# While one runs, the interpreter offers the GIL to the event loop every 1 ms instead of every 5: a
# request the loop answers takes the GIL several times (read, route, write), and each wait was up
# to a switch interval long, so a health check waited ~20 ms behind a 1 MB statement, not ~8.
SWITCH_INTERVAL_S = 0.001


def deferred(run: Callable[[], T]) -> T:
    """`run()`, with automatic collection held off until it and every other such run have ended."""
    global _running, _saved_interval
    with _lock:
        _running += 1
        if _running == 1:
            gc.disable()
            _saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(_saved_interval, SWITCH_INTERVAL_S))
    try:
        return run()
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                gc.enable()
                sys.setswitchinterval(_saved_interval)
