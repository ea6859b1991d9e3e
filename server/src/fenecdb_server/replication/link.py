"""A replica's two connections to its primary: the stream it reads and the acks it sends.

`Stream` is `GET /_replication` read off its socket: the answer's head, then its body, unframed
from HTTP/1.1's chunked coding (the primary sends the body in chunks: it has no length) or read to
the connection's end (a body that is neither). What the follower needs that a general HTTP client
does not give it: `some()`, the body bytes that have come, a block at a time, and `ready()`,
whether more of the body can be had now without waiting. The follower makes what it applied
durable and acks it only once nothing more is there to apply (follower.py), so that records which
came together share one fdatasync and one ack.

`Acks` is the connection its acks go out on: `POST /_replication/ack` with the body
`replica=<id>&seq=<n>` (http/replication.py answers it), written whole in one send (`TCP_NODELAY`:
no small write waits for the delayed ACK of the one before) and not waited for. The answers are
read later, before the next ack, and nothing waits on them: an ack is a statement of fact that
only ever grows, so one lost with its connection is made good by the next, which says as much
and more. What may lose one is the primary closing the connection while idle (its keep-alive
timeout): the answers read before each ack find that end first, and the ack goes out on a new
connection; an ack sent into a connection closed at that very moment is sent again by the
follower at the stream's next keep-alive (follower.py).

Every wait here is bounded by the socket's timeout (the follower's `SILENCE_S`): a silent or
frozen primary is an `OSError`, as a broken link is.
"""

from __future__ import annotations

import select
import socket

HEAD_CEILING = 64 << 10  # an answer's head longer than this is not a primary's
_RECV = 256 << 10


class Refused(Exception):
    """The primary answered the stream's request with an error, or not as HTTP."""


class Stream:
    """The body of one `GET /_replication` answer, read as it comes."""

    __slots__ = ("sock", "status", "headers", "_raw", "_body", "_chunked", "_left", "_ended")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.status = 0
        self.headers: dict[str, str] = {}  # lower-case names
        self._raw = bytearray()  # received, not unframed yet
        self._body = bytearray()  # unframed body bytes, not taken yet
        self._chunked = False
        self._left = 0  # of the chunk being unframed: its bytes still to come (-1: its CRLF)
        self._ended = False  # the last chunk was read, or the connection ended

    @classmethod
    def open(cls, host: str, port: int, target: str, headers: dict[str, str], timeout: float) -> Stream:
        """Connect, send the request, and read the answer's head (`status`, `headers`)."""
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            lines = [f"GET {target} HTTP/1.1", f"host: {host}:{port}", *(f"{k}: {v}" for k, v in headers.items())]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            stream = cls(sock)
            stream._read_head()
        except BaseException:
            sock.close()
            raise
        return stream

    def close(self) -> None:
        self.sock.close()

    def shutdown(self) -> None:
        """From another thread: end a read waiting on the socket now."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_head(self) -> None:
        raw = self._raw
        while True:
            end = raw.find(b"\r\n\r\n")
            if end >= 0:
                break
            got = self.sock.recv(_RECV) if len(raw) <= HEAD_CEILING else b""
            if not got:
                raise Refused("the primary's answer has no head")
            raw += got
        head = bytes(raw[:end]).decode("latin-1").split("\r\n")
        del raw[:end + 4]
        parts = head[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise Refused(f"the primary's answer is not HTTP: {head[0][:80]!r}")
        self.status = int(parts[1])
        for line in head[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if self._chunked:
            self._unframe()
        else:
            self._body += raw
            raw.clear()

    def _fill(self) -> bool:
        """One read off the socket (waiting for it, up to the timeout); False at its end."""
        got = self.sock.recv(_RECV)
        if not got:
            return False
        if self._chunked:
            self._raw += got
            self._unframe()
        else:
            self._body += got
        return True

    def _unframe(self) -> None:
        """Move what `_raw` holds of the chunks' data into `_body`."""
        raw = self._raw
        body = self._body
        while raw and not self._ended:
            left = self._left
            if left > 0:
                n = min(left, len(raw))
                body += raw[:n]
                del raw[:n]
                self._left = left - n or -1
            elif left < 0:  # the CRLF after a chunk's data
                if len(raw) < 2:
                    return
                if raw[:2] != b"\r\n":
                    raise Refused("the stream's chunked coding is broken")
                del raw[:2]
                self._left = 0
            else:  # a chunk's size line
                end = raw.find(b"\r\n")
                if end < 0:
                    if len(raw) > 1024:
                        raise Refused("the stream's chunked coding is broken")
                    return
                size_text = bytes(raw[:end]).split(b";", 1)[0].strip()
                del raw[:end + 2]
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise Refused("the stream's chunked coding is broken") from None
                if size == 0:
                    self._ended = True
                else:
                    self._left = size

    def take(self, n: int) -> bytes:
        """The body's next `n` bytes, waiting for them; EOFError if the body ends first."""
        return self._cut(n, n)

    def some(self, most: int) -> bytes:
        """Up to `most` of the body's next bytes, as many as are here, waiting only when none is;
        EOFError if the body ends first (the follower reads a block at a time, follower.py)."""
        return self._cut(1, most)

    def _cut(self, least: int, most: int) -> bytes:
        """The body's next bytes, at least `least` (waiting for them) and at most `most`."""
        body = self._body
        while len(body) < least:
            if self._ended or not self._fill():
                self._ended = True
                raise EOFError
        got = bytes(body[:most])
        del body[:most]
        return got

    def ready(self) -> bool:
        """Whether more of the body is here now: read, or readable at the socket (no wait). Bytes
        of the coding alone (a chunk's CRLF or size line) are not more of the body."""
        while not self._body:
            if self._ended:
                return False
            try:
                if not select.select([self.sock], [], [], 0)[0]:
                    return False
                if not self._fill():
                    self._ended = True  # `take` says so
                    return False
            except (OSError, ValueError):
                return False  # `take` meets it again and says so
        return True


