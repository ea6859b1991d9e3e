"""The threads driver: held claims without an event loop (`Database.query(..., wait=ms)`).

One daemon thread runs the lines: the hops of write announcements, the timers (look gaps, time
wakes, deadlines) and the runs of held claims, one at a time, as an event loop would. A caller
blocks in its own thread on its held claim's answer (in_process.py). The thread starts with the first
held claim and stops at `close`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from .lines import HeldClaim, Outcome
from .port import Timer

A = TypeVar("A")

log = logging.getLogger("fenec.held")


class _Timer:
    __slots__ = ("fn", "cancelled")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ThreadDriver(Generic[A]):
    def __init__(self, runner: Callable[[HeldClaim[A]], Outcome[A]], fault: A,
                 clock: Callable[[], float] = time.monotonic, name: str = "fenec-held") -> None:
        self.runner = runner
        self.fault = fault
        self.clock = clock
        self.name = name
        self._cv = threading.Condition()
        self._ready: deque[Callable[[], None]] = deque()
        self._timers: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def time(self) -> float:
        return self.clock()

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        timer = _Timer(fn)
        with self._cv:
            heapq.heappush(self._timers, (when, next(self._order), timer))
            self._cv.notify()
        return timer

    def soon(self, fn: Callable[[], None]) -> None:
        with self._cv:
            if self._stopped and (self._thread is None or not self._thread.is_alive()):
                stopped = True  # the lines are shut: what comes now only answers, or drops, a caller
            else:
                stopped = False
                self._ready.append(fn)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._cv.notify()
        if stopped:
            fn()

    def settle(self, fn: Callable[[], None]) -> None:
        self.soon(fn)  # in process nothing is on its way: a caller that leaves says so at once

    def run(self, held: HeldClaim[A], done: Callable[[Outcome[A]], None]) -> None:
        try:
            outcome = self.runner(held)
        except Exception:
            log.exception("internal fault running a held claim")
            outcome = Outcome(True, self.fault)
        done(outcome)

    def stop(self) -> None:
        """Run what is ready, then end the thread (timers left are dropped)."""
        with self._cv:
            self._stopped = True
            thread = self._thread
            self._cv.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _next(self) -> Callable[[], None] | None:
        """Under the condition: the next thing to run, waiting for it; None once stopped."""
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._stopped:
                return None
            timeout = None
            while self._timers and self._timers[0][2].cancelled:
                heapq.heappop(self._timers)
            if self._timers:
                when, _, timer = self._timers[0]
                timeout = when - self.clock()
                if timeout <= 0:
                    heapq.heappop(self._timers)
                    return timer.fn
            self._cv.wait(timeout)

    def _loop(self) -> None:
        while True:
            with self._cv:
                fn = self._next()
            if fn is None:
                return
            try:
                fn()
            except Exception:
                log.exception("internal fault in held claims")
