"""A blocking held claim that another thread can give up at once.

A thread blocked reading a socket is not woken on Linux when another thread closes it;
`shutdown()` does wake it. So the blocking worker sends its claims through this sender: the
client's pool tells it the claim's socket before the request is written (`attach`) and when the
answer is in (`detach`), and `abort()` shuts that socket down. The read ends at once with a
`ConnectionError`, the pool drops the connection, and the server, seeing it gone, gives the claim
up and hands its job to the next waiting worker (http.md §8.10).

Only a client on its own network transport can be aborted this way; with `transport=` (a
recorder in tests) the claim goes through the client as is and is waited out.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any

from ._wire import Request

if TYPE_CHECKING:
    from ._client import Client


class AbortableSender:
    def __init__(self, db: Client) -> None:
        self._db = db
        self._lock = threading.RLock()  # abort() may come from a signal handler on the sending thread
        self._aborted = False
        self._sock: socket.socket | None = None

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self._aborted:
                self._shut()

    def detach(self) -> None:
        with self._lock:
            self._sock = None

    def _shut(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def send(self, request: Request) -> Any:
        if self._db._pool is None:
            return self._db._send(request)
        with self._lock:
            if self._aborted:
                raise ConnectionError("the claim was given up: the worker is stopping")
        return self._db._send(request, self)  # each server it goes to (a list's) tells this its socket

    def abort(self) -> None:
        """Give up the claim in flight, and any sent after: its read ends with a ConnectionError."""
        with self._lock:
            self._aborted = True
            self._shut()