class Acks:
    """The connection a replica's acks go out on (the module's docstring)."""

    __slots__ = ("host", "port", "timeout", "head", "sock", "sent", "unanswered", "_answers")

    def __init__(self, host: str, port: int, token: str, timeout: float) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.head = (f"POST /_replication/ack HTTP/1.1\r\nhost: {host}:{port}\r\n"
                     f"authorization: Bearer {token}\r\n").encode("latin-1")
        self.sock: socket.socket | None = None
        self.sent = 0  # acks sent since start
        self.unanswered = 0  # acks sent on the connection open now whose answers were not read yet
        self._answers = bytearray()  # of the answers read, the part of one not complete yet

    def send(self, ident: str, seq: int) -> None:
        """Post that this replica's disk holds change `seq`, then read the answers that came. An
        ack found sent into a connection the primary had closed is sent again on a new one. Raises
        OSError (its connection is closed then: the next send opens another)."""
        body = f"replica={ident}&seq={seq}".encode("latin-1")
        data = self.head + b"content-length: %d\r\n\r\n%b" % (len(body), body)
        for _ in range(2):
            sock = self.sock
            if sock is None:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)  # sends and reads never wait: an ack is a few hundred bytes
                self.sock = sock
            try:
                sent = sock.send(data)
            except OSError:
                sent = -1
            if sent != len(data):  # the primary reads nothing (a freeze): the connection goes
                self.close()
                raise OSError(f"the primary took {max(sent, 0)} of an ack's {len(data)} bytes")
            self.unanswered += 1
            self.sent += 1
            if self._answers_read():
                return
            self.close()  # it had ended (the primary closes an idle connection): this ack is lost
        raise OSError("the primary closed the ack connection twice")

    def lost(self) -> bool:
        """Whether an ack may not have reached the primary: its connection ended before each ack
        sent on it was answered (the connection is closed then: the next send opens another)."""
        if self.sock is None or self._answers_read():
            return False
        lost = self.unanswered > 0
        self.close()
        return lost

    def _answers_read(self) -> bool:
        """Read the answers that came, without waiting; False when the connection ended. (Their
        statuses tell nothing the stream does not: a 404, no stream of this replica open, means
        the stream broke, and the follower reconnects for it.)"""
        sock = self.sock
        assert sock is not None
        answers = self._answers
        try:
            while True:
                got = sock.recv(_RECV)
                if not got:
                    return False
                answers += got
                while (end := answers.find(b"\r\n\r\n")) >= 0:
                    head = bytes(answers[:end]).lower()
                    at = head.find(b"content-length:")
                    length = int(head[at + 15:].split(b"\r\n", 1)[0]) if at >= 0 else 0
                    if len(answers) < end + 4 + length:
                        break
                    del answers[:end + 4 + length]
                    self.unanswered -= 1
        except BlockingIOError:
            return True  # nothing more now
        except (OSError, ValueError):  # a broken answer ends the connection as its close does
            return False

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.unanswered = 0
        self._answers.clear()
