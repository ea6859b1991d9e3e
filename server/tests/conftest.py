"""Shared helpers for the server's tests: a clock the test moves, a full dump of a database, and
the harness of the in-process tests with threads (`Caller`, `until`, `held`).

The clock starts where the spec's examples start (`fenecql.md` conventions: 2026-05-03T09:20:00Z,
epoch ms 1777800000000) and moves only when a test says so, so `now()` answers are exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

SPEC_EPOCH_MS = 1777800000000


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked `sources` replaces a function inside the engine, which a compiled module calls
    past any replacement (fenecdb_server/compiled.py): where the engine runs compiled, it is left
    to the run on the sources (scripts/test_all.py runs it next, with FENECDB_PURE_PYTHON=1) and
    the count of those left is printed, never passed over in silence."""
    import fenecdb_server  # noqa: F401 - loads the engine, compiled or not
    from fenecdb_server import compiled

    if not compiled.running():
        return
    import importlib

    for module in ("engine.engine", "engine.access", "engine.execute", "http.app", "storage.log"):
        importlib.import_module(f"fenecdb_server.{module}")  # the compiled ones, to check their age
    old = compiled.stale()
    if old:
        pytest.exit(f"compiled modules older than their sources: {', '.join(old)}; run `make test` (it "
                    "compiles them again) or set FENECDB_PURE_PYTHON=1", returncode=2)
    left = [item for item in items if item.get_closest_marker("sources") is not None]
    if not left:
        return
    config.hook.pytest_deselected(items=left)
    items[:] = [item for item in items if item.get_closest_marker("sources") is None]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"NOTE: {len(left)} test(s) marked `sources` left to the run on the sources "
                            "(FENECDB_PURE_PYTHON=1 python -m pytest -m sources server/tests)", yellow=True)


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


def until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for `cond` under a generous deadline, never for a time to pass."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in 30 s"
        time.sleep(0.002)


def held(db) -> int:
    """The claims held in process (`Database.query(..., wait=)`) waiting now."""
    waiting = db._in_process
    return waiting.lines.held if waiting is not None else 0


class Caller:
    """A thread making one call; its answer or error kept."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.answer: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            self.answer = fn()
        except BaseException as e:
            self.error = e

    def result(self) -> object:
        self.thread.join(30)
        assert not self.thread.is_alive(), "no answer in 30 s"
        if self.error is not None:
            raise self.error
        return self.answer


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
