"""`Engine`: the collections and everything that runs statements on them, safe from many threads.

    text -> ql.parse (cached: parse_cache.py) -> prepare (cached per schema version: catalog.py)
         -> running.py -> execute.py, puts.py, schema_changes.py / scoped.py
         -> one record (records.py) handed to the `Appender` -> listeners told -> durable

The engine owns a `Catalog` (catalog.py: the collections, the lock, the schema version, the
clock and the prepared statements, all that the statements' helpers are handed), the parse
cache, the idempotency store (idempotency.py) and the record vocabulary (records.py). It knows
nothing of files:
whoever opens a file (`Database`, database.py) hands it an `Appender` that writes its records.

Invariants (the server README lists them too):
* One writer. Every write statement or block runs under the exclusive lock; reads, and the
  looks of held claims, share the read lock. So two claims never pick the same row.
* A write is one atomic record: a block's writes, schema changes and Idempotency-Key answers
  are appended as one checksummed record, or the block is put back in memory and nothing is.
* The append's durability is waited for outside the write lock (group commit in storage).
* A storage error stops writes: the record is put back, that request is answered 500, and
  every later write is refused (500) until restart; reads go on.
* Limits raise errors; nothing is ever truncated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import FenecError
from ..policy import Scope
from . import records
from .catalog import PREPARE_OUTSIDE, Catalog, Reading, wall_ms
from .execute import Block
from .holds import HeldStatements, make_hold
from .idempotency import Idem, Keys, Stored
from .parse_cache import ONE_AT_A_TIME, ParseCache, Parsed
from .queues import Tally
from .running import answered, bounded, run_block, run_one, run_reads
from .rwlock import Busy
from .scoped import authorize as authorize_scoped
from .ttl import delete, expired

log = logging.getLogger("fenecdb.engine")
READ_ONLY = "the server is in read-only mode"

Listener = Callable[[frozenset[str], int], None]


class Appender(Protocol):
    """Where the engine's records go (the storage log, wired in by `Database`)."""

    def append(self, payload: bytes, seq: int, ops: list) -> object:
        """Append one record (`ops` as encoded, for accounting) and answer a ticket; raise
        `FenecError` if the record was not appended."""

    def wait_durable(self, ticket: object) -> None:
        """Return once the record of `ticket` is as durable as configured."""


class Result:
    """What `Engine.execute` answers: the answers, one per statement, the change number after
    it, whether it wrote, how many rows its set/del statements took, and, for a retried
    Idempotency-Key, the stored answer (`replayed`; nothing ran). A record class (the server
    README's "Compiled modules")."""

    __slots__ = ("answers", "seq", "wrote", "taken", "replayed")

    def __init__(self, answers: list, seq: int, wrote: bool, taken: int, replayed: Stored | None) -> None:
        self.answers = answers
        self.seq = seq
        self.wrote = wrote
        self.taken = taken
        self.replayed = replayed

    def __repr__(self) -> str:
        return (f"Result(answers={self.answers!r}, seq={self.seq!r}, wrote={self.wrote!r}, "
                f"taken={self.taken!r}, replayed={self.replayed!r})")


