"""The transport: one request pipeline for every request on a connection, and `Front`, what every
connection of a server shares.

Every request head is read by one parser (httptools' `HttpRequestParser`, in connection.py's
`Connection`), through the callbacks below; the one routing table (routing.py) says which
requests the service answers itself: a `POST /query` or `/batch` with a `Content-Length` body of
at most 64 KiB, no `Expect`, no `Transfer-Encoding`. Its body is collected and, when its last
byte arrives, handed to the service (`Service.handle`, exchange.py) with no task and no ASGI
message; the answer is rendered by wire.py in one `write`. The service may answer:

* now (`Answer`), written at once; a long one (`Answer.parts`) is chunked, a piece each time
  the transport has room;
* later, still with no task: a write's under `--sync always`, written by its loop turn's
  fdatasync (`Pending`, durable.py), and a held claim's (`Fenec-Wait`) that took nothing
  (`Held`), held in the held lines and written when a run takes something for it or at its
  deadline; its client's close is told to the lines in the turn it is read (`eof_received`);
* not here (None: a refused token, whose 401 waits out the address's delay; a long text not
  parsed yet; `Fenec-After`), then it goes to the ASGI door as any other request.

Every other request goes to the ASGI door (asgi.py) through an `AsgiCycle` (cycle.py) of its own
that this transport runs as a task: its scope built from the parsed head, its body fed to
`receive`, what `send` gives rendered by wire.py; with `--access-log` every request does.
Requests are answered one at a time and in the order they came: a request read while an answer
is owed waits in `waiting` (reading paused) and starts when the answer before it is written.

The transport imports nothing of the application: what it hands the service and gets back is
exchange.py's, the routes it answers itself routing.py's.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import httptools

from ..flags import DEFAULTS
from . import errors as E
from .connection import FD_LOG_EVERY, FD_RESERVE, HEAD_CEILING, READ_AHEAD, Connection, descriptor_limit
from .cycle import AsgiCycle
from .exchange import Answer, Head, Pending, Request, Service
from .limits import OFF_LOOP_BODY
from .routing import DIRECT_TARGETS, SPARE_TARGETS
from .wire import LAST_CHUNK, chunk, lines, render_api, render_close, render_stream_head

if TYPE_CHECKING:
    from .busy_poll import BusyPoll

log = logging.getLogger("fenec.http")

# each direct target's path as the service reads it (a replica's ack among them, not only /query and /batch)
DIRECT_PATHS: Final = {target: target.decode("ascii") for target in DIRECT_TARGETS}
DIRECT_BODY: Final = OFF_LOOP_BODY  # a larger body is decoded in a worker thread, by the ASGI door
# the command line's defaults (flags.py), for a front made without it
HEADER_TIMEOUT_S: Final = float(DEFAULTS["--header-timeout"])
BODY_TIMEOUT_S: Final = float(DEFAULTS["--body-timeout"])


class Front:
    """What every connection of one server shares, set by the command line: its limits, the
    service that answers `/query` and `/batch`, the ASGI app of every other request, and the
    count of reserve connections."""

    __slots__ = ("app", "asgi", "answer_lines", "max_connections", "header_timeout", "body_timeout", "busy",
                 "spares", "cut", "evict", "descriptors", "fd_ceiling", "turned_away", "unlogged", "logged_at",
                 "log_due")

    def __init__(self, app: Service | None, asgi: Any, *, max_connections: int = 0,
                 header_timeout: float = HEADER_TIMEOUT_S, body_timeout: float = BODY_TIMEOUT_S,
                 busy: BusyPoll | None = None, evict: bool = False,
                 descriptors: int | None = None) -> None:
        self.app = app  # None: every request takes the ASGI door (the access log must see each)
        self.asgi = asgi  # the ASGI app of the door
        self.answer_lines = app.answer_lines() if app is not None else (b"", b"")
        self.max_connections = max_connections  # 0 = unlimited
        self.header_timeout = header_timeout  # 0 = never
        self.body_timeout = body_timeout  # 0 = never
        self.busy = busy  # the loop's polling window after each answer written (None: off)
        self.spares = 0  # connections now open in the reserve past max_connections
        self.cut = 0  # connections closed for a newcomer at the ceiling, not gone yet
        # the server takes tokens: an idle connection that presented none may be closed for a newcomer
        # (on an open server no connection is a token holder's, and none is closed for another)
        self.evict = evict
        self.descriptors = descriptor_limit() if descriptors is None else descriptors  # 0 = no limit
        # a new connection whose socket is this descriptor or a higher one is turned away (0 = never)
        self.fd_ceiling = max(self.descriptors - FD_RESERVE, 1) if self.descriptors else 0
        self.turned_away = 0  # connections answered 503 for want of descriptors, ever
        self.unlogged = 0  # of them, since the last line logged
        self.logged_at: float | None = None
        self.log_due: Any = None  # the timer of the next line, while some are not logged yet

    def out_of_descriptors(self, loop: Any) -> None:
        """A connection was turned away for want of descriptors: log it, one line every
        FD_LOG_EVERY s at most (the count since the last line, when its time comes)."""
        self.turned_away += 1
        self.unlogged += 1
        now = loop.time()
        if self.logged_at is None or now - self.logged_at >= FD_LOG_EVERY:
            self._log_turned_away(now)
        elif self.log_due is None:
            self.log_due = loop.call_at(self.logged_at + FD_LOG_EVERY, lambda: self._log_turned_away(loop.time()))

    def _log_turned_away(self, now: float) -> None:
        if self.log_due is not None:
            self.log_due.cancel()
            self.log_due = None
        if not self.unlogged:
            return
        log.error("out of file descriptors: %d new connection(s) answered 503 since the last line (%d in all); "
                  "the limit is %d (ulimit -n), the last %d kept for the server's own files", self.unlogged,
                  self.turned_away, self.descriptors, FD_RESERVE)
        self.unlogged = 0
        self.logged_at = now

    def protocol(self, config: Any, server_state: Any, app_state: Any = None, _loop: Any = None) -> FenecProtocol:
        """A connection's protocol: what uvicorn's `Config(http=...)` calls with its config and state
        (each argument named: a compiled call does not forward `**kwargs` by name)."""
        return FenecProtocol(self, config, server_state, app_state, _loop)


def lowered(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Headers as read, their names lower-cased (as ASGI and `Head` read them)."""
    return [(name.lower(), value) for name, value in headers]


