"""The ASGI app: `POST /query`, `POST /batch`, held claims and the small routes (http.md).

The claim is the hot path, so `/query`, `/batch` and `/_health` are answered by a raw ASGI
callable: no router, no request object, one pass over the headers. Measured on this machine
(bench/http_bench.py, 2 cores shared, through an in-process ASGI client): 356 us a request
on the raw route against 509 us on a FastAPI route doing the same work, ~150 us saved per
claim. The routes nobody calls in a loop
(`GET /`, `GET /collections`, `/_metrics`, `/_openapi.json`) are a FastAPI app behind it.

Order of checks for every request (each refuses before the next is looked at):
`/_health` (no token, no lock, before routing) → header block over 64 KiB (431) → method
(501) → `OPTIONS` preflight (204) → chunked body (411) → body over 64 MiB (413, before reading
it) → token (401, after the auth delay; auth.py) → route (404) → the body itself (400) →
statement text over `--max-statement-bytes` (413) → the engine.

A large request does not stop the others: a body over OFF_LOOP_BODY is decoded, and a request
whose statement text is not parsed yet and over OFF_LOOP_TEXT is parsed, prepared and run, in
a worker thread, while the loop goes on answering (the GIL is handed back to it every switch
interval; bench/stall_probe.py measures the stall, server/README.md has the numbers).
A scoped token's requests run under its policy scope (`db.execute(..., scope=...)`); the server
token, or anyone on an open server, runs with no scope (everything).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import gc_policy
from ..engine.engine import Result
from ..engine.prepare import Rows
from ..engine.rwlock import Busy
from ..errors import FenecError
from ..held import Lines, Outcome, Waiter
from ..held.on_asyncio import SETTLE_TURNS, AsyncioDriver, park
from ..held.port import Claim
from ..pacing import PACE_ROWS, hand_over
from ..storage.log import Deferred
from . import errors as E
from . import numbers
from .auth import OPEN, Auth, AuthDelay, AuthRefused, Caller
from .busy_poll import BusyPoll
from .dashboard import PATHS as DASHBOARD
from .durable import TurnSync
from .idempotency import (
    DEFAULT_TTL_S,
    IDEM_NO_SUB,
    check_key,
    make_idem,
    namespace_of,
    namespaced,
    request_hash,
)
from .limits import BODY_CEILING, METHODS, parse_length, parse_wait
from .metrics import Metrics, Recent
from .wire import lines

try:  # measured: see dumps() below
    import orjson
except ImportError:  # pragma: no cover - orjson is optional
    orjson = None  # type: ignore[assignment]

import json

if TYPE_CHECKING:
    from ..database import Database

log = logging.getLogger("fenec.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

JSON_TYPE = (b"content-type", b"application/json; charset=utf-8")
HEALTH_BODY = b'{"ok":true}'
MAX_STATEMENT_BYTES = 1 << 20
# Past these a request is handled in a worker thread. A parse costs ~5 us a byte of dense text
# (`in [1, 1, ...]`), so 2 KiB on the loop is at most ~10 ms; a claim's text (~150 bytes) is
# parsed once and cached, and never leaves the loop.
OFF_LOOP_BODY = 64 << 10
OFF_LOOP_TEXT = 2 << 10
# What one statement may answer and one request may write, unless the command line says otherwise
# (--max-answer-rows, --max-write-rows; 0 = none). Past them: 413, nothing written.
MAX_ANSWER_ROWS = 100_000
MAX_WRITE_ROWS = 100_000
# On the loop a statement may answer or write this many rows (a claim's 10 take ~30 us); one that
# would pass it is put back and run again in a worker thread with the ceilings above, as is one
# that would wait for the lock, held there by such a statement: the loop never waits for either.
LOOP_ROWS = 1_000
# An answer of more rows than this is written in pieces of as many rows, each rendered only when
# the connection has room for it (protocol.py, uvicorn's flow control), so a reader that does not
# read holds at most a piece and the transport's buffer of rendered bytes.
PIECE_ROWS = 1_000


def _dumps_json(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        # text holding a lone surrogate (an in-process caller's, a token claim a rule pinned
        # into a row): the same JSON with it escaped, as `\ud800`, never a 500 for an answer
        return json.dumps(value, separators=(",", ":")).encode()


if orjson is not None:
    # orjson encodes a 10-row claim answer in 1.1 us against 26 us for json.dumps (measured,
    # bench/http_bench.py); it refuses ints past 64 bits, which FenecQL ints never are, and
    # falls back to json for anything it cannot encode.
    def dumps(value: Any) -> bytes:
        try:
            return orjson.dumps(value)
        except TypeError:
            return _dumps_json(value)
else:  # pragma: no cover
    dumps = _dumps_json


# Answer, Pending and Parked are plain classes, not dataclasses: mypyc compiles a dataclass with
# slots as a Python class whose __init__ runs in the interpreter (those of Answer and Pending, made
# for every durable put, cost it 2 850 instructions; bench/README.md); these are native classes.


class Answer:
    """A whole HTTP answer: status, body and the extra headers it carries."""

    __slots__ = ("status", "body", "headers", "parts")

    def __init__(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers: list[tuple[bytes, bytes]] = [] if headers is None else headers
        # a long answer's body, rendered piece by piece as it is written (`body` is then b""), chunked
        self.parts: Iterator[bytes] | None = None

    def __repr__(self) -> str:
        return f"Answer({self.status!r}, {self.body!r}, {self.headers!r})"


FAULT = Answer(500, b'{"error":"internal fault"}')  # a held run that raised


class Pending:
    """A short-way answer that waits: for its loop turn's fdatasync (`--sync always`,
    durable.py), or (ticket 0) for the run of the held claim its write woke. `App.release`
    hands it over then."""

    __slots__ = ("answer", "ticket", "block")

    def __init__(self, answer: Answer, ticket: int, block: bool) -> None:
        self.answer = answer
        self.ticket = ticket
        self.block = block


class Parked:
    """A short-way held claim whose first run took nothing: `App.park` holds it in the lines
    with the protocol's way to answer it."""

    __slots__ = ("claim", "work", "last", "seen", "started", "req", "raw")

    def __init__(self, claim: Claim, work: Work, last: Answer, seen: int, started: float, req: Request,
                 raw: bytes) -> None:
        self.claim = claim
        self.work = work
        self.last = last
        self.seen = seen
        self.started = started
        self.req = req
        self.raw = raw


