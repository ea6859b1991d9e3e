"""A blocking held claim that another thread can give up at once.

A thread blocked reading a socket is not woken on Linux when another thread closes it (httpx's
`Client.close()` leaves a held claim waiting out its whole `Fenec-Wait`); `shutdown()` does wake
it. So the blocking worker sends its claims on a connection of their own, one per claim (the
connect costs ~0.1 ms on loopback beside a claim held for seconds), learns that connection's
socket from httpcore's `trace` hook as it connects, and `abort()` shuts it down: the read ends
at once, and the server, seeing the connection gone, gives the claim up and hands its job to
the next waiting worker (http.md §8.10).

Only a client on httpx's own network transport can be aborted this way; with any other
transport (a mock in tests, a proxy of the user's) the claim goes through the client as is and
is waited out.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any

import httpx

from ._client import send_failed
from ._wire import Request

if TYPE_CHECKING:
    from ._client import Client


class AbortableSender:
    def __init__(self, db: Client) -> None:
        self._db = db
        self._lock = threading.RLock()  # abort() may come from a signal handler on the sending thread
        self._aborted = False
        self._sock: socket.socket | None = None
        own = isinstance(getattr(db._http, "_transport", None), httpx.HTTPTransport)
        self._http = httpx.Client(base_url=db.url, limits=httpx.Limits(max_keepalive_connections=0)) if own else None

    @property
    def abortable(self) -> bool:
        return self._http is not None

    def _trace(self, name: str, info: dict[str, Any]) -> None:
        if name != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            self._sock = sock
            if self._aborted:
                self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def send(self, request: Request) -> Any:
        if self._http is None:
            return self._db._send(request)
        with self._lock:
            if self._aborted:
                raise ConnectionError("the claim was given up: the worker is stopping")
            self._sock = None
        try:
            response = self._http.post(request.path, content=request.body, headers=request.headers,
                                       timeout=request.timeout, extensions={"trace": self._trace})
        except httpx.TransportError as exc:
            raise send_failed(exc) from exc
        finally:
            with self._lock:
                self._sock = None
        return self._db._wire.answer(request, response.status_code, response.headers, response.content)

    def abort(self) -> None:
        """Give up the claim in flight, and any sent after: its read ends with a ConnectionError."""
        with self._lock:
            self._aborted = True
            self._shut()

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
