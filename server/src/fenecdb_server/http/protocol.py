"""uvicorn's httptools protocol, with the wire limits of http.md §1 that must act before the
ASGI app sees a request:

* past `--max-connections` a new connection is answered 503 `too many connections` with
  `Retry-After: 1` and closed (uvicorn's own `limit_concurrency` answers plain text and counts
  tasks, not connections), but for RESERVE connections past it that may ask only `/_health`
  or `/_metrics` (one request each, then closed): held claims are connections, and a server
  whose slots are all held workers is healthy, so its health check and its scrape must answer;
* a request head must arrive whole within `--header-timeout` s of the connection (or of its
  first byte, after a previous request), and its body within `--body-timeout` s of the head:
  otherwise 408 and close. Without them a connection that never finished its head held a slot
  for ever, and 100 of them (the default ceiling) locked every client out;
* a header block over 64 KiB is 431 (llhttp has no ceiling of its own: the bytes of the head
  are counted as they arrive, so a head that never ends cannot grow without bound), and a
  request target over 65 535 bytes 414, refused as its bytes arrive (httptools reads no longer
  URL: past it uvicorn's read of the head failed, a 400 `User callback error`);
* a request the parser cannot read is a JSON 400 (uvicorn writes plain text), an unknown
  method a 501;
* at the ceiling, on a server that takes tokens, a new connection closes the longest-idle one
  that has not presented an accepted token (`credentialed`) and is between requests: no request being read or run, no
  answer owed, no held claim. Connections that only ask `/_health` cannot keep a token holder
  out; a held claim, or a connection in the middle of a request, is never closed for another;
* out of file descriptors: once a new connection's socket is among the last FD_RESERVE
  descriptors the process may open (`ulimit -n`; a socket takes the lowest one free, so fewer
  than FD_RESERVE are left), it is answered 503 `Retry-After: 1` and closed, and a line is
  logged, one every FD_LOG_EVERY s at most with the count turned away since the last. The
  reserve keeps descriptors for the server's own files (a backup, a compaction) and for the
  next newcomers' 503s: without it, at the limit, libuv (uvloop) accepts and closes every
  pending connection, its request unread, which resets it, and nothing says why. Connections
  already open are served as ever, and new ones again once descriptors are free;
* a connection turned away (past the ceiling, or out of descriptors) has its answer written
  and its writing side shut, and is closed once what its client sent is read (or the client
  closes, or LINGER s pass): closed with its request unread it would be reset, and its client
  lose the answer;
* an answer the client does not read: while the transport is paused (its buffer past the high
  mark) a long answer renders no more of itself (`Answer.parts`, written piece by piece as the
  transport has room), and a connection paused for `--idle-timeout` s is cut (aborted: what it
  buffered is freed).

And the claim's short way (`_direct`): a `POST /query` or `/batch` with a body of at most 64
KiB, no `Expect`, on a connection with no answer pending, is read here and handed to
`App.answer_now` when its last byte arrives; the answer is written in one `write`. A plain one
that arrives whole (`POST /query HTTP/1.1`, token-named headers, one decimal Content-Length) is
read without httptools' per-header callbacks (`_quick`: 92-96 us of server user CPU a claim of
10 against 98-102, bench/server_cost.py); any other head goes to httptools as before, and
test_http_direct.py holds both reads to the ASGI path's answers. No ASGI
cycle, no task, no message dicts: per claim that was about a third of the server's own CPU
(bench/README.md, "Over HTTP"). Two answers come later, still with no task: a write's under
`--sync always`, written by its loop turn's fdatasync (`App.release`, durable.py), and a held
claim's (`Fenec-Wait`) that took nothing, parked in the held lines (`App.park`) and written when
a run takes something for it or at its deadline; its client's close is told to the lines in the
turn it is read (`eof_received`). While one is owed, an `Owed` stands as the connection's
cycle, so uvicorn queues the next request behind it. Whatever that path cannot answer at once
(a refused token, whose 401 waits out the address's delay; a long text not parsed yet) goes to
the ASGI app as if its head had just been read, through uvicorn's own cycle. The other routes,
and every request when `--access-log` is on, take the ASGI path from the start. Pipelined
requests are answered in order, whichever path each takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from . import errors as E
from .app import Answer, Head, Pending
from .wire import STATUS_LINE, Owed, lines, read_head, render, render_api

if TYPE_CHECKING:
    from .app import App
    from .busy_poll import BusyPoll

HEAD_CEILING = E.HEAD_CEILING
CHUNKED_TYPE = b"content-type: application/json; charset=utf-8\r\ntransfer-encoding: chunked\r\n"


def _raw_answer(status: int, body: bytes, extra: bytes = b"") -> bytes:
    return b"".join([
        STATUS_LINE[status],
        b"content-type: application/json; charset=utf-8\r\n",
        b"content-length: ", str(len(body)).encode(), b"\r\n",
        extra,
        b"connection: close\r\n\r\n",
        body,
    ])


RESERVE = 8
FD_RESERVE = 16  # descriptors kept free (a socket among the last 16 the process may open is turned away)
FD_LOG_EVERY = 10.0  # s between two lines saying connections were turned away for descriptors
LINGER = 1.0  # s a turned-away connection waits for its client's request, to read it before closing

log = logging.getLogger("fenec.http")


def descriptor_limit() -> int:
    """The process's soft limit on open descriptors (`ulimit -n`); 0 where there is none."""
    try:
        import resource
    except ImportError:  # no such limit on this platform
        return 0
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 0 if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


