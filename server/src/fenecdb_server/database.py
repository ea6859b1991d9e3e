"""`Database`: the engine (engine/engine.py) and its data file (storage/) behind one object.

A facade: it holds an `Engine` (`engine`) and, on a file, the `Log` the engine's records are
appended to, and answers the public face the HTTP app, the CLI, the held-claim drivers and
in-process callers use. Nothing else of the engine is reached through it; a test that reads the
engine's caches or locks asks `db.engine`.

    Database(path)  opens the file: its snapshot and records are read back into the engine
                    (engine/records.py), and every later write's record is appended to it
    query, batch    run statements (fenecql.md); `execute` runs a list of them as the engine does
    close           sync what is dirty and close the file
    compact, backup a snapshot of the engine swapped in beside the file, or answered as a file
    stats           documents and job states per collection, and the file's counts
    the rest        what HTTP and the held claims read: `seq`, `now`, `until`, `look`, `listen`,
                    `observe`, `prepare_hold`, `schemas`, `cached`, `tally`, `sweep`, ...

In memory when `path` is None: the same engine, and nothing is written anywhere.
"""

from __future__ import annotations

import collections
import io
import logging
import os
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from functools import partial
from typing import IO, Any

from .engine import records
from .engine.collection import Collection
from .engine.controls import Controls
from .engine.engine import Engine, Listener, Reading, Result, run_write
from .engine.holds import HeldStatements
from .engine.idempotency import Idem, Keys
from .engine.prepare import Rows
from .engine.queues import Tally
from .engine.queues import stats as queue_stats
from .engine.rwlock import Busy
from .engine.schedules import Schedules, Timer, fire_due
from .errors import FenecError
from .gc_policy import LARGE_TEXT, held_off
from .held.in_process import InProcess
from .policy import Scope
from .storage import Log, StorageFailed
from .storage.footprint import Footprint
from .storage.format import FILE_HEADER_SIZE, RECORD_HEADER_SIZE, check_size, file_header, record_head
from .storage.group_commit import Deferred

# The database's public face: what HTTP (and any caller) may import, here and nowhere below:
# `Database`, and the types its answers and refusals carry (a statement's `Result`, a long get's
# `Rows`, the lock's `Busy`, a key's `Idem`, a sync's `Deferred` tickets and `StorageFailed`), and
# the data file's header, which a replica's stream starts with.
__all__ = ["FILE_HEADER_SIZE", "Busy", "Database", "Deferred", "Idem", "Result", "Rows", "StorageFailed",
           "file_header", "wrap"]

log = logging.getLogger("fenecdb.database")


def _hand_over() -> None:
    """Between two chunks of a snapshot's encoding (a compaction's, a backup's, both in a worker
    thread): the GIL to the thread waiting for it, the server's event loop, which would otherwise
    wait for the interpreter's 5 ms switch and answer nothing meanwhile. `time.sleep(0)` lets go
    of the GIL and lets the loop take it first (`os.sched_yield` lets the encoder take it back
    first). A process with no other thread (an in-process `Database` compacting on its caller's
    thread) has no one to hand over to, and skips the sleep. bench/README.md ("Compiled modules,
    and what was measured and not kept") has the measurements."""
    if threading.active_count() > 1:
        time.sleep(0)


