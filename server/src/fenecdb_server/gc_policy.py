"""How `fenec-server` runs Python's garbage collector: no full pass over the stored jobs.

CPython frees almost everything by reference counting; its cycle collector exists for the rest,
and a full collection walks every object it tracks. A stored job is four tracked objects (its
row, its timestamp, two bookkeeping tuples while it is fresh), so with CPython's defaults a full
collection over a million jobs pauses the process for the whole walk, and a claim that comes
during one waits for it (bench/README.md, "Garbage collection while loading"). Rows hold no
cycles, so walking them finds nothing.

The policy (`apply`, once the data file is open):

* Everything alive at start-up is moved out of the collector's sight (`gc.freeze()` after one
  collection): the jobs read from the data file are never walked.
* After every full collection its survivors are frozen too, so the next full collection walks
  only what was made since the last one: a pause grows with the writes between two full
  collections, not with the jobs stored.
* The youngest generation is collected every 10 000 allocations net (CPython: 700), the middle
  one every 5 of those, and a full collection may follow each of those (CPython: every 10, and
  only once the objects waiting are a quarter of those that survived the last one): fewer pauses
  on a bulk load, and none that walks more than about 50 000 objects.

* A bulk write (a request body over 64 KiB: `put jobs $1` of thousands of documents) runs with
  automatic collection held off (`held_off`, below), and what is alive once it has stored its
  rows is frozen (`after_bulk`): the rows it stored are never walked. Without it the young
  generations walked each new row two or three times, a large part of the server's time while
  loading (bench/README.md, "Numbers the code's comments used to carry").

* A large statement (parsed and run off the event loop, or in process a text over LARGE_TEXT
  characters) runs with automatic collection held off too (`held_off`): its hundreds of thousands of
  AST nodes made the collector walk them, holding the GIL for the whole pass (the loop stopped
  answering for the whole pass behind a 1 MB statement), and they are freed by reference counting
  once it is answered (a text that large is never cached). While one runs, the interpreter offers
  the GIL every 1 ms instead of every 5: a request the loop answers takes the GIL several times.

What it costs: a cycle that was alive at a full collection and dies later is not collected. The
server makes few cycles (an exception's traceback is one); `frozen()` reports the count, and the
`/_metrics` page shows it (`fenec_gc_frozen_objects`). `bench/gc_pauses.py` measures the pauses.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

GEN0_THRESHOLD = 10_000
GEN1_THRESHOLD = 5
GEN2_THRESHOLD = 1

_installed = False


def _freeze_after_full(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def apply() -> None:
    """Collect once, freeze what is alive, and freeze the survivors of every full collection
    from now on. Idempotent."""
    global _installed
    gc.collect()
    gc.freeze()
    if not _installed:
        gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
        gc.callbacks.append(_freeze_after_full)
        _installed = True


def after_bulk() -> None:
    """After a bulk write has stored its rows: freeze them, and everything else alive (the policy
    only: a process that did not `apply` it keeps CPython's own)."""
    if _installed:
        gc.freeze()


def frozen() -> int:
    """Objects moved out of the collector's sight so far (alive or not)."""
    return gc.get_freeze_count()


# -- a large statement: automatic collection held off while it runs

LARGE_TEXT = 64 << 10  # in process, a statement text this long or longer runs `held_off`
_lock = threading.Lock()
_running = 0  # large statements running now
_saved_interval = 0.005
SWITCH_INTERVAL_S = 0.001


def held_off(run: Callable[[], T]) -> T:
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
