"""HTTP/1.1 as the client speaks it, with no I/O: where requests go, a request's bytes, and a
reader of one answer. `_net` (blocking sockets) and `_anet` (asyncio) only move these bytes.

* A request is always `POST <prefix><path>` with its whole body and `Content-Length` (the server
  refuses chunked bodies), on a keep-alive connection.
* An answer is read by `Reader.feed(data)` until it says it is complete: a body framed by
  `Content-Length`, by `Transfer-Encoding: chunked`, or by the connection's end. An interim 1xx
  answer is skipped. `keep` tells whether the connection can carry the next request.
* Anything that is not such an answer raises `ConnectionError` (the transport's failure, not a
  `FenecError`: the server did not refuse anything).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ._wire import Request

Answer = tuple[int, Mapping[str, str], bytes]
"""An answer: its status, its headers (names and values in lower case) and its body."""

MAX_HEAD = 64 * 1024


class Fields(Mapping[str, str]):
    """An answer's header fields, looked up in its head when asked for (the client reads three or
    four of them; splitting every line would cost more than the rest of the answer). Names and
    values are in lower case; a repeated field answers its first value."""

    __slots__ = ("_head",)

    def __init__(self, head: str) -> None:
        self._head = head  # the status line, then `\r\n<field>` for each field, then `\r\n`

    def get(self, name: str, default: Any = None) -> Any:
        head = self._head
        at = head.find(f"\r\n{name}:")
        if at < 0:
            return default
        start = at + len(name) + 3
        return head[start:head.find("\r\n", start)].strip()

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return str(value)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and f"\r\n{name}:" in self._head

    def _all(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for line in self._head.split("\r\n")[1:-1]:
            name, _, value = line.partition(":")
            found.setdefault(name.strip(), value.strip())
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class Target:
    """Where a client's requests go: `http://host:port/prefix` or `https://...`."""

    __slots__ = ("scheme", "host", "port", "prefix", "_start")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a FenecDB url is http://host[:port] or https://host[:port], not {url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        default = 443 if parts.scheme == "https" else 80
        self.port = parts.port or default
        self.prefix = parts.path.rstrip("/")
        name = f"[{self.host}]" if ":" in self.host else self.host
        authority = name if self.port == default else f"{name}:{self.port}"
        self._start = f"HTTP/1.1\r\nHost: {authority}\r\n"

    def encode(self, request: Request) -> bytes:
        """The request's bytes: its head, then its whole body."""
        head = [f"POST {self.prefix}{request.path} ", self._start]
        for name, value in request.headers.items():
            head.append(f"{name}: {value}\r\n")
        head.append(f"Content-Length: {len(request.body)}\r\n\r\n")
        return "".join(head).encode("latin-1") + request.body


class Reader:
    """One answer read from the bytes fed to it."""

    __slots__ = ("_buf", "status", "headers", "keep", "_length", "_chunked", "_body", "_at")

    def __init__(self) -> None:
        self._buf = b""
        self.status = 0
        self.headers: Mapping[str, str] = {}
        self.keep = False
        self._length: int | None = None  # the body's length; None: until the connection ends
        self._chunked = False
        self._body: list[bytes] = []
        self._at = -1  # -1 while the head is read

    def answer(self) -> Answer:
        return self.status, self.headers, b"".join(self._body)

    def feed(self, data: bytes) -> bool:
        """Takes the next bytes; True once the answer is complete."""
        if self._at < 0:
            buf = self._buf + data if self._buf else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ConnectionError("the server's answer has a head over 64 KiB")
                self._buf = buf
                return False
            self._buf = b""
            self._head(buf[:end])
            data = buf[end + 4:]
            if self._at < 0:  # an interim 1xx answer: the real one follows
                return self.feed(data)
        if self._chunked:
            return self._chunks(self._buf + data if self._buf else data)
        self._body.append(data)
        if self._length is None:
            return False
        self._at += len(data)
        if self._at < self._length:
            return False
        if self._at > self._length:
            raise ConnectionError("the server sent more than its answer's Content-Length")
        return True

    def end(self) -> Answer:
        """The connection ended: the answer, when it was framed by that end."""
        if self._at >= 0 and self._length is None and not self._chunked:
            self.keep = False
            return self.answer()
        raise ConnectionError("the server closed the connection before its answer was complete")

    def _head(self, head: bytes) -> None:
        text = head.decode("latin-1")
        status = text[:text.find("\r\n")] if "\r\n" in text else text
        if not status.startswith("HTTP/1.") or len(status) < 12 or not status[9:12].isdecimal():
            raise ConnectionError(f"the server's answer is not HTTP/1.1: {status[:40]!r}")
        code = int(status[9:12])
        if 100 <= code < 200:
            return
        low = text.lower() + "\r\n"
        headers = self.headers = Fields(low)
        self.status = code
        self._at = 0
        self.keep = status.startswith("HTTP/1.1") and ("\r\nconnection:" not in low
                                                      or "close" not in headers["connection"])
        if code == 204 or code == 304:
            self._length = 0
        elif "\r\ntransfer-encoding:" in low:
            if "chunked" not in headers["transfer-encoding"]:
                raise ConnectionError("the server's answer has a transfer coding other than chunked")
            self._chunked = True
        elif (at := low.find("\r\ncontent-length:")) >= 0:
            length = low[at + 17:low.find("\r\n", at + 17)].strip()
            if not length.isdecimal():
                raise ConnectionError(f"a bad Content-Length in the server's answer: {length[:20]!r}")
            self._length = int(length)
        else:
            self.keep = False

    def _chunks(self, buf: bytes) -> bool:
        at = 0
        while True:
            if self._at > 0:  # inside a chunk: self._at bytes of data, then CRLF
                need = self._at + 2
                if len(buf) - at < need:
                    self._buf = buf[at:]
                    return False
                self._body.append(buf[at:at + self._at])
                at += need
                self._at = 0
                continue
            end = buf.find(b"\r\n", at)
            if end < 0:
                self._buf = buf[at:]
                return False
            size = buf[at:end].split(b";", 1)[0].strip()
            try:
                n = int(size, 16)
            except ValueError:
                raise ConnectionError("a bad chunk size in the server's answer") from None
            if n == 0:  # the last chunk; then trailers (ignored) and an empty line
                rest = buf.find(b"\r\n\r\n", end)
                if buf[end:end + 4] != b"\r\n\r\n" and rest < 0:
                    self._buf = buf[at:]
                    return False
                self._buf = b""
                return True
            self._at = n
            at = end + 2