class Pace:
    """How a compaction's (or a backup's) encoder shares the interpreter with a server's event
    loop, called between two chunks: it hands the GIL over (`_hand_over`), and once it has run
    `slice_s` since its last rest, it rests `rest_s` if the loop answered requests since its last
    look (`requests()`: the server's count of answers). An idle server's compaction runs flat out;
    a busy one's gives the loop whole stretches of its time, not only the moments between chunks.
    Every hand-over costs the loop a switch of threads, where a rest costs it none, and the
    encoder loses little to a rest: it spends most of its time waiting for the GIL after each
    hand-over anyway. The slice and the rest are the best of those measured (bench/README.md, "A
    compaction that rests while the requests come").
    """

    __slots__ = ("requests", "slice_s", "rest_s", "_began", "_seen", "rests")

    def __init__(self, requests: Callable[[], int], slice_s: float = 0.001, rest_s: float = 0.009) -> None:
        self.requests = requests
        self.slice_s = slice_s
        self.rest_s = rest_s
        self._began = time.perf_counter()
        self._seen = requests()
        self.rests = 0  # answered with the compaction, as `rests`

    def __call__(self) -> None:
        _hand_over()
        if time.perf_counter() - self._began < self.slice_s:
            return
        seen = self.requests()
        if seen != self._seen:  # answers since the last look (in the slice, or in the last rest)
            time.sleep(self.rest_s)
            self.rests += 1
        self._seen = seen
        self._began = time.perf_counter()


class _LogAppender:
    """The engine's `Appender`: records go to the log, their bytes to the dead-bytes estimate."""

    __slots__ = ("_log", "_footprint", "_documents")

    def __init__(self, log_: Log, footprint: Footprint, documents: Callable[[str], int]) -> None:
        self._log = log_
        self._footprint = footprint
        self._documents = documents

    def append(self, payload: bytes, seq: int, ops: list) -> object:
        ticket = self._log.append(payload)
        try:  # appended: from here on the write stands, whatever else fails
            self._footprint.record(len(payload), seq, ops, self._documents)
        except Exception:
            log.exception("internal error measuring change %d", seq)
        return ticket

    def wait_durable(self, ticket: object) -> None:
        assert isinstance(ticket, int)
        self._log.wait_durable(ticket)


class Ahead:
    """A replica's records in the file and not yet in the engine (replication/follower.py): the
    replica writes them to its file in one write (`append`), makes them durable and acks them,
    and only then replays them (`apply`), so that its ack waits for no replay. Not under the
    engine's write lock (the replica's reads go on); a crash before the replay loses nothing, as
    recovery replays the file. `payloads` are those records, oldest first, and `size` their bytes
    in the file (headers included). `lock` orders an append with a compaction's mark: the mark,
    taken under the engine's write lock and this one, stands before these records, so the
    snapshot (of the engine, which does not hold them) is followed by them in the new file. A
    replay takes the engine's write lock, then this one."""

    __slots__ = ("lock", "payloads", "size", "_engine", "_log", "_footprint", "_documents")

    def __init__(self, engine: Engine, log_: Log | None, footprint: Footprint,
                 documents: Callable[[str], int]) -> None:
        self.lock = threading.Lock()
        self.payloads: collections.deque[bytes] = collections.deque()
        self.size = 0
        self._engine = engine
        self._log = log_
        self._footprint = footprint
        self._documents = documents

    @property
    def waiting(self) -> int:
        """How many records are in the file and not yet in the engine."""
        return len(self.payloads)

    def append(self, frames: bytes, payloads: list[bytes]) -> int:
        """Write records (checked, in order) to the file in one write; answer the last one's
        ticket (0 in memory: nothing to make durable). `frames` are the records with their
        headers, as the stream carried them and the file holds them (written as they are, their
        checks not computed again), `payloads` the same records without. Raises StorageFailed as
        an append does."""
        with self.lock:
            ticket = self._log.append_framed(frames, len(payloads)) if self._log is not None else 0
            self.payloads.extend(payloads)
            self.size += len(frames)
        return ticket

    def apply(self, most: int) -> int:
        """Replay up to `most` of them, oldest first, as their net effect (engine/records.py's
        `replay_all`), under one hold of the engine's write lock; answer how many were taken (0:
        none was waiting). A record whose replay fails (never on a primary's stream: a bug) raises,
        with those before it applied; it and every one after it are dropped from those waiting, as
        the memory no longer follows the file (the follower then asks its primary for an image,
        which replaces both)."""
        engine = self._engine
        done: list[tuple[bytes, int, list]] = []
        engine.lock.acquire_write()
        try:
            with self.lock:  # taken under the engine's lock: a compaction's mark sees them in one place or the other
                batch = [self.payloads.popleft() for _ in range(min(most, len(self.payloads)))]
                self.size -= sum(RECORD_HEADER_SIZE + len(p) for p in batch)
            try:
                records.replay_all(engine, batch, done)
            except BaseException:
                with self.lock:  # none after it is replayed over a memory that lacks it
                    self.payloads.clear()
                    self.size = 0
                raise
            finally:
                for payload, seq, ops in done:
                    try:
                        self._footprint.record(len(payload), seq, ops, self._documents)
                    except Exception:
                        log.exception("internal error measuring change %d", seq)
        finally:
            engine.lock.release_write()
        return len(batch)


