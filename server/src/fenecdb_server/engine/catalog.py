"""`Catalog`: what a statement's runner needs of the engine, and nothing else.

The collections by name (read under `lock`'s shared side, changed under its exclusive side), the
schema's version (bumped by every schema change, which also forgets every prepared statement),
the clock rows are compared with, and the prepared statements kept per text. The engine owns one
and hands it to the helpers that run statements (execute.py, scoped.py), make a claim ready to be
held (holds.py), bid for rows (bids.py) and count a queue's jobs (queues.py): they never hold
the engine itself, its parse cache, its log or its listeners.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import FenecError
from ..ql import ast as A
from .collection import Collection
from .controls import Controls
from .prepare import Prepared, prepare
from .rwlock import RWLock
from .schedules import Schedules

PARSE_CACHE = 4096  # statements kept parsed (and prepared) at most
# ... and at most this many characters of statement text between them: an AST holds up to ~40
# times its text (tests/unit/test_parser_linear.py), so a count alone would let a few large
# statements keep gigabytes. A text longer than CACHE_TEXT_MAX is parsed every time it comes.
CACHE_CHARS = 4 << 20
CACHE_TEXT_MAX = 64 << 10
# A statement this long (and not prepared yet) is compiled before the lock is taken: compiling
# a 1 MB `in` list takes seconds, which under the lock would stop every claim.
PREPARE_OUTSIDE = 2048


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Catalog:
    """The collections, the schema version, the clock and the prepared statements."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self.clock: Callable[[], int] = clock or wall_ms
        self.collections: dict[str, Collection] = {}
        self.lock = RWLock()
        self.version = 0
        self.plans: dict[tuple[str, Any], Any] = {}  # (text, 0 or a token's key) -> its plan
        self.plan_chars = 0
        self.cache_mutex = threading.Lock()  # the parse and plan caches' writers (a reader takes none)
        self.schedules = Schedules()  # recurring puts (schedules.py)
        self.controls = Controls()  # paused queues, caps and rate limits (controls.py, limits.py)
        self.term = 0  # the highest failover term this file's records named (records.py op `T`)

    def now(self) -> int:
        return int(self.clock())

    def reading(self) -> Reading:
        """`with catalog.reading():` the shared read lock."""
        return Reading(self.lock)

    def collection(self, name: str) -> Collection:
        c = self.collections.get(name)
        if c is None:
            raise FenecError("notfound", f"no collection `{name}`")
        return c

    def add_collection(self, coll: Collection) -> None:
        self.collections[coll.name] = coll
        self.schema_changed()

    def remove_collection(self, name: str) -> None:
        self.collections.pop(name, None)
        self.schema_changed()

    def schema_changed(self) -> None:
        with self.cache_mutex:
            self.version += 1
            self.plans.clear()
            self.plan_chars = 0

    def plan(self, key: tuple[str, Any]) -> Any:
        """A plan kept by `remember_plan`, or None."""
        return self.plans.get(key)

    def remember_plan(self, key: tuple[str, Any], plan: Any, version: int | None = None) -> None:
        """Keep a prepared statement, within the cache's count and characters. With `version`,
        only if the schema has not changed since it was read (a plan prepared outside the lock)."""
        text = key[0]
        if len(text) > CACHE_TEXT_MAX:
            return
        with self.cache_mutex:
            if version is not None and version != self.version:
                return
            if len(self.plans) >= PARSE_CACHE or self.plan_chars + len(text) > CACHE_CHARS:
                self.plans.clear()
                self.plan_chars = 0
            if key not in self.plans:
                self.plan_chars += len(text)
            self.plans[key] = plan

    def prepared(self, text: str, stmt: A.Statement, ready: dict | None = None) -> Prepared:
        """The statement `text` parsed to, prepared against the schema now (cached). `ready`:
        the statements prepared before the lock was taken, each with the version it read."""
        key = (text, 0)
        p = self.plans.get(key)
        if p is None and ready is not None:
            early = ready.get(key)
            if early is not None and early[0] == self.version:
                return early[1]
        if p is None:
            p = prepare(stmt, {n: c.schema for n, c in self.collections.items()}, controls=self.controls)
            self.remember_plan(key, p)
        return p

    def prepare_early(self, parsed: list[tuple[str, A.Statement, list]]) -> dict | None:
        """Compile the long statements before any lock is taken (PREPARE_OUTSIDE). Each is kept
        with the schema version it was read at, and used under the lock only if that version is
        still current; anything that goes wrong here is left for the locked path to meet again."""
        ready: dict | None = None
        for text, stmt, _ in parsed:
            if len(text) < PREPARE_OUTSIDE or type(stmt) not in (A.Get, A.Set, A.Del, A.Put):
                continue
            key = (text, 0)
            if key in self.plans:
                continue
            version = self.version
            try:
                p = prepare(stmt, {n: c.schema for n, c in list(self.collections.items())}, controls=self.controls)
            except Exception:  # a refusal or a schema read mid-change: the locked path decides
                continue
            if ready is None:
                ready = {}
            ready[key] = (version, p)
            self.remember_plan(key, p, version)
        return ready


class Reading:
    """`with catalog.reading():` the shared read lock."""

    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire_read()

    def __exit__(self, *exc: object) -> None:
        self._lock.release_read()