class Config:
    """What the app needs from the command line."""

    def __init__(self, *, version: str = "0.0.0", token: str | None = None, cors: str | None = None,
                 idempotency_ttl_s: int = DEFAULT_TTL_S, slow_ms: float | None = None,
                 sync_always: bool = False, auth: Auth | None = None, auth_delay_ms: int = 100,
                 max_statement_bytes: int = MAX_STATEMENT_BYTES, closes_told: bool = False,
                 max_answer_rows: int = MAX_ANSWER_ROWS, max_write_rows: int = MAX_WRITE_ROWS) -> None:
        self.version = version
        # the tokens accepted (auth.py); `token` alone is a server token and nothing else
        self.auth = auth if auth is not None else Auth(server_token=token)
        self.auth_delay_ms = auth_delay_ms
        self.cors = cors
        self.idempotency_ttl_ms = idempotency_ttl_s * 1000
        self.slow_ms = slow_ms
        # A file-backed database under --sync always: writes run on the loop like every request,
        # their answers parked until their turn's one fdatasync (durable.py). (A worker thread
        # per write cost a one-row get 120 us against 6 us on the loop, bench/http_bench.py,
        # and 33 futex calls a write with 8 writers, bench/durable_syscalls.py.)
        self.sync_always = sync_always
        # the statement text of one request (`/batch`: its distinct texts together); 0 = no ceiling
        self.max_statement_bytes = max_statement_bytes
        # the rows one statement may answer, and one statement or /batch write (engine.execute); 0 = none
        self.max_answer_rows = max_answer_rows
        self.max_write_rows = max_write_rows
        # served by fenec-server's protocol, which tells a held claim's client's close in the turn
        # it is read: one settling turn before a run is enough (held/on_asyncio.py)
        self.closes_told = closes_told


class Head:
    """The few things read from a request's headers (uvicorn gives their names lower-cased), in
    one pass: those its answer depends on; `transfer-encoding` is only noted (a chunked body is
    refused). The last of a repeated header is the one kept. The short way reads a connection's
    repeated head once (protocol.py), and this with it (`scope["fenec.head"]`)."""

    __slots__ = ("length", "chunked", "auth", "wait", "idem", "origin")

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.length: bytes | None = None
        self.chunked = False
        self.auth: bytes | None = None
        self.wait: bytes | None = None
        self.idem: bytes | None = None
        self.origin: bytes | None = None
        for name, value in headers:  # name by name: a setattr by a looked-up name costs a compiled class more
            if name == b"content-length":
                self.length = value
            elif name == b"authorization":
                self.auth = value
            elif name == b"fenec-wait":
                self.wait = value
            elif name == b"idempotency-key":
                self.idem = value
            elif name == b"origin":
                self.origin = value
            elif name == b"transfer-encoding":
                self.chunked = True


class Request:
    """What the app reads of a request: where it goes, its `Head`, who sent it."""

    __slots__ = ("method", "path", "target", "length", "chunked", "auth", "wait", "idem", "origin", "peer",
                 "caller", "leaving")

    def __init__(self, scope: Scope) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        qs = scope.get("query_string") or b""
        raw = scope.get("raw_path") or self.path.encode()
        self.target: bytes = raw + (b"?" + qs if qs else b"")
        head: Head | None = scope.get("fenec.head")
        if head is None:
            head = Head(scope["headers"])
        self.length: bytes | None = head.length
        self.chunked: bool = head.chunked
        self.auth: bytes | None = head.auth
        self.wait: bytes | None = head.wait
        self.idem: bytes | None = head.idem
        self.origin: bytes | None = head.origin
        client = scope.get("client")
        self.peer: str = client[0] if client else ""
        self.caller: Caller = OPEN
        # the connection's hooks for the moment its client leaves (protocol.py), where the server has them
        self.leaving: list[Callable[[], None]] | None = scope.get("fenec.leaving")


class OffLoop(Exception):
    """A run on the loop put back before it wrote anything: it would pass LOOP_ROWS, or wait for
    the lock. Its caller runs it again in a worker thread (`run_off_loop`)."""