class Database:
    """A FenecDB database: in memory when `path` is None, else the data file at `path`."""

    def __init__(self, path: str | None = None, *, sync: str | int = 250,
                 clock: Callable[[], int] | None = None, files: Any = None, schedule_timer: bool = True) -> None:
        """`schedule_timer`: fire schedules from a thread of this database while it is open (on
        the wall clock only: with a `clock` of its own, `fire_due()` fires them). The HTTP
        server passes False and fires them from its event loop."""
        self.engine = Engine(clock)
        self._timer: Timer | None = None
        self._in_process: InProcess | None = None  # claims held by callers in process (`query(wait=)`)
        self._in_process_mutex = threading.Lock()
        self.path = path
        self._log: Log | None = None
        self._footprint = Footprint()  # the dead-bytes estimate (storage/footprint.py)
        self.auto_compactions = 0
        self.last_compaction: dict = {}
        if path is not None:
            self._log = Log(path, sync=sync, files=files) if files is not None else Log(path, sync=sync)
            snapshot, recs = self._log.open()
            if snapshot is not None:
                self._footprint.calibrate(*records.load_snapshot(self.engine, snapshot))
            for payload in recs:
                seq, ops = records.replay(self.engine, payload)
                self._footprint.record(len(payload), seq, ops, self._documents)
            self.engine.appender = _LogAppender(self._log, self._footprint, self._documents)
        self.ahead = Ahead(self.engine, self._log, self._footprint, self._documents)  # a replica's records
        if schedule_timer and clock is None:
            self._timer = Timer(self)
            self.engine.catalog.schedules.changed = self._timer.poke
            if self.engine.catalog.schedules.by_name:
                self._timer.poke()

    def fire_due(self) -> int:
        """Fire the schedules whose due times have come, each due time once (engine/schedules.py);
        answer how many fired. None on a read-only, failed or closed database: late, never lost."""
        engine = self.engine
        if engine.read_only or engine.failed is not None or engine.closed:
            return 0
        return fire_due(engine.catalog, partial(run_write, engine))

    @property
    def schedules(self) -> Schedules:
        """The schedules and their firing switch (engine/schedules.py)."""
        return self.engine.catalog.schedules

    @property
    def controls(self) -> Controls:
        """The queues' pauses, caps and rate limits (engine/controls.py)."""
        return self.engine.catalog.controls

    def query(self, text: Any, params: Any = None, *, wait: Any = 0) -> Any:  # checked, not only typed: 400s
        """Run one statement and answer what `POST /query` answers.

        `wait` (ms, at most 30 000) holds a claim as `Fenec-Wait` does over HTTP: a `set` or `del`
        that takes no row (or misses its `require`) blocks the calling thread until a run takes
        rows, which it answers, or until the deadline, which answers what the last run answered
        (`[]`, or the `require` miss raised again). Claims held together wait in lines, first come
        first served, and are woken by writes from any thread and by the clock (held/lines.py). A
        `get` does not wait; a `put` or a schema statement with `wait` is refused (400)."""
        if wait:
            return self._held().query(text, params, wait)
        if type(text) is str and len(text) >= LARGE_TEXT:
            return held_off(partial(self.engine.execute, [(text, params)])).answers[0]
        return self.engine.execute([(text, params)]).answers[0]  # one statement, not a block

    def _held(self) -> InProcess:
        with self._in_process_mutex:
            if self._in_process is None:
                if self.engine.closed:
                    raise FenecError("unavailable", "the database is closed")
                self._in_process = InProcess(self.engine)
            return self._in_process

    def batch(self, statements: Iterable[tuple[str, Any]]) -> list:
        stmts = list(statements)
        if not stmts:
            raise FenecError("query", "empty batch")
        if sum(len(s[0]) for s in stmts if type(s) is tuple and s and type(s[0]) is str) >= LARGE_TEXT:
            res = held_off(partial(self.engine.execute, stmts, block=True))
        else:
            res = self.engine.execute(stmts, block=True)
        return [wrap(a) for a in res.answers]

    def close(self) -> bool:
        """Stop taking statements, sync what is dirty, close the file. Return whether anything
        was dirty, i.e. whether the way out had to fsync (False in memory and when closed).
        Raises the storage error when that last fsync fails."""
        engine = self.engine
        if engine.closed:
            return False
        if self._timer is not None:
            self._timer.stop()
        if self._in_process is not None:
            self._in_process.close()  # held claims answered with their last answers first
        engine.lock.acquire_write()
        try:
            engine.closed = True
            if self._log is not None:
                return bool(self._log.close())
            return False
        finally:
            engine.lock.release_write()

    # ---------------------------------------------------------------- snapshots

    def compact(self, *, auto: bool = False, pace: Callable[[], None] | None = None) -> dict:
        """Write a snapshot beside the file and swap it in (storage does the safe rename).
        `auto`: run by the background check (counted for `fenec_auto_compactions_total`);
        `pace`: called between chunks of the encoding (a server's `Pace`; `_hand_over` if None)."""
        if self._log is None:
            return {}
        done = _compact(self.engine, self._log, self._footprint, self.ahead, pace)
        self.last_compaction = done
        if auto:
            self.auto_compactions += 1
        return done

    def backup(self, *, pace: Callable[[], None] | None = None) -> tuple[int, bytes]:
        """A consistent copy of the whole database as the bytes of a data file that
        `Database(path)` or `fenec-server --file` opens (`backup_to`, in memory); works in memory
        too."""
        out = io.BytesIO()
        seq = self.backup_to(out, pace=pace)
        return seq, out.getvalue()

    def backup_file(self, *, pace: Callable[[], None] | None = None) -> tuple[int, int, IO[bytes]]:
        """`backup_to` a temporary file: beside the data file (on its disk, whose room it takes),
        or in the system's temporary directory for a database in memory. The file has no name
        (it is gone once closed, or when the process ends, however it ends); it is answered
        with the change number and its size, at its start, for the caller to read and close.
        An OSError (no room, no descriptor left) is a FenecError `io`, the file closed."""
        where = os.path.dirname(os.path.abspath(self.path)) if self.path is not None else None
        try:
            out = tempfile.TemporaryFile(dir=where)
        except OSError as e:
            raise FenecError("io", f"backup failed: {e}") from None
        try:
            seq = self.backup_to(out, pace=pace)
            size = out.tell()
            out.seek(0)
        except OSError as e:
            out.close()
            raise FenecError("io", f"backup failed: {e}") from None
        except BaseException:
            out.close()
            raise
        return seq, size, out

    def backup_to(self, out: IO[bytes], *, pace: Callable[[], None] | None = None) -> int:
        """Write a consistent copy of the whole database to `out` (seekable, at its start) as a
        data file (`write_data_file`), and answer the change number it holds. The copy is taken
        under the shared lock: writes wait for a copy of each collection's row map, not for the
        encoding."""
        with self.engine.reading():
            state = records.snapshot_state(self.engine)
        seq = int(state["s"])
        write_data_file(out, records.snapshot_pieces(state, pace or _hand_over))
        return seq

    # ---------------------------------------------------------------- introspection

    @property
    def log(self) -> Log | None:
        """The data file's `storage.Log` (None in memory): the HTTP loop shares one fdatasync
        among a turn's writes with it under `--sync always` (http/durable.py)."""
        return self._log

    @property
    def failed(self) -> str | None:
        """Why writes are refused since a storage error (the periodic syncer's included), or None."""
        engine = self.engine
        if engine.failed is None and self._log is not None and self._log.failed:
            engine.fail(self._log.failure or "the disk failed")
        return engine.failed

    def storage_stats(self) -> dict:
        """The log's own counts, plus the live and reclaimable bytes of `storage/footprint.py`
        (`reclaimable_bytes`: what a compaction would give back, estimated). Empty in memory."""
        if self._log is None:
            return {}
        out = self._log.stats()
        engine = self.engine
        with engine.reading():
            docs = {name: len(c.rows) for name, c in engine.collections.items()}
            schemas = {name: records.schema_bytes(c) for name, c in engine.collections.items()}
            total = self._footprint.live(docs, schemas, len(engine.keys))["total"]
        file_bytes = out["file_bytes"]
        assert isinstance(total, int) and isinstance(file_bytes, int)
        out["live_bytes"] = total
        out["reclaimable_bytes"] = max(0, file_bytes - total)
        out["auto_compactions"] = self.auto_compactions
        return out

    def _documents(self, name: str) -> int:
        coll = self.engine.collections.get(name)
        return len(coll.rows) if coll is not None else 0

    def stats(self) -> dict:
        """Documents and job states per collection (engine/queues.py `stats`), the change
        number, the file's counts, and whether writes are refused."""
        out = queue_stats(self.engine.catalog, self.engine.seq)
        storage = self.storage_stats()
        if storage:
            for name, st in out["collections"].items():
                st["data_bytes"] = int(st["documents"] * self._footprint.row_bytes(name))
        out.update({"storage": storage, "failed": self.failed is not None})
        return out

    # ---------------------------------------------------------------- the engine's public face

    def execute(self, statements: list[tuple[Any, Any]], *, block: bool = False,
                idempotency: Idem | None = None, scope: Scope | None = None, max_rows: int = 0,
                max_writes: int = 0, nowait: bool = False, pieces: int = 0) -> Result:
        """Run statements as `Engine.execute` does (its docstring says how)."""
        return self.engine.execute(statements, block=block, idempotency=idempotency, scope=scope,
                                   max_rows=max_rows, max_writes=max_writes, nowait=nowait, pieces=pieces)

    def prepare_hold(self, statements: list[tuple[str, Any]], scope: Scope | None = None) -> HeldStatements:
        """The statements made ready to be held (engine/holds.py)."""
        return self.engine.prepare_hold(statements, scope)

    @property
    def seq(self) -> int:
        """The number of the last committed change."""
        return self.engine.seq

    @property
    def closed(self) -> bool:
        return self.engine.closed

    @property
    def read_only(self) -> bool:
        return self.engine.read_only

    def set_read_only(self, flag: bool, message: str | None = None) -> None:
        """Refuse every write (403) with `message` (default: the server is in read-only mode)."""
        self.engine.set_read_only(flag, message)

    def now(self) -> int:
        """The clock rows are compared with, in ms."""
        return self.engine.now()

    def until(self, moment: int) -> float:
        return self.engine.until(moment)

    def look(self, fn: Callable[[], Any]) -> Any:
        """`fn()` under the shared read lock."""
        return self.engine.look(fn)

    def reading(self) -> Reading:
        """`with db.reading():` the shared read lock."""
        return self.engine.reading()

    def listen(self, callback: Listener) -> None:
        self.engine.listen(callback)

    def unlisten(self, callback: Listener) -> None:
        self.engine.unlisten(callback)

    def observe(self, note: Callable[[int, list], None]) -> int:
        return self.engine.observe(note)

    def unobserve(self, note: Callable[[int, list], None]) -> None:
        self.engine.unobserve(note)

    def sweep(self) -> int:
        """Delete rows past their @ttl and Idempotency-Keys past theirs (`Engine.sweep`)."""
        return self.engine.sweep()

    @property
    def collections(self) -> dict[str, Collection]:
        """The collections by name (read them under `reading()`)."""
        return self.engine.collections

    def collection(self, name: str) -> Collection:
        """The collection `name`, or FenecError `notfound`."""
        return self.engine.catalog.collection(name)

    @property
    def keys(self) -> Keys:
        """The Idempotency-Keys kept, with their answers."""
        return self.engine.keys

    def schemas(self, scope: Scope | None = None) -> list[dict]:
        """Every collection's schema; under a token only those its rules let it see."""
        return self.engine.schemas(scope)

    def cached(self, text: str) -> bool:
        """Whether `text` is parsed already (HTTP runs a long uncached one off its loop)."""
        return self.engine.texts.cached(text)

    @property
    def tally(self) -> Tally:
        """The queue counters: jobs enqueued, claimed, acked, failed, dead-lettered per queue."""
        return self.engine.tally