def _descriptor(transport: Any) -> int:
    sock = transport.get_extra_info("socket")
    return int(sock.fileno()) if sock is not None else -1
SPARE_PATHS = frozenset({b"/_health", b"/_metrics"})
DIRECT_PATHS = frozenset({b"/query", b"/batch"})
DIRECT_BODY = 64 << 10  # the app's OFF_LOOP_BODY: a larger body is decoded in a worker thread

# The quick read (`_quick`): the request lines it takes; what a header line must look like for it
# to read the head itself is `wire.read_head`'s. Anything else is left to httptools.
QUICK_LINES = (b"POST /query HTTP/1.1\r\n", b"POST /batch HTTP/1.1\r\n")
QUICK_LINE = len(QUICK_LINES[0])
QUICK_HEAD = 8 << 10  # a longer head goes the long way (which enforces HEAD_CEILING)


class Front:
    """What every connection of one server shares, set by the command line: its limits, the app
    whose `/query` and `/batch` it answers on the short way, and the count of reserve connections."""

    __slots__ = ("app", "max_connections", "header_timeout", "body_timeout", "busy", "spares", "cut", "evict",
                 "descriptors", "fd_ceiling", "turned_away", "unlogged", "logged_at", "log_due")

    def __init__(self, app: App | None = None, *, max_connections: int = 0, header_timeout: float = 10.0,
                 body_timeout: float = 60.0, busy: BusyPoll | None = None, evict: bool = False,
                 descriptors: int | None = None) -> None:
        self.app = app  # None: every request takes the ASGI path (the access log must see each)
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


