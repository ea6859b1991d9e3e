"""A connection's limits and timers: an `asyncio.Protocol` of the server's own that reads every
request head with httptools (llhttp) and keeps the wire limits of http.md §1 that must act before
the service sees a request (protocol.py reads the requests and answers them):

* past `--max-connections` a new connection is answered 503 `too many connections` with
  `Retry-After: 1` and closed, but for RESERVE connections past it that may ask only `/_health`
  or `/_metrics` (one request each, then closed): held claims are connections, and a server
  whose slots are all held workers is healthy, so its health check and its scrape must answer;
* a request head must arrive whole within `--header-timeout` s of the connection (or of its
  first byte, after a previous request), and its body within `--body-timeout` s of the head:
  otherwise 408 and close. Without them a connection that never finished its head held a slot
  for ever, and 100 of them (the default ceiling) locked every client out;
* a header block over 64 KiB is 431 (llhttp has no ceiling of its own: the bytes of the head
  are counted as they arrive, so a head that never ends cannot grow without bound), and a
  request target over 65 535 bytes 414, refused as its bytes arrive;
* a request the parser cannot read is a JSON 400, an unknown method a 501;
* a refusal of the transport (400, 408, 414, 431, 501: `_refuse`) has its answer written and
  its writing side shut, then what its client still sends is read and dropped (a lingering
  close) until the client closes, REFUSED_READ bytes are read or REFUSED_LINGER s pass, and
  only then closed: closed with bytes of the request unread, the connection is reset, and a
  client still sending its head sees the reset instead of the answer;
* at the ceiling, on a server that takes tokens, a new connection closes the longest-idle one
  that has not presented an accepted token (`credentialed`) and is between requests: no request
  being read or run, no answer owed, no held claim. Connections that only ask `/_health` cannot
  keep a token holder out; a held claim, or a connection in the middle of a request, is never
  closed for another;
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
  mark) no answer renders more of itself (`drain`; a long answer of the service is written piece
  by piece as the transport has room, protocol.py), and a connection paused for
  `--idle-timeout` s is cut (aborted: what it buffered is freed);
* between requests, one keep-alive timer (`_answered`): armed when an answer is written and the
  connection has nothing else to do, it closes a connection idle for `--idle-timeout` s.

It takes from uvicorn only what its `Config(http=...)` hands every protocol it makes: the config
(`timeout_keep_alive`) and the server's state (the set of open connections, the running tasks,
the date header, the count of requests answered); test_http_uvicorn_pin.py holds them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import httptools

from . import errors as E
from .wire import render_close

if TYPE_CHECKING:
    from .busy_poll import BusyPoll
    from .protocol import Front

HEAD_CEILING: Final = E.HEAD_CEILING
TARGET_CEILING: Final = E.TARGET_CEILING
RESERVE: Final = 8
FD_RESERVE: Final = 16  # descriptors kept free (a socket among the last 16 the process may open is turned away)
FD_LOG_EVERY: Final = 10.0  # s between two lines saying connections were turned away for descriptors
LINGER: Final = 1.0  # s a turned-away connection waits for its client's request, to read it before closing
REFUSED_LINGER: Final = 5.0  # s at most a refused connection reads what its client still sends (`_refuse`)
REFUSED_READ: Final = 1 << 20  # bytes at most it reads and drops so: a client that never stops sending is cut
READ_AHEAD: Final = 64 << 10  # bytes of a body read ahead of the application before reading pauses

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


def _address(transport: Any, which: str) -> tuple[str, int] | None:
    info = transport.get_extra_info(which)
    if isinstance(info, (list, tuple)) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


class Flow(asyncio.Protocol):
    """A connection's flow: its reading paused and resumed, and its writing (the module's list: an
    answer the client does not read)."""

    def __init__(self, loop: Any, timeout_keep_alive: float) -> None:
        self.loop: Any = loop
        self.timeout_keep_alive = timeout_keep_alive
        self.transport: Any = None
        self._stall: Any = None  # armed while the transport is paused: cuts a reader that reads nothing
        self.write_paused = False
        self._writable: asyncio.Event | None = None  # set when writing resumes (`drain`)
        self._read_paused = False

    def pause_reading(self) -> None:
        if not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self._writable is not None:
            self._writable.clear()
        seconds = self.timeout_keep_alive
        if seconds and self._stall is None:
            self._stall = self.loop.call_later(seconds, self._stalled)

    def resume_writing(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self.write_paused = False
        if self._writable is not None:
            self._writable.set()

    async def drain(self) -> None:
        """Until the transport has room again (or the connection is lost)."""
        if self._writable is None:
            self._writable = asyncio.Event()
        if self.write_paused:
            await self._writable.wait()

    def _stalled(self) -> None:
        """Paused for --idle-timeout s: aborted, since a close would wait for a drain that never comes."""
        self._stall = None
        self.transport.abort()


class Connection(Flow):
    """One connection's limits and timers (the module's list); FenecProtocol reads and answers its
    requests."""

    def __init__(self, shared: Front, config: Any, server_state: Any, app_state: Any = None,
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(_loop or asyncio.get_event_loop(), config.timeout_keep_alive)
        self.shared = shared
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.busy: BusyPoll | None = shared.busy
        self.parser: Any = httptools.HttpRequestParser(self)
        # a request pipelined behind one that closes the connection is not read: its answer is written first
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self._refused = False  # turned away before any request was read (`_turn_away`)
        self._lingering = False  # refused after its answer (`_refuse`): what comes is read and dropped
        self._dropped = 0  # bytes read and dropped since
        self._spare = False
        self._in_head = True
        self._head_bytes = 0
        self._head_size = 0
        self._timer: Any = None  # the head's or the body's timeout, while one is read in part
        self._timing = ""  # which: "head", "body", or "" (none armed)
        self._mid = False  # a request is read in part (its head or body; set as its bytes arrive)
        self._refusal: tuple[int, bytes] | None = None  # decided in a parser callback, written after it
        # the request's target, its header lines (names as sent: lower-cased only where read) and whether
        # it expects a 100; set back when the request ends (`on_message_complete`)
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect = False
        # a client sends the same head again and again: the last head the subclass read whole (`_seen`),
        # and while the head being read repeats it (`_same`), how many of its lines it repeated so far
        self._seen: list[tuple[bytes, bytes]] | None = None
        self._same: list[tuple[bytes, bytes]] | None = None
        self._count = 0
        # told the moment the client's close is read (a held claim's `HeldClaims.forget`, http.md §8.10)
        self._leaving: list[Callable[[], None]] = []
        self._idle_timer: Any = None  # the keep-alive timer (`_answered`)
        self._idle_since: float | None = None  # when its last answer was written; None: a request runs
        self._credentialed = False  # a request on it carried a token the server accepted
        self._cut = False  # closed for a newcomer at the ceiling
        self._quiet = 0.0  # when it last went idle: opened, or an answer written
        self._linger: Any = None  # a turned-away or refused connection's last moment

    def _owes(self) -> bool:  # the subclass's: an answer is being made or written, or a request waits
        raise NotImplementedError

    def _gone(self) -> None:  # the subclass's: the connection is lost, what is owed on it is not written
        raise NotImplementedError

    def connection_made(self, transport: Any) -> None:
        shared = self.shared
        if shared.fd_ceiling and _descriptor(transport) >= shared.fd_ceiling:
            _turn_away(self, transport, E.NO_DESCRIPTORS)
            shared.out_of_descriptors(self.loop)
            return
        limit = shared.max_connections
        if limit and len(self.connections) - shared.spares - shared.cut >= limit \
                and not (shared.evict and _evict(self.connections, shared)):
            if shared.spares >= RESERVE:
                _turn_away(self, transport, E.TOO_MANY)
                return
            self._spare = True
            shared.spares += 1
        self.connections.add(self)
        self.transport = transport
        self.client = _address(transport, "peername")
        self.server = _address(transport, "sockname")
        self._quiet = self.loop.time()
        self._arm(shared.header_timeout, "head")

    def credentialed(self) -> None:
        """A request on it carried a token the server accepted: never closed for another at the ceiling."""
        self._credentialed = True

    def shutdown(self) -> None:
        """The server stops (uvicorn calls it): closed now if idle or refused, else after the answer
        it owes."""
        if (self._lingering or not self._owes()) and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._refused:
            return
        self.connections.discard(self)
        if self._cut:
            self._cut = False
            self.shared.cut -= 1
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._spare:
            self._spare = False
            self.shared.spares -= 1
        self._quit()
        self.write_paused = False
        if self._writable is not None:
            self._writable.set()
        self.parser = None

    def _quit(self) -> None:
        """No more requests on it: its timers stopped, what waits for its client told it left, the
        answers it owes not written (the connection is lost, or refused and lingering)."""
        self._disarm()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._left()
        self._gone()

    def eof_received(self) -> None:
        self._left()  # the transport closes after this (None returned), a lingering one too

    def _left(self) -> None:
        hooks, self._leaving = self._leaving, []
        for hook in hooks:
            hook()

    # -- the head and body timeouts --

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._timing = what
        if seconds > 0:
            self._timer = self.loop.call_later(seconds, self._timed_out, what, seconds)

    def _disarm(self) -> None:
        self._timing = ""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self, what: str, seconds: float) -> None:
        self._timer = None
        self._refuse(E.TIMED_OUT, E.timed_out(what, seconds))

    def data_received(self, data: bytes) -> None:
        if self._refused:
            if self._linger is not None:  # what the client sent is read: a close now resets nothing
                self.transport.close()
            return
        if self._lingering:  # refused: what the client still sends is dropped, up to a bound
            self._dropped += len(data)
            if self._dropped > REFUSED_READ:
                self.transport.abort()
            return
        parser = self.parser
        if parser is None:
            return
        self._idle_since = None  # bytes of a request came: the connection is not idle
        self._mid = True  # a request begun (the parser's end of it sets this back)
        if self._in_head:
            self._head_bytes += len(data)
        try:
            parser.feed_data(data)
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
        if not self._mid:
            return  # every request read whole: no timer runs (the keep-alive timer does, once answered)
        if self._in_head:
            if self._head_bytes > HEAD_CEILING + 4:
                # the head has not ended within the ceiling: refuse before buffering more of it. With
                # no URL read yet, its request line has not ended: the target is what is too long
                if self._head_size == 0 and not self._url:
                    self._refuse(E.TARGET_TOO_LONG, E.target_too_long())
                else:
                    self._refuse(E.HEAD_TOO_LARGE, E.head_too_large())
            elif self._timing != "head":  # a request begun: its head timed from its first byte
                self._arm(self.shared.header_timeout, "head")
        elif self._timing != "body":  # its head read: its body timed from now
            self._arm(self.shared.body_timeout, "body")

    # -- the parser's callbacks that read a head (the subclass reads the rest) --

    def on_url(self, url: bytes) -> None:  # once, or once a piece where the target comes in pieces
        if self._url:
            url = self._url + url
        if len(url) > TARGET_CEILING:
            self._refusal = (E.TARGET_TOO_LONG, E.target_too_long())
            raise ValueError("the request target is too long")  # stops the parser: data_received refuses
        self._url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        if value and (value[-1] == 32 or value[-1] == 9):  # llhttp keeps a value's trailing blanks,
            value = value.rstrip(b" \t")  # which are not its (RFC 9110 §5.5)
        if len(name) == 6 and name.lower() == b"expect" and value.lower() == b"100-continue":
            self._expect = True
        self._head_size += len(name) + len(value) + 4
        same = self._same
        if same is not None:  # the head repeats the last one so far: no list is made while it does
            i = self._count
            if i < len(same):
                seen_name, seen_value = same[i]
                if seen_name == name and seen_value == value:
                    self._count = i + 1
                    return
            self._headers = same[:i]
            self._same = None
        self._headers.append((name, value))

    def _header_lines(self) -> list[tuple[bytes, bytes]]:
        """The head's header lines, once it is read: the last head's own list where it repeats it whole
        (nothing changes a list once read: the subclass reads the same object as the same head)."""
        same = self._same
        if same is not None:
            if self._count == len(same):
                return same
            self._headers = same[:self._count]
            self._same = None
        return self._headers

    def _ended(self) -> None:
        """A request read whole: the next one's head is read from nothing."""
        self._mid = False
        if self._timing:
            self._disarm()
        self._in_head = True
        self._head_bytes = 0
        self._head_size = 0
        self._url = b""
        self._expect = False
        seen = self._seen
        self._same = seen
        self._count = 0
        if seen is None:
            self._headers = []

    def _refuse(self, status: int, body: bytes) -> None:
        """Answer `status` and close, lingering (the module's list): the answer and the end of
        the writing side are sent now, the socket is closed once the client has closed its side
        (`eof_received`), or cut at a bound."""
        transport = self.transport
        if self._lingering or transport.is_closing():
            return
        transport.write(render_close(status, body))
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._lingering = True
        self._linger = self.loop.call_later(REFUSED_LINGER, transport.abort)
        self._quit()

    # -- the keep-alive timer --

    def _answered(self) -> None:
        """An answer is written and the connection kept: counted, and idle from now if nothing else is
        owed. One timer stays armed while requests come; it closes the connection only if the last
        answer is `timeout_keep_alive` old with no request since, else it is armed for what is left."""
        self.server_state.total_requests += 1
        self._quiet = self.loop.time()
        if self._mid or self._owes():
            return
        if self._read_paused:
            self.resume_reading()
        self._idle_since = self._quiet
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_check)

    def _idle_check(self) -> None:
        self._idle_timer = None
        since = self._idle_since
        if since is None:
            return  # a request runs: its answer arms the timer again
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._idle_check)
        elif not self.transport.is_closing():
            self.transport.close()


def _turn_away(conn: Connection, transport: Any, why: str) -> None:
    """503 and close before any request is read, once its first bytes are read or LINGER s pass."""
    conn._refused = True
    conn.transport = transport
    transport.write(render_close(E.UNAVAILABLE, E.body(why), b"retry-after: 1\r\n"))
    if transport.can_write_eof():
        transport.write_eof()
        conn._linger = conn.loop.call_later(LINGER, transport.abort)
    else:
        transport.close()


def _evict(connections: set[Any], shared: Front) -> bool:
    """Close the longest-idle connection that may be closed for a newcomer; False where there is none:
    one that presented no accepted token, between requests (none read, run or owed), open."""
    victim: Connection | None = None
    for other in connections:
        if isinstance(other, Connection) and not (
                other._credentialed or other._cut or other._spare or other._refused or other._mid or other._owes()
                or other.transport is None or other.transport.is_closing()) and \
                (victim is None or other._quiet < victim._quiet):
            victim = other
    if victim is None:
        return False
    victim._cut = True
    shared.cut += 1
    victim.transport.close()
    return True
