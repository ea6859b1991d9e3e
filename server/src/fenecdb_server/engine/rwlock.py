"""A readers-writer lock: reads share it, the one writer has it alone, and a waiting writer
stops new readers from starting (so a stream of reads cannot starve the claims)."""

from __future__ import annotations

import threading


class RWLock:
    __slots__ = ("_cond", "_readers", "_writer", "_waiting")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting = 0

    def acquire_read(self) -> None:
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._cond:
            self._waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()