class FenecProtocol(HttpToolsProtocol):
    """One connection. Compiled (setup.py): the short way below runs once or twice a request."""

    def __init__(self, shared: Front, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shared = shared
        self.front: App | None = shared.app
        self.busy: BusyPoll | None = shared.busy
        self._refused = False
        self._spare = False
        self._in_head = True
        self._head_bytes = 0
        self._head_size = 0
        self._timer: Any = None
        self._direct: list[bytes] | None = None  # the body read so far, on the short way
        self._mid = False  # httptools is inside a request (its head or body read in part)
        self._target = 0  # bytes of the request target read so far
        self._refusal: tuple[int, bytes] | None = None  # decided in a parser callback, written after it
        # told the moment the client's close is read (a held claim's `Lines.forget`, http.md §8.10):
        # uvicorn's own path to the app (connection_lost, the receive() watcher) takes more loop turns
        self._leaving: list[Callable[[], None]] = []
        self._idle_timer: Any = None  # the short way's keep-alive timer (`_answered`)
        self._idle_since: float | None = None  # when its last answer was written; None: a request runs
        # the last head the quick read read, and what it read (its headers list is shared by the requests
        # that repeat it: nothing changes a scope's headers)
        self._head_seen: bytes | None = None
        self._head_read: tuple[list[tuple[bytes, bytes]], int, bool] | None = None
        self._head_app: Head | None = None
        self._scope_base: dict[str, Any] | None = None  # what every quick read's scope holds alike
        self._dated: Any = None  # the server's headers last written as lines (its date), and those lines
        self._dated_lines = b""
        self._credentialed = False  # a request on it carried a token the server accepted
        self._cut = False  # closed for a newcomer at the ceiling
        self._quiet = 0.0  # when it last went idle: opened, or an answer written
        self._stall: Any = None  # armed while the transport is paused: cuts a reader that reads nothing
        self._pump: Iterator[bytes] | None = None  # a long answer's pieces not written yet
        self._pump_owed: Owed | None = None
        self._linger: Any = None  # a turned-away connection's last moment (`_turn_away`)

    def connection_made(self, transport: Any) -> None:
        shared = self.shared
        if shared.fd_ceiling and _descriptor(transport) >= shared.fd_ceiling:
            self._turn_away(transport, E.NO_DESCRIPTORS)
            shared.out_of_descriptors(self.loop)
            return
        limit = shared.max_connections
        if limit and len(self.connections) - shared.spares - shared.cut >= limit \
                and not (shared.evict and self._evict()):
            if shared.spares >= RESERVE:
                self._turn_away(transport, E.TOO_MANY)
                return
            self._spare = True
            shared.spares += 1
        super().connection_made(transport)
        self._quiet = self.loop.time()
        self._arm(shared.header_timeout, "head")

    def _turn_away(self, transport: Any, why: str) -> None:
        """503 and close, before any request is read: the answer written, the writing side shut,
        and the connection closed once the client's first bytes are read (`data_received`), or
        it closes, or LINGER s pass."""
        self._refused = True
        self.transport = transport
        transport.write(_raw_answer(503, E.body(why), b"retry-after: 1\r\n"))
        if transport.can_write_eof():
            transport.write_eof()
            self._linger = self.loop.call_later(LINGER, transport.abort)
        else:
            transport.close()

    def _evict(self) -> bool:
        """Close the longest-idle connection that has presented no accepted token and is between
        requests, for this one; False where there is none."""
        victim: FenecProtocol | None = None
        for other in self.connections:
            if isinstance(other, FenecProtocol) and other._evictable() and \
                    (victim is None or other._quiet < victim._quiet):
                victim = other
        if victim is None:
            return False
        victim._cut = True
        self.shared.cut += 1
        victim.transport.close()
        return True

    def _evictable(self) -> bool:
        cycle = self.cycle
        return not (self._credentialed or self._cut or self._spare or self._refused or self._mid or self.pipeline
                    or self._pump is not None or self.transport is None or self.transport.is_closing()) \
            and (cycle is None or cycle.response_complete)

    def credentialed(self) -> None:
        """A request on this connection carried a token the server accepted (App): never closed for
        another connection at the ceiling."""
        self._credentialed = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._quiet = self.loop.time()

    # -- a reader that does not read --

    def pause_writing(self) -> None:
        super().pause_writing()
        seconds = self.timeout_keep_alive
        if seconds and self._stall is None:
            self._stall = self.loop.call_later(seconds, self._stalled)

    def resume_writing(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().resume_writing()
        if self._pump is not None:
            self._pump_on()

    def _stalled(self) -> None:
        """Paused for --idle-timeout s: the client reads nothing. Aborted, not closed: a close would
        wait for the buffer to drain, which it never does."""
        self._stall = None
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            return
        if self._cut:
            self._cut = False
            self.shared.cut -= 1
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self._pump = None
        self._disarm()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._spare:
            self._spare = False
            self.shared.spares -= 1
        self._left()
        super().connection_lost(exc)

    def eof_received(self) -> None:
        self._left()  # the transport closes after this, as uvicorn's does

    def _left(self) -> None:
        hooks, self._leaving = self._leaving, []
        for hook in hooks:
            hook()

    # -- the head and body timeouts --

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        if seconds > 0:
            self._timer = self.loop.call_later(seconds, self._timed_out, what, seconds)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self, what: str, seconds: float) -> None:
        self._timer = None
        self._refuse(408, E.timed_out(what, seconds))

    def data_received(self, data: bytes) -> None:
        if self._refused:
            if self._linger is not None:  # what the client sent is read: a close now resets nothing
                self.transport.close()
            return
        if self.parser is None:
            return
        self._unset_keepalive_if_required()
        if self.front is not None and not self._mid and not self._spare and not self.pipeline \
                and (self.cycle is None or self.cycle.response_complete) and data[:QUICK_LINE] in QUICK_LINES:
            data = self._quick(data)
            if not data or self._refused or self.transport.is_closing():
                return
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no upgrade is served: the request goes on as a plain one
        except httptools.HttpParserError as e:
            if self._refusal is not None:  # a callback stopped the parse to refuse the request
                self._refuse(*self._refusal)
                return
            why = str(e).rstrip(".")
            if "method" in why.lower():
                self._refuse(501, E.body("the method is not supported"))
            else:
                self._refuse(400, E.malformed(why))
            return
        if self._in_head and self._head_bytes > HEAD_CEILING + 4:
            # the head has not ended within the ceiling: refuse before buffering more of it. With
            # no URL read yet, its request line has not ended: the target is what is too long
            if self._head_size == 0 and self._target == 0:
                self._refuse(414, E.target_too_long())
            else:
                self._refuse(431, E.head_too_large())

    def _refuse(self, status: int, body: bytes) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(_raw_answer(status, body))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, E.malformed(msg.rstrip(".")))

    def on_message_begin(self) -> None:
        self._mid = True
        super().on_message_begin()
        self._in_head = True
        self._head_size = 0
        self._target = 0
        if self._timer is None:  # a later request on the connection: timed from its first byte
            self._arm(self.shared.header_timeout, "head")

    def on_url(self, url: bytes) -> None:
        self._target += len(url)
        if self._target > E.TARGET_CEILING:
            self._refusal = (414, E.target_too_long())
            raise ValueError("the request target is too long")  # stops the parser: data_received refuses
        super().on_url(url)
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._head_size += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._arm(self.shared.body_timeout, "body")
        if self._may_answer_directly():
            self._direct = []
            return
        self.scope["fenec.leaving"] = self._leaving  # type: ignore[typeddict-unknown-key]
        self.scope["fenec.conn"] = self  # type: ignore[typeddict-unknown-key]
        if self._head_size > HEAD_CEILING:
            self.scope["fenec.head_too_large"] = True  # type: ignore[typeddict-unknown-key]
        if self._spare:
            # past the ceiling: only a health check or a scrape, and the connection closes after it
            path = httptools.parse_url(self.url).path
            if path not in SPARE_PATHS:
                self.scope["fenec.too_many"] = True  # type: ignore[typeddict-unknown-key]
        super().on_headers_complete()
        if self._spare and self.cycle is not None:
            self.cycle.keep_alive = False

    def on_body(self, body: bytes) -> None:
        if self._direct is not None:
            self._direct.append(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._mid = False
        self._disarm()
        if self._direct is not None:
            body = b"".join(self._direct)
            self._direct = None
            self._in_head = True
            self._head_bytes = 0
            self._answer_directly(body)
            return
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0

    # -- the short way --

    def _quick(self, data: bytes) -> bytes:
        """Read and answer the whole `POST /query` and `/batch` requests at the front of `data`
        without httptools' callbacks (most of the protocol's own CPU a claim): the request line
        exactly as in QUICK_LINES, header lines of a token, a colon and visible bytes, one
        decimal Content-Length, a body of at most DIRECT_BODY all here. Returns what it did not
        take: from the first request it would not read (httptools reads it, as it reads every
        request the quick read does not), or what follows an answer owed later. Each byte is
        looked at a bounded number of times: linear in `data`."""
        pos = 0
        size = len(data)
        while data[pos:pos + QUICK_LINE] in QUICK_LINES:
            first = pos + QUICK_LINE
            end = data.find(b"\r\n\r\n", first - 2, pos + QUICK_HEAD)
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
                self._head_app = Head(headers)  # what the app reads of it, once too
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
                break  # the app will not answer it here: httptools reads it, for the ASGI path
            pos = stop
            if not keep or self.transport.is_closing() or not (self.cycle is None or self.cycle.response_complete):
                break  # closed (or a fault closed it), or an answer owed: what follows waits (httptools queues it)
        return data[pos:] if pos else data

    def _may_answer_directly(self) -> bool:
        if self.front is None or self._spare or self._head_size > HEAD_CEILING or self.expect_100_continue:
            return False
        if self.url not in DIRECT_PATHS or self.parser.get_method() != b"POST" or self.parser.should_upgrade():
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

    def _answer_directly(self, body: bytes) -> None:
        scope = self.scope
        path = self.url.decode("ascii")
        scope["method"] = "POST"
        scope["path"] = path
        scope["raw_path"] = self.url
        scope["query_string"] = b""
        keep = self.parser.should_keep_alive() if self.parser is not None else False
        if not self._answer(scope, body, keep):  # type: ignore[arg-type]
            self._hand_to_asgi(body)

    def _answer(self, scope: dict[str, Any], body: bytes, keep: bool) -> bool:
        """Answer the request on the short way; False where the app leaves it to its ASGI path."""
        front = self.front
        assert front is not None
        try:
            answer = front.answer_now(scope, body)
        except Exception:  # as the ASGI app does: a fault no route caught is a JSON 500
            from .app import log

            log.exception("internal fault answering POST %s", scope["path"])
            self._write_answer(500, E.body(E.INTERNAL), [], keep_alive=False)
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
            waiter = front.park(answer, lambda a: self._release(owed, a))
            owed.gone = partial(front.forget, waiter)
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
        transport.write(render_api(answer.status, self._dated_lines, answer.body, front.version_line,
                                   answer.headers, front.cors_lines, keep))
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
        head = [STATUS_LINE[answer.status], self._dated_lines, CHUNKED_TYPE, front.version_line,
                lines(answer.headers), front.cors_lines, b"" if keep else b"connection: close\r\n", b"\r\n"]
        self.transport.write(b"".join(head))
        self._pump = answer.parts
        self._pump_owed = owed
        self._pump_on()

    def _pump_on(self) -> None:
        transport = self.transport
        while not self.flow.write_paused:
            parts = self._pump
            owed = self._pump_owed
            if parts is None or owed is None:
                return
            if transport.is_closing():
                self._pump = None
                return
            piece = next(parts, None)
            if piece is not None:
                transport.write(b"%x\r\n%b\r\n" % (len(piece), piece))
                continue
            transport.write(b"0\r\n\r\n")
            self._pump = None
            self._pump_owed = None
            owed.response_complete = True
            if not owed.keep_alive:
                transport.close()
                return
            self._answered()
            return

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

    # -- the keep-alive timer of the short way --

    def _answered(self) -> None:
        """uvicorn's `on_response_complete` after a short-way answer (counted, reading resumed, a
        request queued meanwhile started), with the keep-alive timer armed lazily: uvicorn arms a
        timer after every answer and cancels it at the next request, a timer made and dropped per
        request (5 000 instructions of a put's 190 000, bench/README.md). Here one timer stays armed
        while requests come, and when it fires it closes the connection only if the last answer is
        `timeout_keep_alive` old with no request since; otherwise it is armed again for what is left."""
        if self.pipeline or self.transport.is_closing():
            self.on_response_complete()
            return
        self.server_state.total_requests += 1
        flow = self.flow
        if flow.read_paused:  # uvicorn's `resume_reading`, its test here (a call a request saved)
            flow.resume_reading()
        self._idle_since = self._quiet = self.loop.time()
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_check)

    def _unset_keepalive_if_required(self) -> None:
        if self.timeout_keep_alive_task is not None:  # uvicorn's own timer, after an answer of the ASGI path
            super()._unset_keepalive_if_required()
        self._idle_since = None  # bytes of a request came: the connection is not idle

    def _idle_check(self) -> None:
        self._idle_timer = None
        since = self._idle_since
        if since is None:
            return  # a request runs: its answer arms the timer again
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._idle_check)
        else:
            self.timeout_keep_alive_handler()

    def _hand_to_asgi(self, body: bytes) -> None:
        """The request to the ASGI app, as if its head had just been read and its body with it."""
        HttpToolsProtocol.on_headers_complete(self)
        # as our on_headers_complete gives the app: a long answer stops rendering once its client leaves
        self.scope["fenec.leaving"] = self._leaving  # type: ignore[typeddict-unknown-key]
        self.scope["fenec.conn"] = self  # type: ignore[typeddict-unknown-key]
        cycle: Any = self.cycle  # uvicorn's cycle, made just now
        cycle.body = bytearray(body)
        cycle.more_body = False
        cycle.message_event.set()