class Engine:
    """The collections in memory and the statements run on them. `appender` None: nothing is
    written anywhere (an in-memory database)."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        # the collections, schema version, clock, lock and prepared statements (catalog.py);
        # the engine keeps its own names for the ones a statement's run reads, the same objects
        self.catalog = catalog = Catalog(clock)
        self._clock = catalog.clock
        self.collections = catalog.collections
        self.lock = catalog.lock
        self._plans = catalog.plans
        self.texts = ParseCache(catalog.cache_mutex)  # statement texts parsed (parse_cache.py)
        self.seq = 0
        self._listeners: list[Listener] = []
        self._observers: list[Callable[[int, list], None]] = []  # told each committed write's ops (observe)
        self.keys = Keys()  # Idempotency-Keys and their answers
        self.read_only = False
        self.read_only_message = READ_ONLY  # the 403's words (a replica's name its primary)
        self.closed = False
        self._failed: str | None = None
        self.appender: Appender | None = None
        self._last_ticket: object = None  # the appender's ticket of the last record appended
        self.tally = Tally(self.collections)  # jobs enqueued, claimed, acked, failed, dead-lettered per queue
        catalog.controls.feed = self  # a cap's books follow the committed writes (limits.py)

    def schemas(self, scope: Scope | None = None) -> list[dict]:
        """Every collection's schema; under a token only those its rules let it see."""
        with self.reading():
            return [c.schema.to_json() for n, c in self.collections.items() if scope is None or scope.visible(n)]

    # ---------------------------------------------------------------- what others ask

    def now(self) -> int:
        return int(self._clock())

    def until(self, moment: int) -> float:
        """Seconds from now to `moment` (ms), to the wall clock's precision: a timer is not 1 ms late."""
        now = time.time() * 1000 if self._clock is wall_ms else self._clock()
        return (moment - now) / 1000

    def set_read_only(self, flag: bool, message: str | None = None) -> None:
        self.read_only, self.read_only_message = bool(flag), message or READ_ONLY

    def listen(self, callback: Listener) -> None:
        self._listeners.append(callback)

    def unlisten(self, callback: Listener) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def look(self, fn: Callable[[], Any]) -> Any:
        """Run fn under the shared read lock (a held claim's look)."""
        self.lock.acquire_read()
        try:
            return fn()
        finally:
            self.lock.release_read()

    def reading(self) -> Reading:
        return Reading(self.lock)

    @property
    def failed(self) -> str | None:
        """Why writes are refused since a storage error, or None."""
        return self._failed

    def fail(self, why: str) -> None:
        """Refuse every later write (a storage error; the appender's own, too)."""
        self._failed = why

    # ---------------------------------------------------------------- parsing and preparing

    def _authorize(self, parsed: list[Parsed], block: bool, scope: Scope) -> None:
        for i, (_, stmt, _) in enumerate(parsed):
            try:
                authorize_scoped(stmt, scope)
            except FenecError as e:
                if block:
                    e.at = i
                raise

    # ---------------------------------------------------------------- running

    def execute(self, statements: list[tuple[Any, Any]], *, block: bool = False,
                idempotency: Idem | None = None, scope: Scope | None = None, max_rows: int = 0,
                max_writes: int = 0, nowait: bool = False, pieces: int = 0) -> Result:
        """Run one statement, or with `block` several as one block: each a (text, params) pair, the
        text checked here (400 for anything but text). `scope` None runs as the
        server token; a `policy.Scope` runs under that token's rules (scoped.py), every
        statement authorized before any runs. With `idempotency`, a write keeps its answers
        under the key, and a retry of it is answered them (`Result.replayed`).

        `max_rows` and `max_writes` (0: none) bound what one statement may answer and the whole may
        write: past either it is refused (`toolarge`, 413) and nothing is written; a get, set or
        del stops picking one row past the bound, and a put is refused before it writes.
        `nowait` raises `Busy` rather than wait for the lock. With `pieces`, a lone get that
        answers more rows than that answers them as `prepare.Rows`, rendered when they are asked for."""
        ready = None
        if block:
            parsed = self.texts.statements(statements, True)
            writes = any(s.writes for _, s, _ in parsed)
            if scope is None:
                ready = self.catalog.prepare_early(parsed)
        elif len(statements) == 1:  # the claim's path: one statement, no block
            parsed = [self.texts.statement(*statements[0])]
            writes = parsed[0][1].writes
            if scope is None and len(parsed[0][0]) >= PREPARE_OUTSIDE:
                ready = self.catalog.prepare_early(parsed)
        else:
            raise FenecError("query", ONE_AT_A_TIME)
        if scope is not None:
            self._authorize(parsed, block, scope)
        if writes and self.read_only:
            err = FenecError("denied", self.read_only_message)
            if block:
                err.at = next(i for i, (_, s, _) in enumerate(parsed) if s.writes)
            raise err
        if self.closed:
            raise FenecError("unavailable", "the database is closed")
        lock = self.lock
        if not writes:
            if not nowait:
                lock.acquire_read()
            elif not lock.try_read():
                raise Busy()
            try:
                answers = run_reads(self.catalog, parsed, block, scope, ready, max_rows, 0 if block else pieces)
            finally:
                lock.release_read()
            if max_rows and scope is not None:
                bounded(answers, max_rows, 0, 0)
            return Result(answers, self.seq, False, 0, None)
        if self._failed is not None:
            raise FenecError("io", f"writes are refused since the disk failed: {self._failed}")
        ticket = None
        stored = None
        if not nowait:
            lock.acquire_write()
        elif not lock.try_write():
            raise Busy()
        try:
            if idempotency is not None:
                stored = self.keys.find(idempotency, self.now())
            if stored is not None:
                # the answer of a write whose record may not be synced yet (that write waits for
                # its fdatasync now): the replay waits for it as the write does, never answering first
                ticket = self._last_ticket
                result = Result([], self.seq, False, 0, stored)
            else:
                blk = Block()
                if block:
                    answers = run_block(self.catalog, parsed, blk, scope, ready, max_rows, max_writes)
                else:  # one statement: the claim's path, without the block's loop
                    text, stmt, params = parsed[0]
                    try:
                        answers = [run_one(self.catalog, text, stmt, params, blk, scope, ready, max_rows, max_writes)]
                    except BaseException as e:
                        blk.rollback()
                        raise answered(e, False, 0, text, "running") from None
                if scope is not None and (max_rows or max_writes):
                    # a token's statements run their own picks (scoped.py): bounded here, before the record
                    try:
                        bounded(answers, max_rows, max_writes, len(blk.ops))
                    except FenecError:
                        blk.rollback()
                        raise
                if idempotency is not None and (blk.taken > 0 or idempotency.keep_empty):
                    ticket = self._commit(blk, idempotency, answers)
                elif blk.ops:
                    ticket = self._commit(blk)
                result = Result(answers, self.seq, True, blk.taken, None)
        finally:
            lock.release_write()
        if ticket is not None:
            self._durable(ticket)
        return result

    def _durable(self, ticket: object) -> None:
        assert self.appender is not None
        try:
            self.appender.wait_durable(ticket)
        except FenecError as e:
            self._failed = e.message
            raise

    def _commit(self, blk: Block, idempotency: Idem | None = None, answers: list | None = None) -> object:
        """Under the write lock: keep the key with the answers, number the block, append its
        record and tell who listens; answer the appender's ticket (None in memory).

        All of it or none of it: an exception at any step before the append (a `FenecError`, a
        bug, a `MemoryError`, an encoder's refusal) puts the block back, its key and the change
        counter with it, before it goes on up, so nothing unwritten is ever read, claimed or
        replayed. Only a failed append stops later writes: the disk may hold part of that
        record, or all of it."""
        seq = self.seq
        ticket = None
        try:
            if idempotency is not None:
                stored = Stored(idempotency.request_hash, answers, None, self.now(), idempotency.ttl_ms)
                blk.ops.append(("k", idempotency.key, stored))
                blk.schema_undo.append(self.keys.keep(idempotency.key, stored))
            self.seq += blk.writes or 1
            if self.appender is not None:
                payload, out = records.encode(self.seq, blk.ops, self.collections)
                ticket = self._append(payload, out)
        except BaseException as e:
            blk.rollback()
            self.seq = seq
            if isinstance(e, FenecError) or not isinstance(e, Exception):
                raise
            log.exception("internal error storing a write")
            raise FenecError("io", f"internal error: {type(e).__name__}") from None
        # appended: tell the bidding tracker and the listeners. The write has landed, so a
        # fault here is logged, never answered as the write's failure.
        try:
            for note in self._observers:
                note(self.seq, blk.ops)
            self.tally.note(blk.undo, blk.ops)
            if self._listeners:
                touched = frozenset(blk.touched)
                for cb in self._listeners:
                    cb(touched, self.seq)
        except Exception:
            log.exception("internal error announcing change %d", self.seq)
        return ticket

    def _append(self, payload: bytes, out: list) -> object:
        assert self.appender is not None
        try:
            ticket = self.appender.append(payload, self.seq, out)
        except FenecError as e:
            self._failed = e.message
            raise
        except Exception as error:
            self._failed = f"internal error appending a record: {type(error).__name__}"
            log.exception("internal error appending a record")
            raise FenecError("io", f"{self._failed}: this write was not applied, but the file may hold "
                                   "it; every later write is refused until restart") from None
        self._last_ticket = ticket
        return ticket

    # ---------------------------------------------------------------- held claims

    def prepare_hold(self, statements: list[tuple[str, Any]], scope: Scope | None = None) -> HeldStatements:
        parsed = self.texts.statements(statements, block=len(statements) > 1)
        if scope is not None:
            self._authorize(parsed, len(statements) > 1, scope)
        if self.read_only and any(s.writes for _, s, _ in parsed):
            raise FenecError("denied", self.read_only_message)  # before the collection is looked up
        return make_hold(self.catalog, parsed, scope=scope)

    def observe(self, note: Callable[[int, list], None], locked: bool = False) -> int:
        """From now on call `note(seq, ops)` after each committed write, under the write lock, with
        the ops of its record (engine/records.py): it must only note, never read or write. Returns
        the change it starts after. (held/written.py keeps the ids claims that bid look among.)
        `locked`: the caller holds a lock of the engine already (a capped claim's books, limits.py)."""
        if locked:
            self._observers.append(note)
            return self.seq
        self.lock.acquire_write()
        try:
            self._observers.append(note)
            return self.seq
        finally:
            self.lock.release_write()

    def unobserve(self, note: Callable[[int, list], None]) -> None:
        self.lock.acquire_write()
        try:
            if note in self._observers:
                self._observers.remove(note)
        finally:
            self.lock.release_write()

    # ---------------------------------------------------------------- the TTL sweep

    def sweep(self) -> int:
        """Delete rows more than a minute past their @ttl, and Idempotency-Keys past theirs (ttl.py)."""
        now = self.now()
        with self.reading():
            doomed, old_keys = expired(self.catalog, self.keys, now)
        if not doomed and not old_keys:
            return 0
        ticket = None
        self.lock.acquire_write()
        try:
            if self._failed is not None:
                return 0
            blk, n = delete(doomed, old_keys, self.keys, now)
            if blk.ops:
                try:
                    ticket = self._commit(blk)
                except FenecError:
                    return 0
        finally:
            self.lock.release_write()
        if ticket is not None:
            self._durable(ticket)
        return n


def run_write(eng: Engine, fn: Callable[[Block], Any]) -> Any:
    """Run `fn(blk)` as one write of its own under the write lock: the block committed as one
    record when it holds any op, put back whole when `fn` raises; answer what `fn` answers
    (engine/schedules.py fires through this)."""
    if eng.read_only:
        raise FenecError("denied", eng.read_only_message)
    if eng.closed:
        raise FenecError("unavailable", "the database is closed")
    if eng.failed is not None:
        raise FenecError("io", f"writes are refused since the disk failed: {eng.failed}")
    ticket = None
    eng.lock.acquire_write()
    try:
        blk = Block()
        try:
            out = fn(blk)
        except BaseException:
            blk.rollback()
            raise
        if blk.ops:
            ticket = eng._commit(blk)
    finally:
        eng.lock.release_write()
    if ticket is not None:
        eng._durable(ticket)
    return out
