"""A readers-writer lock: reads share it, the one writer has it alone, and a waiting writer
stops new readers from starting (so a stream of reads cannot starve the claims).

Every statement takes and gives it back once, so the way through is kept short: the mutex is
entered directly (not through the Condition's Python-level `__enter__`), and a release wakes
sleepers only when there are some (`_sleeping`, counted under the mutex, so no wake-up is lost)."""

from __future__ import annotations

import threading


class Busy(Exception):
    """The lock is held now, and the caller asked not to wait for it (`Engine.execute(nowait=True)`):
    the event loop's way of never blocking behind a long statement in a worker thread."""


class RWLock:
    __slots__ = ("_mutex", "_cond", "_readers", "_writer", "_waiting", "_sleeping")

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._readers = 0
        self._writer = False
        self._waiting = 0  # writers waiting: new readers hold back for them
        self._sleeping = 0  # threads inside _cond.wait()

    def _sleep(self) -> None:
        self._sleeping += 1
        try:
            self._cond.wait()
        finally:
            self._sleeping -= 1

    def acquire_read(self) -> None:
        with self._mutex:
            while self._writer or self._waiting:
                self._sleep()
            self._readers += 1

    def try_read(self) -> bool:
        """`acquire_read` if it would not wait; False (nothing taken) if it would."""
        with self._mutex:
            if self._writer or self._waiting:
                return False
            self._readers += 1
            return True

    def try_write(self) -> bool:
        """`acquire_write` if it would not wait; False (nothing taken) if it would."""
        with self._mutex:
            if self._writer or self._readers:
                return False
            self._writer = True
            return True

    def release_read(self) -> None:
        with self._mutex:
            self._readers -= 1
            if not self._readers and self._sleeping:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._mutex:
            self._waiting += 1
            try:
                while self._writer or self._readers:
                    self._sleep()
            finally:
                self._waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._mutex:
            self._writer = False
            if self._sleeping:
                self._cond.notify_all()
