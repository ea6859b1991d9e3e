"""A connection's limits: uvicorn's httptools protocol with the wire limits of http.md §1 that must
act before the service sees a request (protocol.py adds the direct path to it):

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

Between requests it keeps one keep-alive timer of its own (`_answered`), and it is a subclass of
uvicorn's protocol that uses its internals: the uvicorn version is pinned exactly in
pyproject.toml, and test_http_uvicorn_pin.py fails when an upgrade moves what is used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from . import errors as E
from .wire import Owed, render_close

if TYPE_CHECKING:
    from .busy_poll import BusyPoll
    from .protocol import Front

HEAD_CEILING = E.HEAD_CEILING
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


class Connection(HttpToolsProtocol):
    """One connection's limits and timers (the module's list); FenecProtocol adds the direct path."""

    def __init__(self, shared: Front, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shared = shared
        self.busy: BusyPoll | None = shared.busy
        self._refused = False
        self._spare = False
        self._in_head = True
        self._head_bytes = 0
        self._head_size = 0
        self._timer: Any = None
        self._mid = False  # httptools is inside a request (its head or body read in part)
        self._target = 0  # bytes of the request target read so far
        self._refusal: tuple[int, bytes] | None = None  # decided in a parser callback, written after it
        # told the moment the client's close is read (a held claim's `HeldClaims.forget`, http.md §8.10):
        # uvicorn's own path to the app (connection_lost, the receive() watcher) takes more loop turns
        self._leaving: list[Callable[[], None]] = []
        self._idle_timer: Any = None  # the direct path's keep-alive timer (`_answered`)
        self._idle_since: float | None = None  # when its last answer was written; None: a request runs
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
        transport.write(render_close(E.UNAVAILABLE, E.body(why), b"retry-after: 1\r\n"))
        if transport.can_write_eof():
            transport.write_eof()
            self._linger = self.loop.call_later(LINGER, transport.abort)
        else:
            transport.close()

    def _evict(self) -> bool:
        """Close the longest-idle connection that has presented no accepted token and is between
        requests, for this one; False where there is none."""
        victim: Connection | None = None
        for other in self.connections:
            if isinstance(other, Connection) and other._evictable() and \
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
        self._refuse(E.TIMED_OUT, E.timed_out(what, seconds))

    def feed(self, data: bytes) -> None:
        """`data` to httptools, a refusal written where it cannot read it or the head passes the ceiling."""
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
                self._refuse(E.NOT_IMPLEMENTED, E.body("the method is not supported"))
            else:
                self._refuse(E.BAD_REQUEST, E.malformed(why))
            return
        if self._in_head and self._head_bytes > HEAD_CEILING + 4:
            # the head has not ended within the ceiling: refuse before buffering more of it. With
            # no URL read yet, its request line has not ended: the target is what is too long
            if self._head_size == 0 and self._target == 0:
                self._refuse(E.TARGET_TOO_LONG, E.target_too_long())
            else:
                self._refuse(E.HEAD_TOO_LARGE, E.head_too_large())

    def _refuse(self, status: int, body: bytes) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(render_close(status, body))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._refuse(E.BAD_REQUEST, E.malformed(msg.rstrip(".")))

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
            self._refusal = (E.TARGET_TOO_LONG, E.target_too_long())
            raise ValueError("the request target is too long")  # stops the parser: data_received refuses
        super().on_url(url)
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._head_size += len(name) + len(value) + 4

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

    # -- the keep-alive timer --

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
        if self.timeout_keep_alive_task is not None:  # uvicorn's own timer, after an answer of the ASGI door
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
