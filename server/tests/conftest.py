"""Shared helpers for the server's tests: a clock the test moves, and a full dump of a database.

The clock starts where the spec's examples start (`fenecql.md` conventions: 2026-05-03T09:20:00Z,
epoch ms 1777800000000) and moves only when a test says so, so `now()` answers are exact.
"""

from __future__ import annotations

import threading

import pytest

SPEC_EPOCH_MS = 1777800000000


class TestClock:
    """A callable clock for `Database(clock=...)`: epoch milliseconds, moved by hand."""

    __test__ = False  # not a test class, whatever its name says

    def __init__(self, start_ms: int = SPEC_EPOCH_MS) -> None:
        self._ms = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._ms

    def advance(self, ms: int) -> None:
        with self._lock:
            self._ms += ms

    def set(self, ms: int) -> None:
        with self._lock:
            self._ms = ms


def reopen(path: str) -> tuple[bytes | None, list[bytes]]:
    """A data file opened by the log and closed again: what Log.open read (the snapshot payload or None,
    the write payloads in order)."""
    from fenecdb_server.storage import Log

    lg = Log(path, sync="off")
    try:
        return lg.open()
    finally:
        lg.close()


def dump(db) -> tuple:
    """Everything a refusal must leave as it was: each collection's rows, the stats, the change counter.

    Collections are listed by `db.stats()["collections"]`, so one created by a refused statement shows too.
    """
    stats = db.stats()
    rows = {name: db.query(f"get {name} order id") for name in sorted(stats["collections"])}
    return rows, repr(stats), db.seq


@pytest.fixture
def clock() -> TestClock:
    return TestClock()


@pytest.fixture
def db(clock):
    from fenecdb_server import Database

    database = Database(clock=clock)
    yield database
    database.close()
