"""The blocking transport: `Pool.send(request)` over keep-alive sockets (TLS for https URLs).

A `Pool` keeps up to 16 idle connections and may be used from many threads at once: each
request takes an idle connection (or opens one), and gives it back once its answer is read
whole. An idle connection the server has closed meanwhile is readable (its end), so it is
dropped before use, never written to.

Timeouts: the request's timeout bounds the connect and each send or read on the socket, as
httpx did (`Wire` already added a held claim's wait to it). On Linux, a plain TCP socket stays
blocking and the kernel keeps the timeout (SO_RCVTIMEO / SO_SNDTIMEO, set when it changes):
Python's own socket timeout would add a poll() before every send and read. TLS sockets use
Python's timeout. A failure is the standard library's `TimeoutError`, or `ConnectionError` for
everything else (refused, cut, TLS, a bad answer); the connection is then closed, never reused.
A connection that could not be opened at all raises `_servers.Unsent` / `UnsentTimeout` (the same
two classes beneath): nothing was sent, so a client given a list tries the next server.

Giving up a request from another thread (the blocking worker's `stop()`): the caller passes a
`Watch`, told the socket before the request is written and told when it is done; shutting that
socket down wakes the blocked read at once (closing it would not, on Linux).
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import sys
import threading
from typing import TYPE_CHECKING, Protocol

from ._http11 import Answer, Reader, Target
from ._servers import Unsent, UnsentTimeout

if TYPE_CHECKING:
    from ._wire import Request

MAX_IDLE = 16
READ_SIZE = 65536


class Watch(Protocol):
    def attach(self, sock: socket.socket) -> None: ...

    def detach(self) -> None: ...


def tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


KERNEL_TIMEOUTS = sys.platform == "linux"


def _timeval(timeout: float | None) -> bytes:
    if timeout is None:
        return struct.pack("ll", 0, 0)  # 0: no timeout
    micros = max(1, round(timeout * 1e6))  # 0 would be none at all
    return struct.pack("ll", micros // 1_000_000, micros % 1_000_000)


class _Conn:
    __slots__ = ("sock", "poll", "timeout", "kernel")

    def __init__(self, sock: socket.socket, timeout: float | None, kernel: bool) -> None:
        self.sock = sock
        self.kernel = kernel
        self.timeout: float | None = -1.0  # none set yet
        self.poll = select.poll()
        self.poll.register(sock, select.POLLIN)
        if kernel:
            sock.settimeout(None)
        self.set_timeout(timeout)

    def set_timeout(self, timeout: float | None) -> None:
        if self.kernel:
            tv = _timeval(timeout)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        else:
            self.sock.settimeout(timeout)
        self.timeout = timeout

    def close(self) -> None:
        self.sock.close()


class Pool:
    def __init__(self, target: Target, context: ssl.SSLContext | None = None) -> None:
        self.target = target
        self._context = None if target.scheme == "http" else context or tls_context()
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()
        self._closed = False

    def _take(self) -> _Conn | None:
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the client is closed")
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if not conn.poll.poll(0):  # nothing to read on an idle connection: still open
                return conn
            conn.close()

    def _give_back(self, conn: _Conn) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self, timeout: float | None) -> _Conn:
        t = self.target
        sock = socket.create_connection((t.host, t.port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=t.host)
            return _Conn(sock, timeout, KERNEL_TIMEOUTS and self._context is None)
        except BaseException:
            sock.close()
            raise

    def send(self, request: Request, watch: Watch | None = None) -> Answer:
        data = self.target.encode(request)
        timeout = request.timeout
        try:
            conn = self._take() or self._connect(timeout)
        except TimeoutError as exc:  # nothing was sent: another server of a list may be tried
            raise UnsentTimeout(f"the connection could not be opened in time: {exc}") from exc
        except OSError as exc:
            raise Unsent(f"the connection could not be opened: {exc}") from exc
        keep = False
        try:
            sock = conn.sock
            if watch is not None:
                watch.attach(sock)
            if conn.timeout != timeout:
                conn.set_timeout(timeout)
            sock.sendall(data)
            reader = Reader()
            while True:
                chunk = sock.recv(READ_SIZE)
                if not chunk:
                    answer = reader.end()
                    break
                if reader.feed(chunk):
                    answer = reader.answer()
                    break
            keep = reader.keep
            return answer
        except (TimeoutError, BlockingIOError) as exc:  # BlockingIOError: the kernel's timeout (EAGAIN)
            raise TimeoutError(f"the request timed out: {exc}") from exc
        except OSError as exc:
            raise ConnectionError(f"the request could not be sent: {exc}") from exc
        finally:
            if watch is not None:
                watch.detach()
            if keep:
                self._give_back(conn)
            else:
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
