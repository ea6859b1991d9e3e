"""The transport: a connection (connection.py: uvicorn's httptools protocol with the wire's
limits) with the direct path, and `Front`, what every connection of a server shares.

The direct path: a `POST /query` or `/batch` with a body of at most 64 KiB, no `Expect`,
on a connection with no answer pending, is read here and handed to the service
(`Service.handle`, exchange.py) when its last byte arrives; the answer is written in one `write`.
A plain one that arrives whole (`POST /query HTTP/1.1`, token-named headers, one decimal
Content-Length) has its head read here too, without httptools' per-header callbacks
(`_direct_read`, `wire.read_head`); any other head goes to httptools, and test_http_direct.py
holds both reads to the ASGI door's answers. No ASGI cycle, no task, no message dicts (what each
saves: bench/README.md, "Over HTTP"). Two answers come later, still with no task: a write's
under `--sync always`, written by its loop turn's fdatasync (`Pending`, durable.py), and a held
claim's (`Fenec-Wait`) that took nothing (`Held`), held in the held lines and written when a run
takes something for it or at its deadline; its client's close is told to the lines in the turn
it is read (`eof_received`). While one is owed, an `Owed` stands as the connection's cycle, so
uvicorn queues the next request behind it. Whatever the service will not answer at once (a
refused token, whose 401 waits out the address's delay; a long text not parsed yet) goes to the
ASGI door as if its head had just been read, through uvicorn's own cycle. The other routes, and
every request when `--access-log` is on, take the ASGI door from the start. Pipelined requests
are answered in order, whichever door each takes.

The transport imports nothing of the application: what it hands the service and gets back is
exchange.py's, the routes it answers itself routing.py's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from . import errors as E
from .connection import FD_LOG_EVERY, FD_RESERVE, HEAD_CEILING, Connection, descriptor_limit
from .exchange import Answer, Head, Pending, Service
from .limits import OFF_LOOP_BODY
from .routing import DIRECT_TARGETS, SPARE_TARGETS
from .wire import STATUS_LINE, Owed, lines, read_head, render, render_api

if TYPE_CHECKING:
    from .busy_poll import BusyPoll

log = logging.getLogger("fenec.http")

CHUNKED_TYPE = b"content-type: application/json; charset=utf-8\r\ntransfer-encoding: chunked\r\n"
DIRECT_BODY = OFF_LOOP_BODY  # a larger body is decoded in a worker thread, by the ASGI door

# The direct path's own read of a head (`_direct_read`): the request lines it takes; what a header
# line must look like for it to read the head itself is `wire.read_head`'s. Anything else is left
# to httptools.
DIRECT_LINES = (b"POST /query HTTP/1.1\r\n", b"POST /batch HTTP/1.1\r\n")
DIRECT_LINE = len(DIRECT_LINES[0])
DIRECT_HEAD = 8 << 10  # a longer head is read by httptools (which enforces HEAD_CEILING)


class Front:
    """What every connection of one server shares, set by the command line: its limits, the app
    whose `/query` and `/batch` it answers on the direct path, and the count of reserve connections."""

    __slots__ = ("app", "answer_lines", "max_connections", "header_timeout", "body_timeout", "busy", "spares", "cut", "evict",
                 "descriptors", "fd_ceiling", "turned_away", "unlogged", "logged_at", "log_due")

    def __init__(self, app: Service | None = None, *, max_connections: int = 0, header_timeout: float = 10.0,
                 body_timeout: float = 60.0, busy: BusyPoll | None = None, evict: bool = False,
                 descriptors: int | None = None) -> None:
        self.app = app  # None: every request takes the ASGI door (the access log must see each)
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

    def protocol(self, **kwargs: Any) -> FenecProtocol:
        """A connection's protocol: what uvicorn's `http=` calls with its config and state."""
        return FenecProtocol(self, **kwargs)


class FenecProtocol(Connection):
    """One connection. Compiled (setup.py): the direct path below runs once or twice a request."""

    def __init__(self, shared: Front, *args: Any, **kwargs: Any) -> None:
        super().__init__(shared, *args, **kwargs)
        self.front: Service | None = shared.app
        self._direct_body: list[bytes] | None = None  # the body read so far, on the direct path
        # the last head `_direct_read` read, and what it read (its headers list is shared by the requests
        # that repeat it: nothing changes a scope's headers)
        self._head_seen: bytes | None = None
        self._head_read: tuple[list[tuple[bytes, bytes]], int, bool] | None = None
        self._head_app: Head | None = None
        self._scope_base: dict[str, Any] | None = None  # what every `_direct_read` scope holds alike
        self._dated: Any = None  # the server's headers last written as lines (its date), and those lines
        self._dated_lines = b""

    def data_received(self, data: bytes) -> None:
        if self._refused:
            if self._linger is not None:  # what the client sent is read: a close now resets nothing
                self.transport.close()
            return
        if self.parser is None:
            return
        self._unset_keepalive_if_required()
        if self.front is not None and not self._mid and not self._spare and not self.pipeline \
                and (self.cycle is None or self.cycle.response_complete) and data[:DIRECT_LINE] in DIRECT_LINES:
            data = self._direct_read(data)
            if not data or self._refused or self.transport.is_closing():
                return
        self.feed(data)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._arm(self.shared.body_timeout, "body")
        if self._goes_direct():
            self._direct_body = []
            return
        self.scope["fenec.leaving"] = self._leaving  # type: ignore[typeddict-unknown-key]
        self.scope["fenec.conn"] = self  # type: ignore[typeddict-unknown-key]
        if self._head_size > HEAD_CEILING:
            self.scope["fenec.head_too_large"] = True  # type: ignore[typeddict-unknown-key]
        if self._spare:
            # past the ceiling: only a health check or a scrape, and the connection closes after it
            path = httptools.parse_url(self.url).path
            if path not in SPARE_TARGETS:
                self.scope["fenec.too_many"] = True  # type: ignore[typeddict-unknown-key]
        super().on_headers_complete()
        if self._spare and self.cycle is not None:
            self.cycle.keep_alive = False

    def on_body(self, body: bytes) -> None:
        if self._direct_body is not None:
            self._direct_body.append(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._mid = False
        self._disarm()
        if self._direct_body is not None:
            body = b"".join(self._direct_body)
            self._direct_body = None
            self._in_head = True
            self._head_bytes = 0
            self._direct_answer(body)
            return
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0

    # -- the direct path --

    def _direct_read(self, data: bytes) -> bytes:
        """Read and answer the whole `POST /query` and `/batch` requests at the front of `data`
        without httptools' callbacks (most of the protocol's own CPU a claim): the request line
        exactly as in DIRECT_LINES, header lines of a token, a colon and visible bytes, one
        decimal Content-Length, a body of at most DIRECT_BODY all here. Returns what it did not
        take: from the first request it would not read (httptools reads it, as it reads every
        request `_direct_read` does not), or what follows an answer owed later. Each byte is
        looked at a bounded number of times: linear in `data`."""
        pos = 0
        size = len(data)
        while data[pos:pos + DIRECT_LINE] in DIRECT_LINES:
            first = pos + DIRECT_LINE
            end = data.find(b"\r\n\r\n", first - 2, pos + DIRECT_HEAD)
            if end < 0:
                break
            block = data[first:end] if end > first else b""  # `end` is first - 2 when there is no header line
            if block == self._head_seen:  # a client sends the same head again and again
                head = self._head_read
            else:
                head = read_head(block)
                self._head_seen, self._head_read = block, head
                self._head_app = None
            if head is None:
                return data[pos:]
            headers, length, keep = head
            if self._head_app is None:
                self._head_app = Head(headers)  # what the service reads of it, once too
            stop = end + 4 + length
            if length < 0 or length > DIRECT_BODY or size < stop:
                break
            url = data[pos + 5:pos + 11]
            base = self._scope_base
            if base is None:
                base = self._scope_base = {
                    "type": "http", "http_version": "1.1", "method": "POST", "query_string": b"",
                    "client": self.client, "server": self.server, "scheme": self.scheme,
                    "root_path": self.root_path, "fenec.conn": self}
            scope = base.copy()  # a scope of its own for each request, as uvicorn makes
            scope["path"] = "/query" if url == b"/query" else "/batch"
            scope["raw_path"] = url
            scope["headers"] = headers
            scope["fenec.head"] = self._head_app
            self._disarm()  # the head timer armed when the connection opened
            if not self._answer(scope, data[end + 4:stop], keep):
                break  # the service will not answer it here: httptools reads it, for the ASGI door
            pos = stop
            if not keep or self.transport.is_closing() or not (self.cycle is None or self.cycle.response_complete):
                break  # closed (or a fault closed it), or an answer owed: what follows waits (httptools queues it)
        return data[pos:] if pos else data

    def _goes_direct(self) -> bool:
        if self.front is None or self._spare or self._head_size > HEAD_CEILING or self.expect_100_continue:
            return False
        if self.url not in DIRECT_TARGETS or self.parser.get_method() != b"POST" or self.parser.should_upgrade():
            return False
        if self.pipeline or not (self.cycle is None or self.cycle.response_complete):
            return False  # an answer is still owed on this connection: this one waits its turn
        length = None
        for name, value in self.headers:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                return False
        return length is not None and length.isdigit() and int(length) <= DIRECT_BODY

    def _direct_answer(self, body: bytes) -> None:
        scope = self.scope
        path = self.url.decode("ascii")
        scope["method"] = "POST"
        scope["path"] = path
        scope["raw_path"] = self.url
        scope["query_string"] = b""
        keep = self.parser.should_keep_alive() if self.parser is not None else False
        if not self._answer(scope, body, keep):  # type: ignore[arg-type]
            self._to_asgi(body)

    def _answer(self, scope: dict[str, Any], body: bytes, keep: bool) -> bool:
        """Answer the request on the direct path; False where the service leaves it to the ASGI door."""
        front = self.front
        assert front is not None
        try:
            answer = front.handle(scope, body)
        except Exception:  # as the ASGI door does: a fault no route caught is a JSON 500
            log.exception("internal fault answering POST %s", scope["path"])
            self._write_answer(E.FAULT, E.body(E.INTERNAL), [], keep_alive=False)
            return True
        if answer is None:
            return False
        if isinstance(answer, Answer):
            self._finish(answer, keep)
            return True
        # an answer owed later (its write's fdatasync, a held claim's wake or deadline): the
        # connection's next request waits behind it as behind any answer not sent yet (uvicorn
        # queues it in `pipeline`)
        owed = Owed(keep)
        self.cycle = owed  # type: ignore[assignment]
        if isinstance(answer, Pending):
            front.release(answer, lambda a: self._release(owed, a))
        else:
            owed.gone = front.hold(answer, lambda a: self._release(owed, a))
            self._leaving.append(owed.gone)  # told in the turn its client's close is read
        return True

    def _release(self, owed: Owed, answer: Answer) -> None:
        owed.response_complete = True
        if owed.gone is not None and owed.gone in self._leaving:
            self._leaving.remove(owed.gone)
        if not owed.disconnected:
            self._finish(answer, owed.keep_alive)

    def _finish(self, answer: Answer, keep: bool) -> None:
        front = self.front
        assert front is not None
        transport = self.transport
        if transport.is_closing():
            if keep:
                self._answered()  # uvicorn's end of a cycle, as after any answer
            return
        dated = self.server_state.default_headers  # a new list each second (uvicorn's clock tick)
        if dated is not self._dated:
            self._dated = dated
            self._dated_lines = lines(dated)
        if answer.parts is not None:
            self._stream(answer, keep)
            return
        # the header lines every direct answer carries, read for each answer: a promotion changes them
        version_line, cors_lines = self.shared.answer_lines
        transport.write(render_api(answer.status, self._dated_lines, answer.body, version_line,
                                   answer.headers, cors_lines, keep))
        if not keep:
            transport.close()
            return
        if self.busy is not None:  # the client's next request is likely a few tens of µs away
            self.busy.touch(self.loop)
        self._answered()

    def _stream(self, answer: Answer, keep: bool) -> None:
        """A long answer, chunked: its head now, then a piece each time the transport has room
        (`_pump_on`, again from `resume_writing`). The connection's next request waits behind it."""
        front = self.front
        assert front is not None and answer.parts is not None
        owed = Owed(keep)
        self.cycle = owed  # type: ignore[assignment]
        version_line, cors_lines = self.shared.answer_lines
        head = [STATUS_LINE[answer.status], self._dated_lines, CHUNKED_TYPE, version_line,
                lines(answer.headers), cors_lines, b"" if keep else b"connection: close\r\n", b"\r\n"]
        self.transport.write(b"".join(head))
        self._pump = answer.parts
        self._pump_owed = owed
        self._pump_on()

    def _write_answer(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]], *,
                      keep_alive: bool) -> None:
        transport = self.transport
        if transport.is_closing():
            return
        if not headers:  # a fault's answer
            headers = [(b"content-type", b"application/json; charset=utf-8"),
                       (b"content-length", str(len(body)).encode())]
        transport.write(render(status, self.server_state.default_headers, headers, body, keep_alive))
        if not keep_alive:
            transport.close()
        elif self.busy is not None:  # the client's next request is likely a few tens of µs away
            self.busy.touch(self.loop)

    def _to_asgi(self, body: bytes) -> None:
        """The request to the ASGI app, as if its head had just been read and its body with it."""
        HttpToolsProtocol.on_headers_complete(self)
        # as our on_headers_complete gives the app: a long answer stops rendering once its client leaves
        self.scope["fenec.leaving"] = self._leaving  # type: ignore[typeddict-unknown-key]
        self.scope["fenec.conn"] = self  # type: ignore[typeddict-unknown-key]
        cycle: Any = self.cycle  # uvicorn's cycle, made just now
        cycle.body = bytearray(body)
        cycle.more_body = False
        cycle.message_event.set()