def _fits(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a POST with these headers (names lower-cased) is read whole here: one Content-Length
    within DIRECT_BODY, no Transfer-Encoding, no Upgrade (the door answers those, and an upgrade's
    request is a plain one)."""
    length = None
    for name, value in headers:
        if name == b"content-length":
            if length is not None:
                return False
            length = value
        elif name == b"transfer-encoding" or name == b"upgrade":
            return False
    return length is not None and length.isdigit() and len(length) <= 9 and int(length) <= DIRECT_BODY


class DirectRequest:
    """A request the service answers itself: what it reads of it, its headers as read (for the ASGI
    door, should the service leave it there), its body as it arrives, and its answer's state while
    one is owed."""

    __slots__ = ("request", "head", "headers", "body", "keep", "complete", "disconnected", "gone")

    def __init__(self, request: Request, head: Head, headers: list[tuple[bytes, bytes]], keep: bool) -> None:
        self.request = request
        self.head = head
        self.headers = headers
        self.body: list[bytes] = []
        self.keep = keep
        self.complete = False
        self.disconnected = False
        self.gone: Any = None  # a held claim's `forget`, while it waits


class FenecProtocol(Connection):
    """One connection: its requests read, routed and answered in order (the module's contract)."""

    def __init__(self, shared: Front, config: Any, server_state: Any, app_state: Any = None,
                 _loop: Any = None) -> None:
        super().__init__(shared, config, server_state, app_state, _loop)
        self.service: Service | None = shared.app
        self.asgi = shared.asgi
        self.tasks: set[Any] = server_state.tasks
        self._reading: DirectRequest | AsgiCycle | None = None  # the request whose body is being read
        self.current: DirectRequest | AsgiCycle | None = None  # the request being answered
        self.waiting: deque[DirectRequest | AsgiCycle] = deque()  # read, waiting for their turn
        self._starting = False  # the loop of `_next` runs (an answer written in it starts no other)
        # the last head to a direct target (`_seen`, its header lines): its Head, and whether its body
        # may be read here
        self._seen_head = Head([])
        self._seen_fits = False
        self._dated: Any = None  # the server's headers last written as lines (its date), and those lines
        self._dated_lines = b""
        self._pump: Iterator[bytes] | None = None  # a long answer's pieces not written yet
        self._pump_request: DirectRequest | None = None

    # -- the parser's callbacks (the head's first ones are the connection's: its limits) --

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        if self.transport.is_closing():
            self._reading = None
            return
        parser = self.parser
        keep = parser.should_keep_alive() and not self._spare
        url = self._url
        headers = self._header_lines()
        path = DIRECT_PATHS.get(url)
        request: DirectRequest | AsgiCycle
        if path is not None and self._goes_direct(parser, headers):
            client = self.client
            head = self._seen_head
            request = DirectRequest(Request("POST", path, url, head, client[0] if client is not None else "", self),
                                    head, headers, keep)
        else:
            version = parser.get_http_version()
            request = self._cycle(parser, headers, version, keep and version != "1.0")
        self._reading = request
        if self.current is None:
            self.current = request
            if type(request) is AsgiCycle:
                self._start(request)
        else:
            self.waiting.append(request)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        request = self._reading
        if type(request) is DirectRequest:
            request.body.append(body)
        elif type(request) is AsgiCycle:
            request.add(body)
            if len(request.body) > READ_AHEAD:
                self.pause_reading()

    def on_message_complete(self) -> None:
        self._ended()
        request = self._reading
        self._reading = None
        if type(request) is DirectRequest:
            request.complete = True
            if request is self.current:
                self._answer(request)
        elif type(request) is AsgiCycle:
            request.end()

    def _goes_direct(self, parser: Any, headers: list[tuple[bytes, bytes]]) -> bool:
        if self.service is None or self._spare or self._expect or self._head_size + len(self._url) > HEAD_CEILING:
            return False
        if parser.get_method() != b"POST":
            return False
        if headers is not self._seen:  # a repeated head is read once (`Connection._header_lines`)
            low = lowered(headers)
            self._seen, self._seen_head, self._seen_fits = headers, Head(low), _fits(low)
        return self._seen_fits

    def _cycle(self, parser: Any, headers: list[tuple[bytes, bytes]], version: str, keep: bool) -> AsgiCycle:
        """The request to the ASGI door: its scope from the parsed head."""
        # Any: the stubs name its parts bytes, but an absent part (the query) is None
        parsed: Any = httptools.parse_url(self._url)
        raw_path = parsed.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        method = parser.get_method().decode("ascii")
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": version,
            "method": method, "scheme": "http", "path": path, "raw_path": raw_path,
            "query_string": parsed.query or b"", "root_path": "", "headers": lowered(headers),
            "client": self.client, "server": self.server, "state": {},
            "fenec.conn": self, "fenec.leaving": self._leaving}
        if self._head_size + len(self._url) > HEAD_CEILING:
            scope["fenec.head_too_large"] = True
        if self._spare and raw_path not in SPARE_TARGETS:
            # past the ceiling: only a health check or a scrape, and the connection closes after it
            scope["fenec.too_many"] = True
        return AsgiCycle(self, scope, keep, self._expect)

    # -- the order of answers --

    def _owes(self) -> bool:
        return self.current is not None or bool(self.waiting) or self._pump is not None

    def _start(self, cycle: AsgiCycle) -> None:
        task = self.loop.create_task(cycle.run(self.asgi))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def done(self, request: DirectRequest | AsgiCycle, keep: bool) -> None:
        """`request`'s answer is written: the next request's turn (or the keep-alive timer's)."""
        if request is not self.current:
            return
        self.current = None
        if not keep or self.transport.is_closing():
            self.server_state.total_requests += 1
            return
        if self.waiting and not self._starting:
            self._next()
        self._answered()

    def _next(self) -> None:
        """Start the waiting requests in turn, while each is answered at once."""
        self._starting = True
        try:
            while self.current is None and self.waiting and not self.transport.is_closing():
                request = self.waiting.popleft()
                self.current = request
                if type(request) is AsgiCycle:
                    self._start(request)
                elif type(request) is DirectRequest and request.complete:
                    self._answer(request)
        finally:
            self._starting = False
        if not self.waiting:
            self.resume_reading()

    def shutdown(self) -> None:
        current = self.current
        if self._lingering or (current is None and not self.waiting):
            super().shutdown()
            return
        if current is not None:
            current.keep = False
        self.waiting.clear()

    def _gone(self) -> None:
        self._pump = None
        current = self.current
        if current is not None:
            if type(current) is AsgiCycle:
                current.lost()
            elif type(current) is DirectRequest:
                current.disconnected = True
        self.waiting.clear()

    def dated_lines(self) -> bytes:
        """The server's own header lines (its date), as lines: a new list each second."""
        dated = self.server_state.default_headers
        if dated is not self._dated:
            self._dated = dated
            self._dated_lines = lines(dated)
        return self._dated_lines

    # -- the service's answers --

    def _answer(self, request: DirectRequest) -> None:
        """Hand the whole request to the service; its answer written now, or when it is ready."""
        service = self.service
        assert service is not None
        body = request.body[0] if len(request.body) == 1 else b"".join(request.body)
        try:
            answer = service.handle(request.request, body)
        except Exception:  # as the ASGI door does: a fault no route caught is a JSON 500
            log.exception("internal fault answering POST %s", request.request.path)
            self.transport.write(render_close(E.FAULT, E.body(E.INTERNAL)))
            self.transport.close()
            self.done(request, False)
            return
        if answer is None:  # the service will not answer it here: the ASGI door does
            cycle = AsgiCycle(self, self._door_scope(request), request.keep, False)
            cycle.add(body)
            cycle.end()
            self.current = cycle
            self._start(cycle)
            return
        if type(answer) is Answer:
            self._finish(request, answer)
        elif type(answer) is Pending:
            service.release(answer, lambda a: self._release(request, a))
        else:
            request.gone = service.hold(answer, lambda a: self._release(request, a))  # type: ignore[arg-type]
            self._leaving.append(request.gone)  # told in the turn its client's close is read

    def _door_scope(self, request: DirectRequest) -> dict[str, Any]:
        """The scope of a request the service left to the ASGI door."""
        req = request.request
        return {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": req.path, "raw_path": req.target, "query_string": b"",
            "root_path": "", "headers": lowered(request.headers), "client": self.client, "server": self.server,
            "state": {}, "fenec.conn": self, "fenec.head": request.head,
            "fenec.leaving": self._leaving}  # a long answer stops rendering once its client leaves

    def _release(self, request: DirectRequest, answer: Answer) -> None:
        if request.gone is not None and request.gone in self._leaving:
            self._leaving.remove(request.gone)
        if not request.disconnected:
            self._finish(request, answer)

    def _finish(self, request: DirectRequest, answer: Answer) -> None:
        transport = self.transport
        keep = request.keep
        if transport.is_closing():
            self.done(request, keep)
            return
        if answer.parts is not None:
            self._stream(request, answer)
            return
        # the header lines every direct answer carries, read for each answer: a promotion changes them
        version_line, cors_lines = self.shared.answer_lines
        transport.write(render_api(answer.status, self.dated_lines(), answer.body, version_line,
                                   answer.headers, cors_lines, keep))
        if not keep:
            transport.close()
        elif self.busy is not None:  # the client's next claim likely comes sooner than a sleep would end
            self.busy.touch(self.loop)
        self.done(request, keep)

    def _stream(self, request: DirectRequest, answer: Answer) -> None:
        """A long answer, chunked: its head now, then a piece each time the transport has room
        (`_pump_on`, again from `resume_writing`). The connection's next request waits behind it."""
        version_line, cors_lines = self.shared.answer_lines
        self.transport.write(render_stream_head(answer.status, self.dated_lines(), version_line,
                                                answer.headers, cors_lines, request.keep))
        self._pump = answer.parts
        self._pump_request = request
        self._pump_on()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._pump is not None:
            self._pump_on()

    def _pump_on(self) -> None:
        transport = self.transport
        while not self.write_paused:
            parts = self._pump
            request = self._pump_request
            if parts is None or request is None:
                return
            if transport.is_closing():
                self._pump = None
                return
            piece = next(parts, None)
            if piece is not None:
                if piece:
                    transport.write(chunk(piece))
                continue
            transport.write(LAST_CHUNK)
            self._pump = None
            self._pump_request = None
            if not request.keep:
                transport.close()
            self.done(request, request.keep)
            return
