"""The one renderer of the bytes on the wire, and the direct path's read of a plain head
(`protocol.py`): a request's header lines read (`read_head`), an answer's status line, headers and
body joined into the one write that sends it (`render`, `render_api`, `render_close`), and the
stand-in for an answer owed later (`Owed`). The JSON of a body is `bodies.py`'s.
"""

from __future__ import annotations

import http
from collections.abc import Callable

# What a header line must look like for the direct path to read it (RFC 9110 §5.1, §5.5): a name
# of token bytes, a colon, and a value of visible bytes, spaces and tabs. Each set is deleted by
# `bytes.translate`, and what is left is the bytes outside it (a regex's match took 3 300
# instructions a line; a translate builds its table of 256 bytes each call, so the values are
# checked in one call for the whole head and a name clients send is not checked at all).
TOKEN = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
FIELD_VALUE = b"\t" + bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100))
# Names clients send, lowered: one of these is a token without looking at its bytes (`bytes.lower`
# changes A-Z alone, so a name that lowers to one of them is made of token bytes too).
NAMES = frozenset({b"host", b"content-type", b"content-length", b"accept", b"accept-encoding", b"user-agent",
                   b"authorization", b"connection", b"fenec-wait", b"idempotency-key", b"origin", b"x-request-id",
                   b"keep-alive", b"cache-control", b"accept-language", b"referer", b"cookie"})
# the headers whose request httptools reads (Content-Length alone is read here, once)
REFUSED_HERE = frozenset({b"transfer-encoding", b"expect", b"upgrade", b"content-length"})


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")


STATUS_LINE: dict[int, bytes] = {status: _status_line(status) for status in range(100, 600)}


def read_head(block: bytes) -> tuple[list[tuple[bytes, bytes]], int, bool] | None:
    """The header lines of `block` (each ends with CRLF but the last; b"" for none): their names
    lowered with their values, the Content-Length (-1 when absent) and whether the connection is
    kept. None where the direct path leaves the request to httptools: a line that is not a token,
    a colon and a visible value; a Transfer-Encoding, Expect or Upgrade; a second Content-Length
    or one that is not 1-9 digits; a Connection other than close or keep-alive. Each byte is
    looked at a bounded number of times."""
    headers: list[tuple[bytes, bytes]] = []
    length = -1
    keep = True
    if not block:
        return headers, length, keep
    lines = block.split(b"\r\n")
    # every byte but the separators a value may hold (a name's are a subset): one pass for the block
    if b"".join(lines).translate(None, FIELD_VALUE):
        return None
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon:
            return None
        low = name.lower()
        if low not in NAMES and (not name or name.translate(None, TOKEN)):
            return None
        value = value.strip(b" \t")
        if low in REFUSED_HERE:
            if low != b"content-length" or length >= 0 or not value.isdigit() or len(value) > 9:
                return None
            length = int(value)
        elif low == b"connection":
            token = value.lower()
            if token == b"close":
                keep = False
            elif token != b"keep-alive":
                return None
        headers.append((low, value))
    return headers, length, keep


def render(status: int, first: list[tuple[bytes, bytes]], headers: list[tuple[bytes, bytes]], body: bytes,
           keep: bool) -> bytes:
    """One answer's bytes: the status line, the headers `first` (the server's: its date) then
    `headers`, `connection: close` unless `keep`, a blank line and the body."""
    out = [STATUS_LINE[status]]
    for name, value in first:
        out.append(name)
        out.append(b": ")
        out.append(value)
        out.append(b"\r\n")
    for name, value in headers:
        out.append(name)
        out.append(b": ")
        out.append(value)
        out.append(b"\r\n")
    if not keep:
        out.append(b"connection: close\r\n")
    out.append(b"\r\n")
    out.append(body)
    return b"".join(out)


def render_close(status: int, body: bytes, extra: bytes = b"") -> bytes:
    """An answer that closes the connection, written before or instead of a request's own (a
    refusal of the transport: too many connections, a head it cannot read, a timeout)."""
    return b"".join([
        STATUS_LINE[status],
        b"content-type: application/json; charset=utf-8\r\n",
        b"content-length: ", str(len(body)).encode(), b"\r\n",
        extra,
        b"connection: close\r\n\r\n",
        body,
    ])


def lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """Header lines, each `name: value` and CRLF."""
    return b"".join([name + b": " + value + b"\r\n" for name, value in headers])


API_TYPE = b"content-type: application/json; charset=utf-8\r\ncontent-length: "


def render_api(status: int, first: bytes, body: bytes, version: bytes, extra: list[tuple[bytes, bytes]],
               last: bytes, keep: bool) -> bytes:
    """`render` of an answer of /query or /batch, with what every such answer holds already as
    lines: `first` (the server's date), `version` and `last` (the CORS headers, if any); the same
    bytes, in the same order, as `render` of `AsgiDoor.headers_for`'s list (test_http_direct.py)."""
    out = [STATUS_LINE[status], first, API_TYPE, str(len(body)).encode(), b"\r\n", version]
    for name, value in extra:
        out.append(name)
        out.append(b": ")
        out.append(value)
        out.append(b"\r\n")
    out.append(last)
    if not keep:
        out.append(b"connection: close\r\n")
    out.append(b"\r\n")
    out.append(body)
    return b"".join(out)


class Owed:
    """Stands as the connection's `cycle` while a short-way answer is owed (its write's fdatasync,
    the held claim its write woke, a held claim's wake or deadline), so that uvicorn treats the
    connection as one with an answer not sent yet: a request read
    meanwhile is queued (`pipeline`, reading paused), shutdown leaves it to close after its
    answer, and a lost connection marks it (the attributes uvicorn touches)."""

    __slots__ = ("keep_alive", "response_complete", "disconnected", "message_event", "gone")

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive
        self.response_complete = False
        self.disconnected = False
        self.message_event = self
        self.gone: Callable[[], None] | None = None  # a held claim's `forget`, while it waits

    def set(self) -> None:  # as `message_event`: no one waits on it
        pass
