"""`Engine`: the collections and everything that runs statements on them, safe from many threads.

    text -> ql.parse (cached) -> prepare (cached per schema version) -> execute.py / scoped.py
         -> one record (records.py) handed to the `Appender` -> listeners told -> durable

The engine owns the collections, the parse and prepare caches, the idempotency store
(idempotency.py), the record vocabulary (records.py) and the locks. It knows nothing of files:
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
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from .. import values as V
from ..errors import FenecError
from ..pacing import PACE_ROWS, hand_over
from ..plan.compile import Env
from ..policy import Scope
from ..ql import ast as A
from ..ql.literals import shape
from ..ql.parser import read
from . import records
from .collection import Collection
from .execute import (
    Block,
    run_create,
    run_create_index,
    run_del,
    run_drop,
    run_get,
    run_put,
    run_set,
    too_many_rows,
    too_many_writes,
)
from .holds import ReadyClaim, make_hold
from .idempotency import Idem, Keys, Stored
from .prepare import Prepared, prepare
from .queues import Tally
from .rwlock import Busy, RWLock
from .scoped import authorize as authorize_scoped
from .scoped import run as run_scoped

log = logging.getLogger("fenecdb.engine")

PARSE_CACHE = 4096  # statements kept parsed (and prepared) at most
# ... and at most this many characters of statement text between them: an AST holds up to ~40x
# its text (a 1 MB `in [1, 1, ...]`: 37 MB, tests/unit/test_parser_linear.py), so 20 distinct
# 10 MB statements kept 450 MB. A text longer than CACHE_TEXT_MAX is parsed every time it comes.
CACHE_CHARS = 4 << 20
CACHE_TEXT_MAX = 64 << 10
# A statement this long (and not prepared yet) is compiled before the lock is taken: compiling
# a 1 MB `in` list takes seconds, which under the lock would stop every claim.
PREPARE_OUTSIDE = 2048
SWEEP_GRACE_MS = 60_000
ONE_AT_A_TIME = "one statement at a time here: send several as a batch"

Parsed = tuple[str, A.Statement, list]  # (text, statement, params)
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
    Idempotency-Key, the stored answer (`replayed`; nothing ran). A plain class: compiled, a
    NamedTuple is made by a `__new__` that runs in the interpreter, once a statement."""

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


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Engine:
    """The collections in memory and the statements run on them. `appender` None: nothing is
    written anywhere (an in-memory database)."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or wall_ms
        self.collections: dict[str, Collection] = {}
        self.lock = RWLock()
        # text -> (statements, the highest parameter each names)
        self._parsed: OrderedDict[str, tuple[list[A.Statement], list[int]]] = OrderedDict()
        self._cache_mutex = threading.Lock()
        self.parsed_chars = 0
        self._plans: dict[tuple[str, Any], Any] = {}
        self.plan_chars = 0
        self._version = 0
        self.seq = 0
        self._listeners: list[Listener] = []
        self._observers: list[Callable[[int, list], None]] = []  # told each committed write's ops (observe)
        self.keys = Keys()  # Idempotency-Keys and their answers
        self.read_only = False
        self.closed = False
        self._failed: str | None = None
        self.appender: Appender | None = None
        self._last_ticket: object = None  # the appender's ticket of the last record appended
        self.tally = Tally(self.collections)  # jobs enqueued, claimed, acked, failed, dead-lettered per queue

    # ---------------------------------------------------------------- collections

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
        with self._cache_mutex:
            self._version += 1
            self._plans.clear()
            self.plan_chars = 0

    def schemas(self, scope: Scope | None = None) -> list[dict]:
        """Every collection's schema; under a token only those its rules let it see."""
        with self.reading():
            return [c.schema.to_json() for n, c in self.collections.items() if scope is None or scope.visible(n)]

    # ---------------------------------------------------------------- what others ask

    def now(self) -> int:
        return int(self._clock())

    def until(self, moment: int) -> float:
        """Seconds from now to `moment` (ms on this clock), to the wall clock's own precision
        rather than the whole ms `now()` counts: a timer set for it is not up to 1 ms late."""
        if self._clock is wall_ms:
            return (moment - time.time() * 1000) / 1000
        return (moment - self._clock()) / 1000

    def set_read_only(self, flag: bool) -> None:
        self.read_only = bool(flag)

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

    def reading(self) -> _Reading:
        return _Reading(self.lock)

    @property
    def failed(self) -> str | None:
        """Why writes are refused since a storage error, or None."""
        return self._failed

    def fail(self, why: str) -> None:
        """Refuse every later write (a storage error; the appender's own, too)."""
        self._failed = why

    # ---------------------------------------------------------------- parsing and preparing

    def parse(self, text: str) -> list[A.Statement]:
        return self._parse(text)[0]

    def _parse(self, text: Any) -> tuple[list[A.Statement], list[int]]:  # anything but text: 400
        if not isinstance(text, str):
            raise FenecError("query", "`query` must be text")
        got = self._parsed.get(text)
        if got is not None:
            return got
        entry = read(text)
        if len(text) > CACHE_TEXT_MAX:
            return entry
        with self._cache_mutex:
            if text not in self._parsed:
                self._parsed[text] = entry
                self.parsed_chars += len(text)
                while len(self._parsed) > PARSE_CACHE or self.parsed_chars > CACHE_CHARS:
                    old, _ = self._parsed.popitem(last=False)
                    self.parsed_chars -= len(old)
        return entry

    def cached(self, text: str) -> bool:
        """Whether `text` is parsed already (the HTTP layer runs a long uncached one off its loop)."""
        return text in self._parsed

    def parsed_texts(self) -> list[str]:
        return list(self._parsed)

    def plan(self, key: tuple[str, Any]) -> Any:
        """A plan kept by `remember_plan`, or None."""
        return self._plans.get(key)

    def remember_plan(self, key: tuple[str, Any], plan: Any, version: int | None = None) -> None:
        """Keep a prepared statement, within the cache's count and characters. With `version`,
        only if the schema has not changed since it was read (a plan prepared outside the lock)."""
        text = key[0]
        if len(text) > CACHE_TEXT_MAX:
            return
        with self._cache_mutex:
            if version is not None and version != self._version:
                return
            if len(self._plans) >= PARSE_CACHE or self.plan_chars + len(text) > CACHE_CHARS:
                self._plans.clear()
                self.plan_chars = 0
            if key not in self._plans:
                self.plan_chars += len(text)
            self._plans[key] = plan

    def prepared(self, text: str, stmt: A.Statement, ready: dict | None = None) -> Prepared:
        """The statement `text` parsed to, prepared against the schema now (cached)."""
        key = (text, 0)
        p = self._plans.get(key)
        if p is None and ready is not None:
            early = ready.get(key)
            if early is not None and early[0] == self._version:
                return early[1]
        if p is None:
            p = prepare(stmt, {n: c.schema for n, c in self.collections.items()})
            self.remember_plan(key, p)
        return p

    def _prepare_early(self, parsed: list[Parsed]) -> dict | None:
        """Compile the long statements before any lock is taken (PREPARE_OUTSIDE). Each is kept
        with the schema version it was read at, and used under the lock only if that version is
        still current; anything that goes wrong here is left for the locked path to meet again."""
        ready: dict | None = None
        for text, stmt, _ in parsed:
            if len(text) < PREPARE_OUTSIDE or type(stmt) not in (A.Get, A.Set, A.Del, A.Put):
                continue
            key = (text, 0)
            if key in self._plans:
                continue
            version = self._version
            try:
                p = prepare(stmt, {n: c.schema for n, c in list(self.collections.items())})
            except Exception:  # a refusal or a schema read mid-change: the locked path decides
                continue
            if ready is None:
                ready = {}
            ready[key] = (version, p)
            self.remember_plan(key, p, version)
        return ready

    def _statements(self, statements: list[tuple[Any, Any]], block: bool) -> list[Parsed]:
        if not block:
            if len(statements) != 1:
                raise FenecError("query", ONE_AT_A_TIME)
            return [self._statement(*statements[0])]
        out = []
        for i, (text, params) in enumerate(statements):
            if i % PACE_ROWS == 0 and i:
                hand_over()  # a /batch of many lines, in a worker thread (pacing.py)
            try:
                out.append(self._statement(text, params))
            except FenecError as e:
                e.at = i
                raise
        return out

    def _statement(self, text: Any, params: Any) -> Parsed:  # text checked by `_parse`
        try:  # the cache's hit, without a call
            stmts, needs = self._parsed[text]
        except (KeyError, TypeError):  # not parsed yet, or not text (which _parse refuses)
            shaped = shape(text) if type(text) is str and len(text) < PREPARE_OUTSIDE else None
            if shaped is not None:
                # a put of literal documents runs as its shape (ql/literals.py), parsed and
                # prepared once for every text that differs from it only in its values; the
                # texts themselves are not kept, so they push no other statement out
                text, params = shaped
            try:
                stmts, needs = self._parsed[text]
            except (KeyError, TypeError):
                stmts, needs = self._parse(text)
        if len(stmts) != 1:
            raise FenecError("query", ONE_AT_A_TIME)
        if type(params) is not list:
            params = _params(params)
        if needs[0] > len(params):
            raise FenecError("query", f"parameter ${needs[0]} is not bound")
        return text, stmts[0], params

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
            parsed = self._statements(statements, True)
            writes = any(s.writes for _, s, _ in parsed)
            if scope is None:
                ready = self._prepare_early(parsed)
        elif len(statements) == 1:  # the claim's path, without a call (bench/claim_bytecodes.py)
            parsed = [self._statement(*statements[0])]
            writes = parsed[0][1].writes
            if scope is None and len(parsed[0][0]) >= PREPARE_OUTSIDE:
                ready = self._prepare_early(parsed)
        else:
            raise FenecError("query", ONE_AT_A_TIME)
        if scope is not None:
            self._authorize(parsed, block, scope)
        if writes and self.read_only:
            err = FenecError("denied", "the server is in read-only mode")
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
                answers = self._run_reads(parsed, block, scope, ready, max_rows, 0 if block else pieces)
            finally:
                lock.release_read()
            if max_rows and scope is not None:
                _bounded(answers, max_rows, 0, 0)
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
                    answers = self._run_block(parsed, blk, scope, ready, max_rows, max_writes)
                else:  # one statement: the claim's path (bench/claim_bytecodes.py counts it)
                    text, stmt, params = parsed[0]
                    try:
                        answers = [self._run_one(text, stmt, params, blk, scope, ready, max_rows, max_writes)]
                    except BaseException as e:
                        blk.rollback()
                        raise _answered(e, False, 0, text, "running") from None
                if scope is not None and (max_rows or max_writes):
                    # a token's statements run their own picks (scoped.py): bounded here, before the record
                    try:
                        _bounded(answers, max_rows, max_writes, len(blk.ops))
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
        except Exception as error:  # named apart from the FenecError above: mypyc types a name once
            self._failed = f"internal error appending a record: {type(error).__name__}"
            log.exception("internal error appending a record")
            raise FenecError("io", f"{self._failed}: this write was not applied, but the file may hold "
                                   "it; every later write is refused until restart") from None
        self._last_ticket = ticket
        return ticket

    def _run_reads(self, parsed: list[Parsed], block: bool, scope: Scope | None, ready: dict | None,
                   rows: int = 0, pieces: int = 0) -> list:
        answers = []
        for i, (text, stmt, params) in enumerate(parsed):
            env = Env(params, V.Ts(self.now()))
            env.rows = rows
            try:
                if scope is not None:
                    env.claims = scope.claims
                    answers.append(run_scoped(self, text, stmt, env, None, scope))
                    continue
                answers.append(run_get(self, self.prepared(text, stmt, ready), env, pieces))
            except BaseException as e:
                raise _answered(e, block, i, text, "reading") from None
        return answers

    def _run_block(self, parsed: list[Parsed], blk: Block, scope: Scope | None, ready: dict | None,
                   rows: int = 0, writes: int = 0) -> list:
        answers = []
        for i, (text, stmt, params) in enumerate(parsed):
            if i % PACE_ROWS == 0 and i:
                hand_over()
            try:
                answers.append(self._run_one(text, stmt, params, blk, scope, ready, rows, writes))
            except BaseException as e:
                # A fault in the engine (a bug, a MemoryError) must never leave a half-applied
                # block behind: put back, logged, and answered as a fault; KeyboardInterrupt,
                # SystemExit: put back, then on their way.
                blk.rollback()
                raise _answered(e, True, i, text, "running") from None
        return answers

    def _run_one(self, text: str, stmt: A.Statement, params: list, blk: Block, scope: Scope | None,
                 ready: dict | None, rows: int = 0, writes: int = 0) -> Any:
        """One statement of a write block (a set or del adds the rows it took to `blk.taken`)."""
        env = Env(params, V.Ts(self._clock()))
        if rows or writes:
            env.rows = rows
            env.writes = writes
        t = type(stmt)
        if scope is not None:
            env.claims = scope.claims
            ans = run_scoped(self, text, stmt, env, blk, scope)
        elif t is A.Set:
            ans = run_set(self, self._plans.get((text, 0)) or self.prepared(text, stmt, ready), env, blk)
        elif t is A.Del:
            ans = run_del(self, self.prepared(text, stmt, ready), env, blk)
        elif t is A.Get:
            ans = run_get(self, self.prepared(text, stmt, ready), env)
        elif t is A.Put:
            ans = run_put(self, self.prepared(text, stmt, ready), env, blk)
        elif isinstance(stmt, A.CreateCollection):
            ans = run_create(self, stmt, blk)
        elif isinstance(stmt, A.DropCollection):
            ans = run_drop(self, stmt, blk)
        elif isinstance(stmt, A.CreateIndex):
            ans = run_create_index(self, stmt, blk)
        else:
            raise FenecError("query", f"cannot run {t.__name__}")
        return ans

    # ---------------------------------------------------------------- held claims

    def prepare_hold(self, statements: list[tuple[str, Any]], scope: Scope | None = None) -> ReadyClaim:
        parsed = self._statements(statements, block=len(statements) > 1)
        if scope is not None:
            self._authorize(parsed, len(statements) > 1, scope)
        return make_hold(self, parsed, scope=scope)

    def observe(self, note: Callable[[int, list], None]) -> int:
        """From now on call `note(seq, ops)` after each committed write, under the write lock, with
        the ops of its record (engine/records.py): it must only note, never read or write. Returns
        the change it starts after. (held/written.py keeps the ids claims that bid look among.)"""
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
        """Delete rows more than a minute past their @ttl, and Idempotency-Keys past theirs."""
        now = self.now()
        doomed: list[tuple[Collection, dict]] = []
        with self.reading():
            for coll in self.collections.values():
                ttl = coll.schema.ttl_field
                if ttl is None:
                    continue
                assert ttl.ttl_ms is not None  # a @ttl field always has its duration
                idx = coll.index(ttl.name)
                for rid in idx.walk(None, True, now - ttl.ttl_ms - SWEEP_GRACE_MS, True, False, False):
                    doomed.append((coll, coll.rows[rid]))
            old_keys = self.keys.expired(now)
        if not doomed and not old_keys:
            return 0
        ticket = None
        n = 0
        self.lock.acquire_write()
        try:
            if self._failed is not None:
                return 0
            blk = Block()
            for coll, row in doomed:
                if coll.rows.get(row["id"]) is row:
                    blk.touch(coll)
                    coll.delete(row, blk.undo)
                    blk.ops.append(("d", coll.name, row["id"]))
                    n += 1
            for k in old_keys:
                s = self.keys.get(k)
                if s is not None and not s.live(now):
                    self.keys.forget(k)
                    blk.ops.append(("K", k))
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


