"""The asyncio transport: `AsyncPool.send(request)` over keep-alive connections (TLS for https).

Each connection is an `asyncio.Protocol` that feeds what arrives to the shared `Reader` and
resolves the request's future once the answer is whole: no stream buffers, no task per request.
Idle connections are kept (up to 16) for the next request of any task on the same event loop;
one the server has closed meanwhile is dropped.

* Timeout: the request's timeout bounds the connect, and then the time without a byte of the
  answer (as a socket's per-read timeout does): `TimeoutError`.
* Cancellation: a cancelled request closes its connection, so a held claim is given up at once
  and the server hands its job to the next waiting worker (http.md §8.10).
* Any other failure is `ConnectionError`, and its connection is closed, never reused. A connection
  that could not be opened raises `_servers.Unsent` / `UnsentTimeout` (nothing was sent).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING

from ._http11 import Answer, Reader, Target
from ._net import MAX_IDLE, tls_context
from ._servers import Unsent, UnsentTimeout

if TYPE_CHECKING:
    from ._wire import Request


class _Conn(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.reader: Reader | None = None
        self.future: asyncio.Future[Answer] | None = None
        self.seen = 0  # bytes received: the timeout watches it move
        self.open = True
        # The timeout's timer is kept across requests, not made and cancelled for each one (that
        # was 8 % of an async claim's instructions): a request only moves the deadline, and the
        # timer, when it fires, looks at the request in flight, if any.
        self._timer: asyncio.TimerHandle | None = None
        self._timeout: float | None = None  # the request in flight's
        self._deadline = 0.0
        self._mark = 0  # `seen` when the deadline was set

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.seen += len(data)
        reader, future = self.reader, self.future
        if reader is None or future is None or future.done():
            self.close()  # bytes nobody asked for: the connection is no longer in step
            return
        try:
            done = reader.feed(data)
        except ConnectionError as exc:
            self._fail(exc)
            return
        if done:
            future.set_result(reader.answer())

    def eof_received(self) -> bool:
        self.open = False
        reader, future = self.reader, self.future
        if reader is not None and future is not None and not future.done():
            try:
                future.set_result(reader.end())
            except ConnectionError as exc:
                future.set_exception(exc)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._fail(ConnectionError(f"the connection was lost: {exc or 'closed by the server'}"))

    # -- one request ------------------------------------------------------------------------------

    def _fail(self, exc: Exception) -> None:
        future = self.future
        if future is not None and not future.done():
            future.set_exception(exc)
        self.close()

    def _watch(self) -> None:
        self._timer = None
        future = self.future
        if future is None or future.done() or not self.open or self._timeout is None:
            return  # nothing in flight, or no timeout: the next request arms the timer again
        now = self.loop.time()
        if self.seen != self._mark:  # the answer is coming: watch the next stretch
            self._mark = self.seen
            self._deadline = now + self._timeout
        if now < self._deadline:
            self._timer = self.loop.call_at(self._deadline, self._watch)
            return
        self._fail(TimeoutError(f"the request timed out: no answer in {self._timeout} s"))

    async def exchange(self, data: bytes, timeout: float | None) -> Answer:
        assert self.transport is not None
        reader = self.reader = Reader()
        future: asyncio.Future[Answer] = self.loop.create_future()
        self.future = future
        self.transport.write(data)
        self._timeout = timeout
        if timeout is not None:
            self._deadline = self.loop.time() + timeout
            self._mark = self.seen
            if self._timer is None:
                self._timer = self.loop.call_at(self._deadline, self._watch)
            elif self._timer.when() > self._deadline:  # a shorter timeout than the timer's
                self._timer.cancel()
                self._timer = self.loop.call_at(self._deadline, self._watch)
        try:
            answer = await future
        finally:
            self.reader = self.future = None
        if not reader.keep:
            self.open = False
        return answer

    def close(self) -> None:
        self.open = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()


class AsyncPool:
    def __init__(self, target: Target, context: ssl.SSLContext | None = None) -> None:
        self.target = target
        self._context = None if target.scheme == "http" else context or tls_context()
        self._idle: list[_Conn] = []
        self._closed = False

    def _take(self, loop: asyncio.AbstractEventLoop) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.open and conn.loop is loop:
                return conn
            if conn.loop is loop:
                conn.close()
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> _Conn:
        t = self.target
        made = loop.create_connection(lambda: _Conn(loop), t.host, t.port, ssl=self._context,
                                      server_hostname=t.host if self._context is not None else None)
        _, conn = await asyncio.wait_for(made, timeout)
        assert isinstance(conn, _Conn)
        return conn

    async def send(self, request: Request) -> Answer:
        if self._closed:
            raise RuntimeError("the client is closed")
        loop = asyncio.get_running_loop()
        data = self.target.encode(request)
        try:
            conn = self._take(loop) or await self._connect(loop, request.timeout)
        except TimeoutError as exc:  # nothing was sent: another server of a list may be tried
            raise UnsentTimeout(f"the connection could not be opened in time: {exc}") from exc
        except OSError as exc:
            raise Unsent(f"the connection could not be opened: {exc}") from exc
        try:
            answer = await conn.exchange(data, request.timeout)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"the request timed out: {exc}") from exc
            if isinstance(exc, OSError):
                raise ConnectionError(f"the request could not be sent: {exc}") from exc
            raise
        if conn.open and not self._closed and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()
        return answer

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
