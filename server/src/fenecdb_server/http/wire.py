"""The one renderer of the bytes on the wire: every answer the server writes, whichever route
made it, is framed here. The transport (protocol.py, cycle.py) decides what to write and when;
this module only joins a status line, header lines and a body into the bytes of one write.

* `render_api`: a whole answer of `/query` or `/batch` (the service's `Answer`), with what every
  such answer holds already as lines (the server's date, version and CORS headers);
* `render_stream_head`: the head of such an answer whose body comes in pieces, chunked;
* `render_head`: the head of an answer of the ASGI door, from the headers its `send` gave;
* `chunk`, `LAST_CHUNK`: a piece of a chunked body, and its end;
* `render_close`: a refusal of the transport (too many connections, a head it cannot read, a
  timeout, a fault), an answer that closes the connection.

The JSON of a body is `bodies.py`'s.
"""

from __future__ import annotations

import http


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")


STATUS_LINE: dict[int, bytes] = {status: _status_line(status) for status in range(100, 600)}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
JSON_TYPE = b"content-type: application/json; charset=utf-8\r\n"
API_TYPE = JSON_TYPE + b"content-length: "
CHUNKED = b"transfer-encoding: chunked\r\n"
CLOSE = b"connection: close\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """Header lines, each `name: value` and CRLF."""
    return b"".join([name + b": " + value + b"\r\n" for name, value in headers])


def render_api(status: int, first: bytes, body: bytes, version: bytes, extra: list[tuple[bytes, bytes]],
               last: bytes, keep: bool) -> bytes:
    """An answer of /query or /batch: the status line, `first` (the server's date), its type and
    length, `version`, its own headers `extra`, `last` (the CORS headers, if any), `connection:
    close` unless `keep`, a blank line and the body. The same headers in the same order as the
    ASGI door's answers (`AsgiDoor.headers_for`, test_http_direct.py)."""
    out = [STATUS_LINE[status], first, API_TYPE, str(len(body)).encode(), b"\r\n", version]
    for name, value in extra:
        out.append(name)
        out.append(b": ")
        out.append(value)
        out.append(b"\r\n")
    out.append(last)
    if not keep:
        out.append(CLOSE)
    out.append(b"\r\n")
    out.append(body)
    return b"".join(out)


def render_stream_head(status: int, first: bytes, version: bytes, extra: list[tuple[bytes, bytes]],
                       last: bytes, keep: bool) -> bytes:
    """The head of an answer of /query or /batch whose body is written in pieces (`chunk`)."""
    return b"".join([STATUS_LINE[status], first, JSON_TYPE, CHUNKED, version, lines(extra), last,
                     b"" if keep else CLOSE, b"\r\n"])


def render_head(status: int, first: bytes, headers: list[tuple[bytes, bytes]], close: bool,
                chunked: bool) -> bytes:
    """The head of an answer of the ASGI door: the status line, `first` (the server's date), the
    headers its `send` gave (names lower-cased by the caller), `transfer-encoding: chunked` when
    its body is written in pieces with no length, `connection: close` when `close`."""
    out = [STATUS_LINE[status], first]
    for name, value in headers:
        out.append(name)
        out.append(b": ")
        out.append(value)
        out.append(b"\r\n")
    if close:
        out.append(CLOSE)
    if chunked:
        out.append(CHUNKED)
    out.append(b"\r\n")
    return b"".join(out)


def chunk(piece: bytes) -> bytes:
    """One piece of a chunked body (never empty: an empty one would end the body)."""
    return b"%x\r\n%b\r\n" % (len(piece), piece)


def render_close(status: int, body: bytes, extra: bytes = b"") -> bytes:
    """An answer that closes the connection, written before or instead of a request's own (a
    refusal of the transport: too many connections, a head it cannot read, a timeout, a fault)."""
    return b"".join([
        STATUS_LINE[status],
        JSON_TYPE,
        b"content-length: ", str(len(body)).encode(), b"\r\n",
        extra,
        CLOSE,
        b"\r\n",
        body,
    ])