class Refusal(Exception):
    """An answer decided before the engine ran (a bad body, a bad header)."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body


class App:
    def __init__(self, db: Database, config: Config | None = None, *,
                 connections: Callable[[], int] = lambda: 0, busy: BusyPoll | None = None,
                 requests: Callable[[], int] = lambda: 0) -> None:
        self.db = db
        self._cached: Callable[[str], bool] | None = getattr(db, "cached", None)  # a text parsed already
        self.config = config or Config()
        self.connections = connections
        self.requests = requests  # requests answered so far: a compaction rests while it moves (database.Pace)
        self.metrics = Metrics(self.config.version)
        self.busy = self.metrics.busy = busy  # the protocol's polling window (busy_poll.py), or None
        self.recent = Recent()  # per-second samples for the dashboard (admin.py)
        self._sampler: asyncio.Task[None] | None = None
        self.auth = self.config.auth
        self.delay = AuthDelay(self.config.auth_delay_ms)
        self.waits: Lines[Answer] | None = None  # held claims (held/), once the loop runs
        self.driver: AsyncioDriver[Answer] | None = None  # their clock and runs, on that loop
        self.turns: TurnSync | None = None  # --sync always: set at start, on the loop
        # large requests (OFF_LOOP_*): two threads, as the GIL lets only one of them run at a time
        self.large = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fenec-large")
        self.version_header = (b"x-fenecdb-version", self.config.version.encode())
        self.cors_headers: list[tuple[bytes, bytes]] = []
        if self.config.cors:
            self.cors_headers = [
                (b"access-control-allow-origin", self.config.cors.encode()),
                (b"access-control-expose-headers", b"fenec-seq, fenec-next, idempotent-replayed"),
                (b"vary", b"Origin"),
            ]
        # the same as lines, for the short way's answers (protocol.py, wire.render_api)
        self.version_line = lines([self.version_header])
        self.cors_lines = lines(self.cors_headers)
        from .routes import build_routes

        self.cold = build_routes(self)

    # -- entry --

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            try:
                await self.http(scope, receive, send)
            except Exception:
                # Every answer is JSON (http.md §6): a fault no route caught is a JSON 500 here,
                # not uvicorn's plain text. (Once the answer has started, the send fails and
                # uvicorn closes the connection, as it would.)
                log.exception("internal fault answering %s %s", scope.get("method"), scope.get("path"))
                try:
                    await self.respond(send, 500, E.body(E.INTERNAL), ((b"connection", b"close"),))
                except Exception:
                    pass
        elif kind == "lifespan":
            await self.lifespan(receive, send)

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def start(self) -> Lines[Answer]:
        if self.waits is None:
            log_ = self.db.log
            if self.config.sync_always and log_ is not None:
                self.turns = TurnSync(log_, asyncio.get_running_loop())
                if self.busy is not None:
                    self.busy.paused = self.turns.syncing  # the kernel's sync needs this CPU
            driver = self.driver = AsyncioDriver(asyncio.get_running_loop(), self._run_held, FAULT,
                                                 settle_turns=1 if self.config.closes_told else SETTLE_TURNS)
            self.waits = Lines(self.db, driver)
            self._sampler = asyncio.get_running_loop().create_task(self._sample())
        return self.waits

    async def _sample(self) -> None:
        while True:
            self.recent.sample(self.db, self.waits)
            await asyncio.sleep(1.0)

    def shutdown(self) -> int:
        """Stop holding: every held claim is answered at once with its last answer."""
        if self._sampler is not None:
            self._sampler.cancel()
        if self.turns is not None:
            self.turns.close()
        if self.waits is None:
            return 0
        return self.waits.shutdown()

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        method = scope["method"]
        if path == "/_health" and (method == "GET" or method == "HEAD"):
            await self.respond(send, 200, HEALTH_BODY, ())
            return
        if scope.get("fenec.too_many"):  # a connection in the reserve past the ceiling (protocol.py)
            await self.respond(send, 503, E.body(E.TOO_MANY), ((b"retry-after", b"1"), (b"connection", b"close")))
            return
        if scope.get("fenec.head_too_large"):
            await self.respond(send, 431, E.head_too_large(), ((b"connection", b"close"),))
            return
        if method not in METHODS:
            await self.respond(send, 501, E.not_implemented(method), ())
            return
        req = Request(scope)
        if method == "OPTIONS":
            await self.preflight(send)
            return
        if req.chunked:
            await self.respond(send, 411, E.body(E.CHUNKED), ((b"connection", b"close"),))
            return
        if req.length is not None:
            length = parse_length(req.length)
            if length is None:
                await self.respond(send, 400, E.body(E.BAD_LENGTH), ((b"connection", b"close"),))
                return
            if length > BODY_CEILING:
                await self.respond(send, 413, E.too_large(length), ((b"connection", b"close"),))
                return
        if (path == "/_openapi.json" or path in DASHBOARD) and method in ("GET", "HEAD"):
            await self.cold(scope, receive, send)  # no data in either: no token asked
            return
        try:
            metrics = path == "/_metrics" or path == "/_metrics/recent"
            caller = self.auth.metrics(req.auth) if metrics else self.auth.data(req.auth)
        except AuthRefused as r:
            await self.refuse(send, req.peer, r.message)
            return
        if caller is not OPEN:
            self.delay.cleared(req.peer)
            _credentialed(scope)
        req.caller = caller
        if method == "POST":
            if path == "/query":
                await self.query(req, receive, send)
                return
            if path == "/batch":
                await self.batch(req, receive, send)
                return
        elif method in ("GET", "HEAD") and path in ("/", "/collections", "/_metrics", "/_metrics/recent"):
            scope["fenec.caller"] = caller
            await self.cold(scope, receive, send)
            return
        if path == "/_admin/compact" and method == "POST" or path == "/_admin/backup" and method == "GET":
            scope["fenec.caller"] = caller
            await self.cold(scope, receive, send)
            return
        elif method in ("GET", "HEAD") and path == "/_whoami":
            body = dumps(caller.whoami())
            await self.respond(send, 200, b"" if method == "HEAD" else body, (), api=True,
                               length=len(body))
            return
        await self.respond(send, 404, E.no_route(method, path), ())

    async def refuse(self, send: Send, peer: str, message: str) -> None:
        """A 401, written after the address's auth delay (access.md §2.3)."""
        delay = self.delay.refused(peer)
        if delay > 0:
            await asyncio.sleep(delay)
        await self.respond(send, 401, E.body(message), ((b"www-authenticate", b"Bearer"),))

    async def preflight(self, send: Send) -> None:
        headers: list[tuple[bytes, bytes]] = []
        if self.config.cors:
            headers = self.cors_headers + [
                (b"access-control-allow-methods", b"GET, POST, PATCH, DELETE, OPTIONS"),
                (b"access-control-allow-headers",
                 b"content-type, authorization, idempotency-key, fenec-after, fenec-wait"),
                (b"access-control-max-age", b"600"),
            ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    def headers_for(self, body: bytes, extra: Any, *, api: bool = False,
                    length: int | None = None) -> list[tuple[bytes, bytes]]:
        """An answer's headers (uvicorn adds the date): the same whichever way it is written."""
        headers = [JSON_TYPE, (b"content-length", str(len(body) if length is None else length).encode())]
        if api:
            headers.append(self.version_header)
        headers.extend(extra)
        if self.cors_headers:
            headers.extend(self.cors_headers)
        return headers

    async def respond(self, send: Send, status: int, body: bytes,
                      extra: Any, *, api: bool = False, length: int | None = None) -> None:
        headers = self.headers_for(body, extra, api=api, length=length)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def send_answer(self, send: Send, answer: Answer, req: Request | None = None) -> None:
        parts = answer.parts
        if parts is None:
            await self.respond(send, answer.status, answer.body, answer.headers, api=True)
            return
        # no content-length: uvicorn writes it chunked, and each send waits while the transport
        # is paused (its flow control), so the next piece is rendered only once there is room
        headers = [JSON_TYPE, self.version_header, *answer.headers, *self.cors_headers]
        gone: list[bool] = []
        leaving = req.leaving if req is not None else None
        hook = partial(gone.append, True)
        if leaving is not None:
            leaving.append(hook)
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        try:
            for piece in parts:
                if gone:
                    return  # the client left (or was cut): the rest is not rendered
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            if leaving is not None and hook in leaving:
                leaving.remove(hook)

    # -- the body --

    @staticmethod
    async def read_body(receive: Receive) -> bytes | None:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body = message.get("body", b"")
        if not message.get("more_body", False):
            return body
        chunks = [body]
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def statement(doc: Any) -> tuple[str, list[Any] | None]:
        """One `/query` body (or `/batch` line) → (text, params); raises ValueError(why)."""
        if not isinstance(doc, dict):
            raise ValueError(E.NOT_AN_OBJECT)
        text = doc.get("query")
        if text is None:
            text = doc.get("sql")
        if text is None:
            raise ValueError(E.QUERY_REQUIRED)
        if not isinstance(text, str):
            raise ValueError(E.QUERY_NOT_TEXT)
        params = doc.get("params")
        if params is not None and not isinstance(params, list):
            params = [params]
        return text, params

    @staticmethod
    def decode(raw: bytes) -> Any:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refusal(400, E.body(E.NOT_UTF8)) from None
        try:
            return numbers.loads(raw, text)
        except numbers.OutOfRange as past:  # named apart from the ValueError below: mypyc types a name once
            raise Refusal(400, E.body(str(past))) from None
        except ValueError as e:
            raise Refusal(400, E.bad_json(str(e).split("\n")[0][:200])) from None
        except RecursionError:
            raise Refusal(400, E.bad_json("nested too deep")) from None

    # -- /query and /batch --

    async def query(self, req: Request, receive: Receive, send: Send) -> None:
        await self.take(req, receive, send, self.query_work)

    async def batch(self, req: Request, receive: Receive, send: Send) -> None:
        await self.take(req, receive, send, self.batch_work)

    async def take(self, req: Request, receive: Receive, send: Send,
                   build: Callable[[Request, bytes], Work]) -> None:
        started = time.perf_counter()
        raw = await self.read_body(receive)
        if raw is None:
            return
        try:
            if len(raw) > OFF_LOOP_BODY:  # decoding 16 MB of JSON holds the GIL ~20 ms: not on the loop
                work = await asyncio.get_running_loop().run_in_executor(
                    self.large, partial(gc_policy.held_off, partial(build, req, raw)))
            else:
                work = build(req, raw)
        except Refusal as r:
            await self.respond(send, r.status, r.body, (), api=True)
            self.account(started, "read", True, req, raw)
            return
        await self.serve(work, receive, send, started, req, raw)

    def answer_now(self, scope: Scope, raw: bytes) -> Answer | Pending | Parked | None:
        """`POST /query` or `/batch` answered on the protocol's own call (protocol.py `_direct`):
        the checks and the run of `http()` → `take()` → `serve()`, with no task, no ASGI message
        and one write of the answer. None where that path would wait before answering (a refused
        token's delay, a long text not parsed yet): the protocol then hands the request to the
        ASGI app as it came. Under --sync always a write's answer is `Pending` until its turn's
        fdatasync (durable.py), and a held claim that took nothing is `Parked` (`park`): the
        protocol holds the connection's next request behind either, as behind any answer not
        sent yet."""
        req = Request(scope)
        if req.chunked:
            return None
        try:
            caller = self.auth.data(req.auth)
        except AuthRefused:
            return None  # refused by the ASGI path, after the address's delay (auth.py)
        if caller is not OPEN:
            self.delay.cleared(req.peer)
            _credentialed(scope)
        req.caller = caller
        started = time.perf_counter()
        try:
            work = self.query_work(req, raw) if req.path == "/query" else self.batch_work(req, raw)
        except Refusal as r:
            self.account(started, "read", True, req, raw)
            self.metrics.direct += 1
            return Answer(r.status, r.body)
        if work.large:
            return None
        waits = self.waits or self.start()
        claim = None
        if work.wait > 0 and not waits.closing:
            try:
                claim = self.hold_of(work)
            except FenecError as e:
                self.account(started, "read", True, req, raw)
                self.metrics.direct += 1
                return Answer(*E.answer(e, batch=work.block))
        seen = self.db.seq
        announced = waits.announced
        try:
            outcome, kind, owed = self.run_here(work, held=claim is not None, loop=True)
        except OffLoop:
            return None  # the ASGI path runs it again, off the loop
        self.metrics.direct += 1
        if claim is not None and not outcome.final and not waits.closing and not owed:
            # it took nothing, so it wrote nothing: no fdatasync is owed for it
            return Parked(claim, work, outcome.answer, seen, started, req, raw)
        self.account(started, kind, outcome.answer.status >= 400, req, raw)
        if owed:
            return Pending(outcome.answer, owed, work.block)
        if waits.announced != announced:
            # it woke held claims: the one that takes its row is answered first, then this
            return Pending(outcome.answer, 0, work.block)
        return outcome.answer

    def hold_of(self, work: Work) -> Claim | None:
        """The held claim of a request sent to wait (None: its statements are not a claim that
        waits); a scoped token's is held and woken under its scope (http.md §8.9)."""
        scoped = {"scope": work.caller.scope} if work.caller.scoped else {}
        claim = self.db.prepare_hold(work.statements, **scoped)
        if not claim.held:
            return None
        if work.idem is not None:
            work.idem = replace(work.idem, keep_empty=False)
        return claim

    def park(self, parked: Parked, then: Callable[[Answer], None]) -> Waiter[Answer]:
        """Hold a short-way claim; `then(answer)` when a run takes something or at its deadline
        (never once `forget` dropped it: its client left)."""
        waits = self.waits
        assert waits is not None
        req = parked.req

        def answered(answer: Answer) -> None:
            self.account(parked.started, "write", answer.status >= 400, req, parked.raw)
            delay = self.delay.refused(req.peer) if answer.status == 401 else 0
            if delay > 0:  # its token expired while it waited: a refusal like any
                asyncio.get_running_loop().call_later(delay, then, answer)
            else:
                then(answer)

        waiter = Waiter(parked.work, parked.last, answered)
        waits.hold(parked.claim, waiter, parked.work.wait, parked.seen)
        return waiter

    def forget(self, waiter: Waiter[Answer]) -> None:
        """A parked claim's client left (http.md §8.10)."""
        if self.waits is not None:
            self.waits.forget(waiter)

    def release(self, pending: Pending, then: Callable[[Answer], None]) -> None:
        """`then(answer)` once the pending answer's write is durable; the log's 500 if its
        fdatasync failed (durable.py). With no ticket, once the held claim it woke has run."""
        if not pending.ticket:
            assert self.driver is not None
            self.driver.behind_wake(lambda: then(pending.answer))
            return
        turns = self.turns
        assert turns is not None  # a ticket is owed only under a TurnSync

        def durable(error: FenecError | None) -> None:
            if error is None:
                then(pending.answer)
            else:
                status, body = E.answer(error, batch=pending.block)
                then(Answer(status, body))

        turns.after(pending.ticket, durable)

    def read(self, raw: bytes) -> Any:
        """`decode`, by orjson straight from the bytes where it reads them as `decode` would
        (numbers.plain), with no str made of them first: orjson refuses every body that is not
        UTF-8, as `decode` does, and a body it refuses is read again by `decode`, which words the
        refusal."""
        if numbers.plain(raw):
            try:
                return orjson.loads(raw)
            except Exception:
                pass
        return self.decode(raw)

    def query_work(self, req: Request, raw: bytes) -> Work:
        try:
            text, params = self.statement(self.read(raw))
        except ValueError as e:
            raise Refusal(400, E.body(str(e))) from None
        return self.work_of(req, raw, [(text, params)], block=False)

    def batch_work(self, req: Request, raw: bytes) -> Work:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refusal(400, E.body(E.NOT_UTF8)) from None
        statements: list[tuple[str, list[Any] | None]] = []
        # a body orjson reads as `decode` would (numbers.plain): each line straight through it,
        # without decode's layers (a /batch of ten acks read in 6.7 us instead of 9.4); a line it refuses
        # is read again the general way, which words its refusal
        fast = numbers.plain(raw)
        for k, line in enumerate(raw.split(b"\n"), start=1):
            if k % PACE_ROWS == 0:
                hand_over()  # a body over OFF_LOOP_BODY, read in a worker thread (pacing.py)
            if not line.strip():
                continue
            if fast:
                try:
                    statements.append(self.statement(orjson.loads(line)))
                    continue
                except Exception:
                    pass
            try:
                statements.append(self.statement(self.decode(line)))
            except Refusal as r:
                why = orjson.loads(r.body)["error"] if orjson else json.loads(r.body)["error"]
                raise Refusal(400, E.batch_line(k, why, len(statements))) from None
            except ValueError as e:
                raise Refusal(400, E.batch_line(k, str(e), len(statements))) from None
        if not statements:
            raise Refusal(400, E.body(E.EMPTY_BATCH))
        return self.work_of(req, raw, statements, block=True)

    def text_size(self, statements: list[tuple[str, Any]]) -> tuple[int, int]:
        """(UTF-8 bytes of the request's distinct statement texts, characters of those not parsed
        yet). A text repeated in a batch is parsed once (the cache), so it counts once."""
        cached = self._cached
        if len(statements) == 1:  # a /query: one text
            text = statements[0][0]
            n = len(text)
            size = n if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            return size, 0 if cached is not None and cached(text) else n
        size = 0
        fresh = 0
        for text in {t for t, _ in statements}:
            n = len(text)
            size += n if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            if cached is None or not cached(text):
                fresh += n
        return size, fresh

    def work_of(self, req: Request, raw: bytes, statements: list[tuple[str, Any]], *, block: bool) -> Work:
        size, fresh = self.text_size(statements)
        ceiling = self.config.max_statement_bytes
        if ceiling and size > ceiling:
            raise Refusal(413, E.statement_too_large(size, ceiling))
        wait = 0
        if req.wait is not None:
            parsed = parse_wait(req.wait)
            if parsed is None:
                raise Refusal(400, E.body(E.WAIT_NOT_MS))
            wait = parsed
        idem = None
        caller = req.caller
        if req.idem is not None:
            if not check_key(req.idem):
                raise Refusal(400, E.body(E.IDEM_SIZE))
            namespace = namespace_of(caller.claims) if caller.scoped else None
            if caller.scoped and namespace is None:
                raise Refusal(400, E.body(IDEM_NO_SUB))
            key = namespaced(req.idem) if namespace is None else namespaced(req.idem, namespace)
            idem = make_idem(key, request_hash(req.method, req.target, raw), self.config.idempotency_ttl_ms)
        return Work(statements, block, idem, wait, caller, large=fresh > OFF_LOOP_TEXT, bulk=len(raw) > OFF_LOOP_BODY)

    async def serve(self, work: Work, receive: Receive, send: Send, started: float,
                    req: Request, raw: bytes) -> None:
        claim = None
        waits = self.waits or self.start()
        if work.wait > 0 and not waits.closing:
            try:
                if work.large:
                    claim = await asyncio.get_running_loop().run_in_executor(
                        self.large, partial(gc_policy.held_off, partial(self.hold_of, work)))
                else:
                    claim = self.hold_of(work)
            except FenecError as e:
                status, body = E.answer(e, batch=work.block)
                await self.respond(send, status, body, (), api=True)
                self.account(started, "read", True, req, raw)
                return
            except Exception:
                log.exception("prepare_hold failed")
                await self.respond(send, 500, E.body(E.INTERNAL), (), api=True)
                self.account(started, "read", True, req, raw)
                return
        seen = self.db.seq
        off = work.large or work.bulk
        if not off:  # on the loop, with no await unless its write owes a sync: a claim's usual path
            try:
                outcome, kind, owed = self.run_here(work, held=claim is not None, loop=True)
                if owed:
                    outcome, kind = await self.synced(owed, work, outcome, kind)
            except OffLoop:
                off = True
        if off:
            outcome, kind = await self.run_off_loop(work, held=claim is not None)
        if claim is None or outcome.final or waits.closing:
            await self.send_answer(send, outcome.answer, req)
            self.account(started, kind, outcome.answer.status >= 400, req, raw)
            return
        waiter, future = park(waits, claim, work, outcome.answer, work.wait, seen)
        answer = await self.await_held(waiter, future, receive, req.leaving)
        if answer is not None:
            if answer.status == 401:  # its token expired while it waited: a refusal like any
                delay = self.delay.refused(req.peer)
                if delay > 0:
                    await asyncio.sleep(delay)
            await self.send_answer(send, answer, req)
            self.account(started, "write", answer.status >= 400, req, raw)

    async def await_held(self, waiter: Waiter[Answer], future: asyncio.Future[Answer], receive: Receive,
                         leaving: list[Callable[[], None]] | None) -> Answer | None:
        """Wait for the held request's answer, watching the connection (§8.10): told by the
        protocol in the turn the client's close is read, before a run for a row it found could
        start (held/lines.py rule 8), and through receive() where the server is not ours."""
        gone: Callable[[], None] | None = None
        if leaving is not None and self.waits is not None:
            gone = partial(self.waits.forget, waiter)
            leaving.append(gone)

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait((future, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not watcher.done():
                watcher.cancel()
            if gone is not None and leaving is not None and gone in leaving:
                leaving.remove(gone)
        if future.done() and not future.cancelled():
            return future.result()
        if self.waits is not None:
            self.waits.forget(waiter)
        return None

    def _run_held(self, waiter: Waiter[Answer]) -> Outcome[Answer] | Awaitable[Outcome[Answer]]:
        """Run a held request again: on the loop at once when it can (no task for the run), else
        in a worker thread."""
        work = waiter.payload
        assert isinstance(work, Work)
        expired = self.auth.recheck(work.caller)
        if expired is not None:  # every run asks the token again (http.md §8.9): nothing runs
            return Outcome(True, Answer(401, E.body(expired), [(b"www-authenticate", b"Bearer")]))
        if work.large or work.bulk:
            return self._run_held_off_loop(work)
        try:
            outcome, kind, owed = self.run_here(work, held=True, loop=True)
        except OffLoop:
            return self._run_held_off_loop(work)
        if owed:
            return self._held_synced(owed, work, outcome, kind)
        return outcome

    async def _run_held_off_loop(self, work: Work) -> Outcome[Answer]:
        outcome, _kind = await self.run_off_loop(work, held=True)
        return outcome

    async def _held_synced(self, owed: int, work: Work, outcome: Outcome[Answer], kind: str) -> Outcome[Answer]:
        return (await self.synced(owed, work, outcome, kind))[0]

    async def run_off_loop(self, work: Work, *, held: bool) -> tuple[Outcome[Answer], str]:
        """`run_here` in a worker thread, for a long statement not parsed yet (OFF_LOOP_TEXT), a large
        body (OFF_LOOP_BODY) or a run the loop put back (`OffLoop`), under the command line's ceilings. A
        write there waits for its own fsync by group commit (storage/sync.py), not for the loop's:
        off the loop's thread `TurnSync.deferred` defers nothing, so it owes none."""
        def run() -> tuple[Outcome[Answer], str]:
            outcome, kind, _owed = self.run_here(work, held=held)
            return outcome, kind
        return await asyncio.get_running_loop().run_in_executor(self.large, partial(gc_policy.held_off, run))

    def run_here(self, work: Work, *, held: bool, loop: bool = False) -> tuple[Outcome[Answer], str, int]:
        """Run the work once, in this thread: (outcome, metrics kind, the log ticket its answer
        owes a sync, 0 for none). For a held request a `require` miss is "took nothing" (http.md
        §8.3), not the end of the hold. It never awaits, so a held request's run needs no task of
        its own; under --sync always on the loop its write's fdatasync is owed (`synced`) rather
        than waited for here: one per loop turn for all its writes (durable.py). On the `loop`, a
        run that would pass LOOP_ROWS or wait for the lock raises `OffLoop`, having written nothing."""
        # only a scoped token passes a scope: the server token runs as it always did
        scope = work.caller.scope if work.caller.scoped else None
        owed: Deferred | None = None
        try:
            if self.turns is not None:
                with self.turns.deferred() as owed:
                    result = self._execute(work, scope, loop)
            else:
                result = self._execute(work, scope, loop)
        except Busy:
            raise OffLoop() from None
        except FenecError as e:
            if loop and e.kind == "toolarge" and self._loop_tighter():
                raise OffLoop() from None
            status, body = E.answer(e, batch=work.block)
            kind = "write" if e.kind in ("unmet", "exists", "conflict", "io") else "read"
            return Outcome(not (held and e.kind == "unmet"), Answer(status, body)), kind, _ticket(owed)
        except RecursionError:
            return Outcome(True, Answer(400, E.body("expression too deep"))), "read", _ticket(owed)
        except Exception:
            log.exception("internal fault")
            return Outcome(True, Answer(500, E.body(E.INTERNAL))), "read", _ticket(owed)
        outcome, kind = self._outcome(work, result, held)
        return outcome, kind, _ticket(owed)

    def _loop_tighter(self) -> bool:
        """Whether the loop's bound is below the command line's: a refusal there is not the last word."""
        config = self.config
        rows, writes = config.max_answer_rows, config.max_write_rows
        return not rows or rows > LOOP_ROWS or not writes or writes > LOOP_ROWS

    def _execute(self, work: Work, scope: Any, loop: bool = False) -> Result:
        """`db.execute` of the work (a direct call: its arguments named, no dict of them), bounded by
        the command line's ceilings, and on the `loop` by LOOP_ROWS too, without waiting for the
        lock. A body over OFF_LOOP_BODY (thousands of rows at once) runs with the cycle collector
        held off, and what it stored is frozen after (gc_policy.py)."""
        config = self.config
        rows, writes = config.max_answer_rows, config.max_write_rows
        if loop:
            rows = LOOP_ROWS if not rows or rows > LOOP_ROWS else rows
            writes = LOOP_ROWS if not writes or writes > LOOP_ROWS else writes
        if not work.bulk:
            return self.db.execute(work.statements, block=work.block, idempotency=work.idem, scope=scope,
                                   max_rows=rows, max_writes=writes, nowait=loop, pieces=PIECE_ROWS)
        result = gc_policy.held_off(partial(self.db.execute, work.statements, block=work.block,
                                             idempotency=work.idem, scope=scope, max_rows=rows,
                                             max_writes=writes, nowait=loop))
        if result.wrote:
            gc_policy.after_bulk()
        return result

    def _outcome(self, work: Work, result: Result, held: bool) -> tuple[Outcome[Answer], str]:
        kind = "write" if result.wrote else "read"
        stored = result.replayed
        if stored is not None:
            # the stored answers, rendered as the first answer was (an older file's key keeps the bytes)
            status, body = stored.raw if stored.raw is not None else self.render(work.block, stored.answers or [])
            return Outcome(True, Answer(status, body, [(b"idempotent-replayed", b"true")])), kind
        headers = []
        if result.wrote or work.block:
            headers.append((b"fenec-seq", str(result.seq).encode()))
        took = result.taken > 0
        answers = result.answers
        if not work.block and (type(answers[0]) is Rows or type(answers[0]) is list and len(answers[0]) > PIECE_ROWS):
            answer = Answer(200, b"", headers)
            answer.parts = pieces(answers[0])
            return Outcome(took or not held, answer), kind
        status, body = self.render(work.block, answers)
        return Outcome(took or not held, Answer(status, body, headers)), kind

    async def synced(self, owed: int, work: Work, outcome: Outcome[Answer], kind: str) -> tuple[Outcome[Answer], str]:
        """The outcome once the record the request appended is durable: its loop turn's
        fdatasync (durable.py); the log's 500 if that fdatasync fails."""
        if self.turns is not None:
            try:
                await self.turns.durable(owed)
            except FenecError as e:
                status, body = E.answer(e, batch=work.block)
                return Outcome(True, Answer(status, body)), "write"
        return outcome, kind

    @staticmethod
    def render(block: bool, answers: list[Any]) -> tuple[int, bytes]:
        if block:
            # the engine answers each statement in its /query form; a batch names rows "rows"
            results = [{"rows": a} if isinstance(a, list) else a for a in answers]
            return 200, dumps({"ok": len(answers), "results": results})
        return 200, dumps(answers[0])

    def account(self, started: float, kind: str, error: bool, req: Request, raw: bytes) -> None:
        seconds = time.perf_counter() - started
        self.metrics.answered(kind, seconds, error)
        slow = self.config.slow_ms
        if slow is not None and seconds * 1000 >= slow:
            self.metrics.slow += 1
            log.warning("slow statement: %.1f ms, http %s: %s %s %s", seconds * 1000, kind, req.method,
                        req.target.decode("latin-1"), _without_params(raw))


def pieces(rows: list[Any] | Rows) -> Iterator[bytes]:
    """The JSON array of `rows`, PIECE_ROWS rows a piece, each rendered when it is asked for. A
    get's rows (`Rows`) are the rows it picked, each piece's made into its answer then; a write's
    are its answer, kept whole (an Idempotency-Key may hold them too)."""
    n = len(rows)
    for at in range(0, n, PIECE_ROWS):
        piece = dumps(rows.slice(at, at + PIECE_ROWS) if type(rows) is Rows else rows[at:at + PIECE_ROWS])
        yield (b"[" if at == 0 else b",") + piece[1:-1] + (b"]" if at + PIECE_ROWS >= n else b"")


def _credentialed(scope: Scope) -> None:
    """Tell the connection (protocol.py, where the server is fenec-server's) that it presented an
    accepted token: it is never closed for another connection at the ceiling."""
    conn = scope.get("fenec.conn")
    if conn is not None:
        conn.credentialed()


def _ticket(owed: Deferred | None) -> int:
    return owed.ticket if owed is not None else 0


class Work:
    """What one request asks the engine to run: its statements and how (again, when held). Not a
    queue's job: a job is a row."""

    __slots__ = ("statements", "block", "idem", "wait", "caller", "large", "bulk")

    def __init__(self, statements: list[tuple[str, Any]], block: bool, idem: Any, wait: int,
                 caller: Caller = OPEN, *, large: bool = False, bulk: bool = False) -> None:
        self.statements = statements
        self.block = block
        self.idem = idem
        self.wait = wait
        self.caller = caller
        self.large = large  # its text is long and not parsed yet: parsed and run off the loop
        self.bulk = bulk  # its body is over OFF_LOOP_BODY: run with the collector held off (gc_policy.py)


def _without_params(raw: bytes) -> str:
    """The body for the slow log, with parameter values left out (server.md §8). A large body is
    not decoded again on the loop for it (it is cut at 1 000 characters anyway)."""
    if len(raw) > OFF_LOOP_BODY:
        return f"(a body of {len(raw)} bytes)"
    texts = []
    for line in raw.split(b"\n"):
        try:
            doc = json.loads(line)
            texts.append(json.dumps({"query": doc.get("query", doc.get("sql"))}, ensure_ascii=False))
        except Exception:
            continue
    return "\n".join(texts)[:1000]


def create_app(db: Database, config: Config | None = None, **kw: Any) -> App:
    return App(db, config, **kw)
