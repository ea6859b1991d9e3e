"""`Database`: the engine and its data file behind one object, safe from many threads.

    text -> ql.parse (cached) -> engine.prepare (cached per schema version) -> engine.execute
         -> one record appended to the storage log -> listeners told -> fsync outside the lock

Invariants (the server README lists them too):
* One writer. Every write statement or block runs under the exclusive lock; reads, and the
  looks of held claims, share the read lock. So two claims never pick the same row.
* A write is one atomic record: a block's writes, schema changes and Idempotency-Key answer
  are appended as one checksummed record, or the block is put back in memory and nothing is.
* fsync runs outside the write lock (group commit in the storage layer).
* A storage error stops writes: the record is put back, that request is answered 500, and
  every later write is refused (500) until restart; reads go on.
* Limits raise errors; nothing is ever truncated.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import values as V
from .engine.collection import Collection
from .engine.execute import (
    Block,
    decode_row,
    encode_row,
    max_param,
    run_create,
    run_create_index,
    run_del,
    run_drop,
    run_get,
    run_put,
    run_set,
)
from .engine.holds import Hold, make_hold
from .engine.prepare import Prepared, prepare
from .engine.queues import Tally
from .engine.queues import counts as queue_counts
from .engine.queues import shape_of as queue_shape
from .engine.rwlock import RWLock
from .engine.scoped import authorize as authorize_scoped
from .engine.scoped import run as run_scoped
from .engine.written import Written
from .errors import FenecError
from .plan.compile import Env
from .plan.schema import FieldInfo, Schema
from .ql import ast as A
from .ql.parser import parse
from .storage.footprint import Footprint

log = logging.getLogger("fenecdb.database")

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


@dataclass(frozen=True, slots=True)
class Idem:
    """An Idempotency-Key as the engine stores it (http.md §9)."""

    key: str  # already namespaced by the caller
    request_hash: bytes
    ttl_ms: int
    keep_empty: bool = True  # False for held claims: keep the key only once the run took rows


class Result:
    __slots__ = ("answers", "seq", "wrote", "taken", "replayed")

    def __init__(self, answers: list, seq: int, wrote: bool, taken: int, replayed: tuple[int, bytes] | None) -> None:
        self.answers = answers
        self.seq = seq
        self.wrote = wrote
        self.taken = taken
        self.replayed = replayed


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Database:
    """A FenecDB database: in memory when `path` is None, else the data file at `path`."""

    def __init__(self, path: str | None = None, *, sync: str | int = 250,
                 clock: Callable[[], int] | None = None, files: Any = None) -> None:
        self._clock = clock or _wall_ms
        self.collections: dict[str, Collection] = {}
        self._lock = RWLock()
        # text -> (statements, the highest parameter each names)
        self._parsed: OrderedDict[str, tuple[list[A.Statement], list[int]]] = OrderedDict()
        self._parsed_mutex = threading.Lock()
        self._parsed_chars = 0
        self._prepared: dict[tuple[str, Any], Any] = {}
        self._prepared_chars = 0
        self._version = 0
        self.seq = 0
        self._listeners: list[Callable[[frozenset[str], int], None]] = []
        self.written = Written()  # the ids each write put, once held claims bid (track_writes)
        self._idem: dict[str, tuple[bytes, int, bytes, int, int]] = {}
        self._read_only = False
        self._closed = False
        self._failed: str | None = None
        self.path = path
        self._log: Any = None
        self._footprint = Footprint()  # the dead-bytes estimate (storage/footprint.py)
        self.auto_compactions = 0
        self.tally = Tally(self.collections)  # jobs enqueued, claimed, acked, failed, dead-lettered per queue
        self.last_compaction: dict = {}
        if path is not None:
            from .storage import Log

            self._log = Log(path, sync=sync, files=files) if files is not None else Log(path, sync=sync)
            snapshot, records = self._log.open()
            if snapshot is not None:
                self._load_snapshot(snapshot)
            for rec in records:
                self._replay(rec)

    # ---------------------------------------------------------------- engine hooks used by execute

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
        with self._parsed_mutex:
            self._version += 1
            self._prepared.clear()
            self._prepared_chars = 0

    # ---------------------------------------------------------------- public surface

    def now(self) -> int:
        return int(self._clock())

    def set_read_only(self, flag: bool) -> None:
        self._read_only = bool(flag)

    def listen(self, callback: Callable[[frozenset[str], int], None]) -> None:
        self._listeners.append(callback)

    def unlisten(self, callback: Callable[[frozenset[str], int], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def query(self, text: str, params: Any = None) -> Any:
        return self.execute([(text, params)], block=False).answers[0]

    def batch(self, statements: Iterable[tuple[str, Any]]) -> list:
        stmts = list(statements)
        if not stmts:
            raise FenecError("query", "empty batch")
        res = self.execute(stmts, block=True)
        return [wrap(a) for a in res.answers]

    def close(self) -> bool:
        """Stop taking statements, sync what is dirty, close the file. Return whether anything
        was dirty, i.e. whether the way out had to fsync (False in memory and when closed).
        Raises the storage error when that last fsync fails."""
        if self._closed:
            return False
        self._lock.acquire_write()
        try:
            self._closed = True
            if self._log is not None:
                return bool(self._log.close())
            return False
        finally:
            self._lock.release_write()

    # ---------------------------------------------------------------- parsing and preparing

    def parse(self, text: str) -> list[A.Statement]:
        return self._parse(text)[0]

    def _parse(self, text: str) -> tuple[list[A.Statement], list[int]]:
        if not isinstance(text, str):
            raise FenecError("query", "`query` must be text")
        got = self._parsed.get(text)
        if got is not None:
            return got
        stmts = parse(text)
        entry = (stmts, [max_param(s) for s in stmts])
        if len(text) > CACHE_TEXT_MAX:
            return entry
        with self._parsed_mutex:
            if text not in self._parsed:
                self._parsed[text] = entry
                self._parsed_chars += len(text)
                while len(self._parsed) > PARSE_CACHE or self._parsed_chars > CACHE_CHARS:
                    old, _ = self._parsed.popitem(last=False)
                    self._parsed_chars -= len(old)
        return entry

    def cached(self, text: str) -> bool:
        """Whether `text` is parsed already (the HTTP layer runs a long uncached one off its loop)."""
        return text in self._parsed

    def remember_plan(self, key: tuple[str, Any], plan: Any, version: int | None = None) -> None:
        """Keep a prepared statement, within the cache's count and characters. With `version`,
        only if the schema has not changed since it was read (a plan prepared outside the lock)."""
        text = key[0]
        if len(text) > CACHE_TEXT_MAX:
            return
        with self._parsed_mutex:
            if version is not None and version != self._version:
                return
            if len(self._prepared) >= PARSE_CACHE or self._prepared_chars + len(text) > CACHE_CHARS:
                self._prepared.clear()
                self._prepared_chars = 0
            if key not in self._prepared:
                self._prepared_chars += len(text)
            self._prepared[key] = plan

    def _prepare(self, text: str, i: int, stmt: A.Statement, ready: dict | None = None) -> Prepared:
        key = (text, i)
        p = self._prepared.get(key)
        if p is None and ready is not None:
            early = ready.get(key)
            if early is not None and early[0] == self._version:
                return early[1]
        if p is None:
            p = prepare(stmt, {n: c.schema for n, c in self.collections.items()})
            self.remember_plan(key, p)
        return p

    def _prepare_early(self, parsed: list) -> dict | None:
        """Compile the long statements before any lock is taken (PREPARE_OUTSIDE). Each is kept
        with the schema version it was read at, and used under the lock only if that version is
        still current; anything that goes wrong here is left for the locked path to meet again."""
        ready: dict | None = None
        for text, stmt, _ in parsed:
            if len(text) < PREPARE_OUTSIDE or type(stmt) not in (A.Get, A.Set, A.Del, A.Put):
                continue
            key = (text, 0)
            if key in self._prepared:
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

    def _statements(self, statements: list[tuple[str, Any]], block: bool) -> list[tuple[str, A.Statement, list]]:
        out = []
        for i, (text, params) in enumerate(statements):
            try:
                stmts, needs = self._parse(text)
                if len(stmts) != 1:
                    raise FenecError("query", "one statement at a time here: send several as a batch")
                stmt = stmts[0]
                if type(params) is not list:
                    params = _params(params)
                need = needs[0]
                if need > len(params):
                    raise FenecError("query", f"parameter ${need} is not bound")
            except FenecError as e:
                if block:
                    e.at = i
                raise
            out.append((text, stmt, params))
        return out

    # ---------------------------------------------------------------- running

    def execute(self, statements: list[tuple[str, Any]], *, block: bool = False,
                idempotency: Idem | None = None,
                render: Callable[[list], tuple[int, bytes]] | None = None, scope: Any = None) -> Result:
        """`scope` None runs as the server token; a `policy.Scope` runs under that token's rules
        (engine/scoped.py), every statement authorized before any runs."""
        if not block and len(statements) != 1:
            raise FenecError("query", "one statement at a time here: send several as a batch")
        parsed = self._statements(statements, block)
        if scope is not None:
            self._authorize(parsed, block, scope)
        ready = self._prepare_early(parsed) if scope is None else None
        writes = parsed[0][1].writes if len(parsed) == 1 else any(s.writes for _, s, _ in parsed)
        if writes and self._read_only:
            err = FenecError("denied", "the server is in read-only mode")
            if block:
                err.at = next(i for i, (_, s, _) in enumerate(parsed) if s.writes)
            raise err
        if self._closed:
            raise FenecError("io", "the database is closed", status=503)
        if not writes:
            self._lock.acquire_read()
            try:
                answers = self._run_reads(parsed, block, scope, ready)
                return Result(answers, self.seq, False, 0, None)
            finally:
                self._lock.release_read()
        if self._failed is not None:
            raise FenecError("io", f"writes are refused since the disk failed: {self._failed}")
        ticket = None
        self._lock.acquire_write()
        try:
            if idempotency is not None:
                stored = self._idem.get(idempotency.key)
                if stored is not None and stored[3] + stored[4] > self.now():
                    if stored[0] != idempotency.request_hash:
                        raise FenecError("conflict", "this Idempotency-Key came with another request: a key is for one")
                    return Result([], self.seq, False, 0, (stored[1], stored[2]))
            blk = Block(self)
            answers, taken = self._run_block(parsed, block, blk, scope, ready)
            keep_key = idempotency is not None and (taken > 0 or idempotency.keep_empty)
            if blk.ops or keep_key:
                ticket = self._commit(blk, answers, idempotency if keep_key else None, render)
                self._announce(blk)
            result = Result(answers, self.seq, True, taken, None)
        finally:
            self._lock.release_write()
        if ticket is not None:
            try:
                self._log.wait_durable(ticket)
            except FenecError as e:
                self._failed = e.message
                raise
        return result

    def _commit(self, blk: Block, answers: list, idempotency: Idem | None,
                render: Callable[[list], tuple[int, bytes]] | None) -> Any:
        """Under the write lock: store the key's answer with the block, number the block and
        append its record; answer the log's ticket (None in memory). All of it or none of it:
        an exception at any step (a `FenecError`, a bug, a `MemoryError`, an encoder's refusal)
        puts the block back, the key and the change counter with it, before it goes on up, so
        nothing unwritten is ever read, claimed or replayed. Only a failed append stops later
        writes: the disk may hold part of that record, or all of it."""
        seq = self.seq
        ticket = None
        try:
            if idempotency is not None:
                status, body = render(answers) if render is not None else (200, _json_bytes(answers))
                entry = (idempotency.request_hash, status, body, self.now(), idempotency.ttl_ms)
                blk.ops.append(("k", idempotency.key, entry))
                blk.schema_undo.append(_restore_idem(self._idem, idempotency.key, self._idem.get(idempotency.key)))
                self._idem[idempotency.key] = entry
            self.seq += blk.writes or 1
            if self._log is None:
                return None
            payload, out = self._encode(blk.ops)
            try:
                ticket = self._log.append(payload)
            except FenecError as e:
                self._failed = e.message
                raise
            except Exception as e:
                self._failed = f"internal error appending a record: {type(e).__name__}"
                log.exception("internal error appending a record")
                raise FenecError("io", f"{self._failed}: this write was not applied, but the file may hold "
                                       "it; every later write is refused until restart") from None
        except BaseException as e:
            blk.rollback()
            self.seq = seq
            if isinstance(e, FenecError) or not isinstance(e, Exception):
                raise
            log.exception("internal error storing a write")
            raise FenecError("io", f"internal error: {type(e).__name__}", status=500) from None
        # appended: from here on the write stands, whatever else fails
        try:
            self._footprint.record(len(payload), self.seq, out, self._documents)
        except Exception:
            log.exception("internal error measuring change %d", self.seq)
        return ticket

    def _announce(self, blk: Block) -> None:
        """After the record is appended: tell the bidding tracker and the listeners. The write
        has landed, so a fault here is logged, never answered as the write's failure."""
        try:
            if self.written.on:
                self.written.note(self.seq, blk.ops)
            self.tally.note(blk.undo, blk.ops)
            if self._listeners:
                touched = frozenset(blk.touched)
                for cb in self._listeners:
                    cb(touched, self.seq)
        except Exception:
            log.exception("internal error announcing change %d", self.seq)

    def _authorize(self, parsed: list, block: bool, scope: Any) -> None:
        for i, (_, stmt, _) in enumerate(parsed):
            try:
                authorize_scoped(stmt, scope)
            except FenecError as e:
                if block:
                    e.at = i
                raise

    def _run_reads(self, parsed: list, block: bool, scope: Any = None, ready: dict | None = None) -> list:
        answers = []
        for i, (text, stmt, params) in enumerate(parsed):
            env = Env(params, V.Ts(self.now()))
            try:
                if scope is not None:
                    env.claims = scope.claims
                    answers.append(run_scoped(self, text, stmt, env, None, scope))
                    continue
                p = self._prepare(text, 0, stmt, ready)
                answers.append(run_get(self, p, env))
            except FenecError as e:
                if block:
                    e.at = i
                    if e.kind == "unmet" and not e.message.startswith("unmet: "):
                        e.message = "unmet: " + e.message
                        e.args = (e.message,)
                raise
            except RecursionError:
                raise _at(FenecError("query", "expression too deep"), i if block else None) from None
            except Exception as e:
                # As in _run_block: an engine fault is logged and answered as one, never a raw exception.
                log.exception("internal error reading %r", text[:200])
                raise _at(FenecError("io", f"internal error: {type(e).__name__}", status=500),
                          i if block else None) from None
        return answers

    def _run_block(self, parsed: list, block: bool, blk: Block, scope: Any = None,
                   ready: dict | None = None) -> tuple[list, int]:
        answers = []
        taken = 0
        clock = self._clock
        for i, (text, stmt, params) in enumerate(parsed):
            env = Env(params, V.Ts(int(clock())))
            try:
                t = type(stmt)
                if scope is not None:
                    env.claims = scope.claims
                    ans = run_scoped(self, text, stmt, env, blk, scope)
                    if t is A.Set or t is A.Del:
                        taken += len(ans) if type(ans) is list else ans["affected"]
                elif t is A.Set:
                    ans = run_set(self, self._prepare(text, 0, stmt, ready), env, blk)
                    taken += len(ans) if type(ans) is list else ans["affected"]
                elif t is A.Del:
                    ans = run_del(self, self._prepare(text, 0, stmt, ready), env, blk)
                    taken += len(ans) if type(ans) is list else ans["affected"]
                elif t is A.Get:
                    ans = run_get(self, self._prepare(text, 0, stmt, ready), env)
                elif t is A.Put:
                    ans = run_put(self, self._prepare(text, 0, stmt, ready), env, blk)
                elif t is A.CreateCollection:
                    ans = run_create(self, stmt, blk)
                elif t is A.DropCollection:
                    ans = run_drop(self, stmt, blk)
                elif t is A.CreateIndex:
                    ans = run_create_index(self, stmt, blk)
                else:
                    raise FenecError("query", f"cannot run {t.__name__}")
            except FenecError as e:
                blk.rollback()
                if block:
                    e.at = i
                    if e.kind == "unmet" and not e.message.startswith("unmet: "):
                        e.message = "unmet: " + e.message
                        e.args = (e.message,)
                raise
            except RecursionError:
                blk.rollback()
                raise _at(FenecError("query", "expression too deep"), i if block else None) from None
            except Exception as e:
                # A fault in the engine (a bug, a MemoryError) must never leave a half-applied
                # block behind: put back, logged, and answered as a fault.
                blk.rollback()
                log.exception("internal error running %r", text[:200])
                raise _at(FenecError("io", f"internal error: {type(e).__name__}", status=500),
                          i if block else None) from None
            except BaseException:
                blk.rollback()  # KeyboardInterrupt, SystemExit: put back, then on their way
                raise
            answers.append(ans)
        return answers, taken

    # ---------------------------------------------------------------- held claims

    def prepare_hold(self, statements: list[tuple[str, Any]], scope: Any = None) -> Hold:
        parsed = self._statements(statements, block=len(statements) > 1)
        if scope is not None:
            self._authorize(parsed, len(statements) > 1, scope)
        return make_hold(self, parsed, scope=scope)

    def track_writes(self, on: bool = True) -> None:
        """Keep the ids each write puts from now on (`written_since`), for claims that bid; or,
        `on` False, stop and forget them."""
        self._lock.acquire_write()
        try:
            if on:
                self.written.start(self.seq)
            else:
                self.written.stop()
        finally:
            self._lock.release_write()

    def written_since(self, coll: str, seq: int) -> set[int] | None:
        """Under the read lock: the ids put in `coll` since change `seq`, None if not known."""
        return self.written.since(coll, seq)

    def look(self, fn: Callable[[], Any]) -> Any:
        """Run fn under the shared read lock (a held claim's look)."""
        self._lock.acquire_read()
        try:
            return fn()
        finally:
            self._lock.release_read()

    # ---------------------------------------------------------------- the log

    def _encode(self, ops: list) -> tuple[bytes, list]:
        """A block's record payload, and its ops as written (for the footprint, once appended).
        Text is encoded with `surrogatepass`: a lone surrogate (an in-process caller's text, a
        token's claim) is stored as it is and read back as it was (`json.loads` of bytes decodes
        the same way), never an encoder's refusal of a write that already ran."""
        out = []
        for op in ops:
            kind = op[0]
            if kind == "p":
                coll = self.collections.get(op[1])
                schema = coll.schema if coll is not None else None
                out.append(["p", op[1], op[2], encode_row(schema, op[3])])
            elif kind == "k":
                h, status, body, at, ttl = op[2]
                out.append(["k", op[1], h.hex(), status, body.decode("utf-8", "surrogateescape"), at, ttl])
            else:
                out.append(list(op))
        payload = json.dumps({"s": self.seq, "o": out}, separators=(",", ":"), ensure_ascii=False)
        return payload.encode("utf-8", "surrogatepass"), out

    def _replay(self, payload: bytes) -> None:
        rec = json.loads(payload)
        for op in rec["o"]:
            kind = op[0]
            if kind == "p":
                coll = self.collections[op[1]]
                row = decode_row(coll.schema, op[2], op[3])
                old = coll.rows.get(op[2])
                if old is None:
                    coll.insert(row, None)
                else:
                    coll.replace(old, row, None)
            elif kind == "d":
                coll = self.collections[op[1]]
                old = coll.rows.get(op[2])
                if old is not None:
                    coll.delete(old, None)
            elif kind == "c":
                self.add_collection(Collection(Schema.from_json(op[2])))
            elif kind == "x":
                self.remove_collection(op[1])
            elif kind == "i":
                coll = self.collections[op[1]]
                target, idx_kind, ttl = op[2], op[3], op[4]
                if "." in target:
                    coll.schema.indexes[target] = idx_kind
                else:
                    f = coll.schema.fields[target]
                    coll.schema.fields[target] = FieldInfo(f.name, f.type, f.required, idx_kind, ttl)
                coll.build_index(target, idx_kind)
                self.schema_changed()
            elif kind == "k":
                self._idem[op[1]] = (bytes.fromhex(op[2]), op[3], op[4].encode("utf-8", "surrogateescape"), op[5], op[6])
            elif kind == "K":
                self._idem.pop(op[1], None)
            elif kind == "n":
                self.collections[op[1]].next_id = max(self.collections[op[1]].next_id, op[2])
        self.seq = rec["s"]
        self._footprint.record(len(payload), rec["s"], rec["o"], self._documents)

    def _snapshot_state(self) -> dict:
        """Under the write lock: a consistent copy (rows are immutable, so a shallow one)."""
        return {
            "s": self.seq,
            "colls": [(c.schema.to_json(), c.next_id, dict(c.rows)) for c in self.collections.values()],
            "idem": dict(self._idem),
        }

    def _encode_snapshot(self, state: dict) -> tuple[bytes, dict]:
        """The snapshot payload, and the sizes it measured on the way (for `Footprint.calibrate`).
        Each collection carries `bytes`, the size of its `rows` array, and the snapshot `idem_bytes`."""
        def dumps(value: Any) -> str:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

        colls = []
        sizes: dict[str, tuple[int, int]] = {}
        for schema_json, next_id, rows in state["colls"]:
            schema = Schema.from_json(schema_json)
            rows_json = _rows_json(dumps, schema, rows)
            nbytes = len(rows_json.encode("utf-8", "surrogatepass"))
            sizes[schema_json["name"]] = (nbytes, len(rows))
            colls.append(f'{{"schema":{dumps(schema_json)},"next":{int(next_id)},"bytes":{nbytes},"rows":{rows_json}}}')
        idem_json = dumps([[k, h.hex(), st, b.decode("utf-8", "surrogateescape"), at, ttl]
                           for k, (h, st, b, at, ttl) in state["idem"].items()])
        idem_bytes = len(idem_json.encode("utf-8", "surrogatepass"))
        payload = (f'{{"s":{int(state["s"])},"colls":[{",".join(colls)}],"idem":{idem_json},'
                   f'"idem_bytes":{idem_bytes}}}').encode("utf-8", "surrogatepass")  # as _encode
        return payload, {"rows": sizes, "keys": (idem_bytes, len(state["idem"]))}

    def _load_snapshot(self, payload: bytes) -> None:
        snap = json.loads(payload)
        sizes: dict[str, tuple[int, int]] = {}
        for c in snap["colls"]:
            coll = Collection(Schema.from_json(c["schema"]))
            for rid, data in c["rows"]:
                coll.insert(decode_row(coll.schema, rid, data), None)
            coll.next_id = max(coll.next_id, c["next"])
            self.collections[coll.name] = coll
            nbytes = c.get("bytes")
            if nbytes is None:  # a snapshot written before the sizes were
                nbytes = len(json.dumps(c["rows"], separators=(",", ":"), ensure_ascii=False).encode())
            sizes[coll.name] = (nbytes, len(c["rows"]))
        for k, h, st, b, at, ttl in snap["idem"]:
            self._idem[k] = (bytes.fromhex(h), st, b.encode("utf-8", "surrogateescape"), at, ttl)
        idem_bytes = snap.get("idem_bytes")
        if idem_bytes is None:
            idem_bytes = len(json.dumps(snap["idem"], separators=(",", ":"), ensure_ascii=False).encode())
        self._footprint.calibrate(sizes, (idem_bytes, len(snap["idem"])))
        self.seq = snap["s"]
        self.schema_changed()

    def compact(self, *, auto: bool = False) -> dict:
        """Write a snapshot beside the file and swap it in (storage does the safe rename).
        `auto`: run by the background check (counted for `fenec_auto_compactions_total`)."""
        if self._log is None:
            return {}
        self._lock.acquire_write()
        try:
            locked = time.perf_counter()
            # Put next ids of collections whose top rows were deleted into the snapshot too.
            mark = self._log.compaction_start()
            state = self._snapshot_state()
            write_lock_us = int((time.perf_counter() - locked) * 1e6)
        finally:
            self._lock.release_write()
        try:
            payload, sizes = self._encode_snapshot(state)
            del state
            done = self._log.compaction_finish(payload, mark)
            done["write_lock_us"] = write_lock_us  # the copy of the row maps (writes wait for it)
            self.last_compaction = done
            self._lock.acquire_write()
            try:
                self._footprint.calibrate(sizes["rows"], sizes["keys"])
            finally:
                self._lock.release_write()
            if auto:
                self.auto_compactions += 1
            return done
        except BaseException:
            try:
                self._log.compaction_cancel()
            except Exception:
                pass
            raise

    def backup(self) -> tuple[int, bytes]:
        """A consistent copy of the whole database as the bytes of a data file that
        `Database(path)` or `fenec-server --file` opens: the file header and one snapshot record
        of every write up to the answered change number (also answered). The copy is taken
        under the shared lock (writes wait for a copy of each collection's row map, not for
        the encoding); works in memory too."""
        from .storage.format import file_header, record_header

        self._lock.acquire_read()
        try:
            state = self._snapshot_state()
        finally:
            self._lock.release_read()
        payload, _ = self._encode_snapshot(state)
        try:
            head = record_header(payload, snapshot=True)
        except ValueError as e:
            raise FenecError("io", f"backup failed: {e}") from None
        return int(state["s"]), file_header() + head + payload

    def sweep(self) -> int:
        """Delete rows more than a minute past their @ttl, and Idempotency-Keys past theirs."""
        now = self.now()
        doomed: list[tuple[Collection, dict]] = []
        self._lock.acquire_read()
        try:
            for coll in self.collections.values():
                ttl = coll.schema.ttl_field
                if ttl is None:
                    continue
                assert ttl.ttl_ms is not None  # a @ttl field always has its duration
                idx = coll.index(ttl.name)
                for rid in idx.walk(None, True, now - ttl.ttl_ms - SWEEP_GRACE_MS, True, False, False):
                    doomed.append((coll, coll.rows[rid]))
            old_keys = [k for k, e in self._idem.items() if e[3] + e[4] <= now]
        finally:
            self._lock.release_read()
        if not doomed and not old_keys:
            return 0
        ticket = None
        self._lock.acquire_write()
        try:
            if self._failed is not None:
                return 0
            blk = Block(self)
            n = 0
            for coll, row in doomed:
                cur = coll.rows.get(row["id"])
                if cur is row:
                    blk.touch(coll)
                    coll.delete(row, blk.undo)
                    blk.ops.append(("d", coll.name, row["id"]))
                    n += 1
            for k in old_keys:
                e = self._idem.get(k)
                if e is not None and e[3] + e[4] <= now:
                    del self._idem[k]
                    blk.ops.append(("K", k))
            if blk.ops:
                try:
                    ticket = self._commit(blk, [], None, None)
                except FenecError:
                    return 0
                self._announce(blk)
        finally:
            self._lock.release_write()
        if ticket is not None:
            self._log.wait_durable(ticket)
        return n

    # ---------------------------------------------------------------- introspection

    def schemas(self, scope: Any = None) -> list[dict]:
        """Every collection's schema; under a token only those its rules let it see."""
        self._lock.acquire_read()
        try:
            return [c.schema.to_json() for n, c in self.collections.items() if scope is None or scope.visible(n)]
        finally:
            self._lock.release_read()

    @property
    def log(self) -> Any:
        """The data file's `storage.Log` (None in memory): the HTTP loop shares one fdatasync
        among a turn's writes with it under `--sync always` (http/durable.py)."""
        return self._log

    @property
    def failed(self) -> str | None:
        """Why writes are refused since a storage error (the periodic syncer's included), or None."""
        if self._failed is None and self._log is not None and self._log.failed:
            self._failed = self._log.failure
        return self._failed

    def storage_stats(self) -> dict:
        """The log's own counts, plus the live and reclaimable bytes of `storage/footprint.py`
        (`reclaimable_bytes`: what a compaction would give back, estimated). Empty in memory."""
        if self._log is None:
            return {}
        out = self._log.stats()
        self._lock.acquire_read()
        try:
            live = self._live_bytes()
        finally:
            self._lock.release_read()
        out["live_bytes"] = live["total"]
        out["reclaimable_bytes"] = max(0, out["file_bytes"] - live["total"])
        out["auto_compactions"] = self.auto_compactions
        return out

    def _documents(self, name: str) -> int:
        coll = self.collections.get(name)
        return len(coll.rows) if coll is not None else 0

    def _live_bytes(self) -> dict:
        """Under a lock: the footprint's estimate of a snapshot taken now."""
        docs = {name: len(c.rows) for name, c in self.collections.items()}
        schemas = {name: len(json.dumps(c.schema.to_json(), separators=(",", ":"))) for name, c in self.collections.items()}
        return self._footprint.live(docs, schemas, len(self._idem))

    def stats(self) -> dict:
        """Documents per collection, and for a queue (engine/queues.py says which collections
        are) how many jobs are ready, leased, delayed, retrying, dead and done, with the age of
        the oldest ready one in ms (0 when none is): the totals, and under `queues` the same per
        value of its `queue` field ("" alone when it has none)."""
        now = self.now()
        out: dict[str, Any] = {"collections": {}, "seq": self.seq}
        scans = []
        self._lock.acquire_read()
        try:
            for name, coll in self.collections.items():
                st: dict[str, Any] = {"documents": len(coll.rows)}
                shape = queue_shape(coll.schema)
                if shape is not None:
                    st["ready_field"] = shape.ready
                    st["queue_field"] = shape.queue
                    if shape.queue is None and shape.error is None and shape.done is None:
                        per = {"": _queue_stats(coll, now, shape.ready)}  # the index alone answers
                        st.update(_totals(per), queues=per)
                    else:
                        # rows are never changed in place: a list of them now is a consistent
                        # copy, counted after the lock is let go (100 000 rows: 2-7 ms to copy
                        # under it, against 75-92 ms to count there)
                        scans.append((st, shape, list(coll.rows.values())))
                out["collections"][name] = st
        finally:
            self._lock.release_read()
        for st, shape, rows in scans:
            per = queue_counts(shape, rows, now)
            st.update(_totals(per), queues=per)
        storage = self.storage_stats()
        if storage:
            live = self._footprint
            for name, st in out["collections"].items():
                st["data_bytes"] = int(st["documents"] * live.row_bytes(name))
        out.update({"storage": storage, "failed": self.failed is not None})
        return out


SNAPSHOT_CHUNK = 1000


def _rows_json(dumps: Callable[[Any], str], schema: Schema, rows: dict) -> str:
    """A collection's rows as the snapshot's JSON array, encoded SNAPSHOT_CHUNK rows per call:
    one `json.dumps` holds the GIL for its whole run, so over a whole collection at once it kept
    every other thread (the event loop, in the server) waiting for all of it; between chunks they
    run. scripts/compaction_pause.py measures what a writer waits during a compaction."""
    ids = sorted(rows)
    parts = []
    for at in range(0, len(ids), SNAPSHOT_CHUNK):
        chunk = dumps([[rid, encode_row(schema, rows[rid])] for rid in ids[at:at + SNAPSHOT_CHUNK]])
        parts.append(chunk[1:-1])
    return "[" + ",".join(parts) + "]"


def _totals(per: dict[str, dict[str, int]]) -> dict[str, int]:
    out = {k: 0 for k in ("ready", "leased", "delayed", "retrying", "dead", "done")}
    oldest = 0
    for c in per.values():
        for k in out:
            out[k] += c[k]
        oldest = max(oldest, c["oldest_ready_ms"])
    out["oldest_ready_ms"] = oldest
    return out


def _queue_stats(coll: Collection, now: int, field: str = "run_at") -> dict:
    ready = leased = delayed = dead = 0
    oldest = None
    has_owner = "owner" in coll.schema.fields
    idx = coll.index(field)
    if idx is not None and hasattr(idx, "count"):
        ready = idx.count(None, True, now, True)
        dead = len(idx.nulls)
        oldest_v = idx.min_value()
        if ready and oldest_v is not None:
            oldest = now - int(oldest_v)
        ahead_ids = idx.walk(now, False, None, True, False, False)
        for rid in ahead_ids:
            if has_owner and coll.rows[rid].get("owner") is not None:
                leased += 1
            else:
                delayed += 1
    else:
        for row in coll.rows.values():
            v = row.get(field)
            if v is None:
                dead += 1
            elif v <= now:
                ready += 1
                if oldest is None or now - v > oldest:
                    oldest = now - v
            elif has_owner and row.get("owner") is not None:
                leased += 1
            else:
                delayed += 1
    return {"ready": ready, "leased": leased, "delayed": delayed, "retrying": 0, "dead": dead, "done": 0,
            "oldest_ready_ms": oldest or 0}


def _params(params: Any) -> list:
    if params is None:
        return []
    if isinstance(params, (list, tuple)):
        return list(params)
    return [params]


def _at(e: FenecError, at: int | None) -> FenecError:
    e.at = at
    return e


def _restore_idem(store: dict, key: str, old: Any) -> Callable[[], None]:
    def undo() -> None:
        if old is None:
            store.pop(key, None)
        else:
            store[key] = old
    return undo


def _json_bytes(answers: list) -> bytes:
    return json.dumps(answers, separators=(",", ":")).encode()


def wrap(answer: Any) -> dict:
    """A statement's answer in a block's `results` form (http.md §4)."""
    if isinstance(answer, list):
        return {"rows": answer}
    return answer
