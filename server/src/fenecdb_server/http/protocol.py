"""uvicorn's httptools protocol, with the wire limits of http.md §1 that must act before the
ASGI app sees a request:

* past `--max-connections` a new connection is answered 503 `too many connections` with
  `Retry-After: 1` and closed (uvicorn's own `limit_concurrency` answers plain text and counts
  tasks, not connections);
* a header block over 64 KiB is 431 (llhttp has no ceiling of its own: the bytes of the head
  are counted as they arrive, so a head that never ends cannot grow without bound);
* a request the parser cannot read is a JSON 400 (uvicorn writes plain text), an unknown
  method a 501.
"""

from __future__ import annotations

from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from . import errors as E

HEAD_CEILING = E.HEAD_CEILING


def _raw_answer(status: int, body: bytes, extra: bytes = b"") -> bytes:
    return b"".join([
        STATUS_LINE[status],
        b"content-type: application/json; charset=utf-8\r\n",
        b"content-length: ", str(len(body)).encode(), b"\r\n",
        extra,
        b"connection: close\r\n\r\n",
        body,
    ])


class FenecProtocol(HttpToolsProtocol):
    max_connections = 0  # set by the command line; 0 = unlimited

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._in_head = True
        self._head_bytes = 0
        self._head_size = 0

    def connection_made(self, transport: Any) -> None:
        limit = self.max_connections
        if limit and len(self.connections) >= limit:
            self._refused = True
            self.transport = transport
            transport.write(_raw_answer(503, E.body(E.TOO_MANY), b"retry-after: 1\r\n"))
            transport.close()
            return
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self.parser is None:
            return
        self._unset_keepalive_if_required()
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no upgrade is served: the request goes on as a plain one
        except httptools.HttpParserError as e:
            why = str(e).rstrip(".")
            if "method" in why.lower():
                self._refuse(501, E.body("the method is not supported"))
            else:
                self._refuse(400, E.malformed(why))
            return
        if self._in_head and self._head_bytes > HEAD_CEILING + 4:
            # the head has not ended within the ceiling: refuse before buffering more of it
            self._refuse(431, E.head_too_large())

    def _refuse(self, status: int, body: bytes) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(_raw_answer(status, body))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, E.malformed(msg.rstrip(".")))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_size = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._head_size += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        if self._head_size > HEAD_CEILING:
            self.scope["fenec.head_too_large"] = True  # type: ignore[typeddict-unknown-key]
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0