class _Reading:
    """`with engine.reading():` the shared read lock."""

    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire_read()

    def __exit__(self, *exc: object) -> None:
        self._lock.release_read()


def _params(params: Any) -> list:
    if params is None:
        return []
    if isinstance(params, (list, tuple)):
        return list(params)
    return [params]


def _bounded(answers: list, rows: int, writes: int, written: int) -> None:
    """Refuse answers past `rows` a statement, or `written` rows past `writes`, as the statements
    themselves refuse (execute.py), for the paths that pick on their own (a token's: scoped.py)."""
    if writes and written > writes:
        raise too_many_writes(writes)
    if rows:
        for answer in answers:
            if type(answer) is list and len(answer) > rows:
                raise too_many_rows(rows)


def _answered(e: BaseException, block: bool, i: int, text: str, doing: str) -> BaseException:
    """What a statement's failure is answered: a `FenecError` with the block's index (`unmet:`
    prefixed in a block), too deep as 400, any other fault logged and answered 500."""
    at = i if block else None
    if isinstance(e, FenecError):
        if block:
            e.at = i
            if e.kind == "unmet" and not e.message.startswith("unmet: "):
                e.message = "unmet: " + e.message
                e.args = (e.message,)
        return e
    if isinstance(e, RecursionError):
        return FenecError("query", "expression too deep", at=at)
    if isinstance(e, Exception):
        log.exception("internal error %s %r", doing, text[:200])
        return FenecError("io", f"internal error: {type(e).__name__}", at=at)
    return e