def write_data_file(out: IO[bytes], pieces: Iterable[bytes]) -> None:
    """A data file of one snapshot record written to `out` (seekable, at its start): the file
    header, then the payload a chunk of rows at a time (`records.snapshot_pieces`), so the memory
    it takes is one chunk's; the record's header, whose length and crc32 are known only at the
    end, is written last in the room left for it."""
    out.write(file_header() + bytes(RECORD_HEADER_SIZE))
    size = 0
    crc = 0
    try:
        for piece in pieces:
            size += len(piece)
            check_size(size)
            crc = zlib.crc32(piece, crc)
            out.write(piece)
        head = record_head(size, crc, snapshot=True)
    except ValueError as e:
        raise FenecError("io", f"backup failed: {e}") from None
    end = out.tell()
    out.seek(FILE_HEADER_SIZE)
    out.write(head)
    out.seek(end)
    out.flush()


def wrap(answer: Any) -> dict:
    """A statement's answer in a block's `results` form (http.md §4)."""
    if isinstance(answer, list):
        return {"rows": answer}
    return answer


def _compact(engine: Engine, log_: Log, footprint: Footprint, ahead: Ahead,
             pace: Callable[[], None] | None) -> dict:
    """`Database.compact`'s snapshot: the row maps copied under the write lock, encoded and
    written outside it, swapped in by the log; the dead-bytes estimate calibrated after. The
    snapshot's mark stands before a replica's records not yet replayed (`Ahead`)."""
    lock = engine.lock
    lock.acquire_write()
    try:
        locked = time.perf_counter()
        with ahead.lock:
            mark = log_.compaction_start(ahead.size, len(ahead.payloads))
        state = records.snapshot_state(engine)
        write_lock_us = int((time.perf_counter() - locked) * 1e6)
    finally:
        lock.release_write()
    try:
        began = time.perf_counter()
        parts, sizes = records.encode_snapshot(state, pace or _hand_over)
        del state
        encoded = time.perf_counter()
        done = log_.compaction_finish(parts, mark)
        done["encode_ms"] = int((encoded - began) * 1000)
        done["write_ms"] = int((time.perf_counter() - encoded) * 1000)
        done["write_lock_us"] = write_lock_us  # the copy of the row maps (writes wait for it)
        if isinstance(pace, Pace):
            done["rests"] = pace.rests
        lock.acquire_write()
        try:
            footprint.calibrate(sizes["rows"], sizes["keys"])
        finally:
            lock.release_write()
        return done
    except BaseException:
        try:
            log_.compaction_cancel()
        except Exception:
            pass
        raise
