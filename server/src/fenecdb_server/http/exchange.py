"""What the transport (`protocol.py`) and the service (`app.py`) hand each other, and nothing else:
the transport imports this module and never the application (test_architecture.py).

* `Head`: the few headers an answer depends on, read in one pass;
* `Request`: what the service reads of a request (where it goes, its `Head`, who sent it), made
  by the transport for the requests it hands the service, by `request_of` from an ASGI scope;
* `Answer`: a whole answer (status, body, extra headers; or a long body in pieces);
* `Pending`: an answer that waits for its write's fdatasync, or for the held claim its write woke;
* `Held`: a held claim (`Fenec-Wait`) whose first run took nothing, to be held until a run takes
  something for it or its deadline passes;
* `Service`: the calls the transport makes: `handle(request, body)` answers a request now, later
  (`Pending`, `Held`) or not here (None: the ASGI door answers it), `release` and `hold` hand a
  later answer over when it is ready.

These are native classes where compiled (server/README.md, "Compiled modules").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from . import errors as E
from .auth import OPEN, Caller


class Head:
    """The few things read from a request's headers (their names lower-cased), in one pass: those
    its answer depends on; `transfer-encoding` is only noted (a chunked body is refused). The last
    of a repeated header is the one kept. The transport reads a connection's repeated head into
    one Head (protocol.py) and hands it over in its Request (to the door, in `scope["fenec.head"]`)."""

    __slots__ = ("length", "chunked", "auth", "wait", "idem", "origin", "after")

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.length: bytes | None = None
        self.chunked = False
        self.auth: bytes | None = None
        self.wait: bytes | None = None
        self.idem: bytes | None = None
        self.origin: bytes | None = None
        self.after: bytes | None = None  # Fenec-After (replication.py waits for it)
        for name, value in headers:
            if name == b"content-length":
                self.length = value
            elif name == b"authorization":
                self.auth = value
            elif name == b"fenec-wait":
                self.wait = value
            elif name == b"idempotency-key":
                self.idem = value
            elif name == b"origin":
                self.origin = value
            elif name == b"transfer-encoding":
                self.chunked = True
            elif name == b"fenec-after":
                self.after = value


class Request:
    """What the service reads of a request: where it goes, its `Head`, who sent it, and its
    connection (`conn`: told when the request carried an accepted token; None where there is none).
    The transport makes one for each request it hands the service; `request_of` makes the ASGI door's."""

    __slots__ = ("method", "path", "target", "length", "chunked", "auth", "wait", "idem", "origin", "after",
                 "peer", "caller", "conn", "leaving")

    def __init__(self, method: str, path: str, target: bytes, head: Head, peer: str, conn: Any = None,
                 leaving: list[Callable[[], None]] | None = None) -> None:
        self.method = method
        self.path = path
        self.target = target
        self.length: bytes | None = head.length
        self.chunked: bool = head.chunked
        self.auth: bytes | None = head.auth
        self.wait: bytes | None = head.wait
        self.idem: bytes | None = head.idem
        self.origin: bytes | None = head.origin
        self.after: bytes | None = head.after
        self.peer = peer
        self.caller: Caller = OPEN
        self.conn = conn
        # the connection's hooks for the moment its client leaves (protocol.py), where the door has them
        self.leaving = leaving

    def credentialed(self) -> None:
        """It carried a token the server accepted: its connection is never closed for another at the
        ceiling (connection.py)."""
        if self.conn is not None:
            self.conn.credentialed()


def request_of(scope: dict[str, Any]) -> Request:
    """The Request of an ASGI scope: its Head the transport's (`scope["fenec.head"]`) or read from
    its headers."""
    path: str = scope["path"]
    qs = scope.get("query_string") or b""
    raw = scope.get("raw_path") or path.encode()
    head: Head | None = scope.get("fenec.head")
    if head is None:
        head = Head(scope["headers"])
    client = scope.get("client")
    return Request(scope["method"], path, raw + (b"?" + qs if qs else b""), head, client[0] if client else "",
                   scope.get("fenec.conn"), scope.get("fenec.leaving"))


class Answer:
    """A whole HTTP answer: status, body and the extra headers it carries."""

    __slots__ = ("status", "body", "headers", "parts")

    def __init__(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers: list[tuple[bytes, bytes]] = [] if headers is None else headers
        # a long answer's body, rendered piece by piece as it is written (`body` is then b""), chunked
        self.parts: Iterator[bytes] | None = None

    def __repr__(self) -> str:
        return f"Answer({self.status!r}, {self.body!r}, {self.headers!r})"


FAULT = Answer(E.FAULT, E.body(E.INTERNAL))  # a held run that raised


class Pending:
    """An answer that waits: for its loop turn's fdatasync (`--sync always`, durable.py), or
    (ticket 0) for the run of the held claim its write woke. `Service.release` hands it over then."""

    __slots__ = ("answer", "ticket", "block")

    def __init__(self, answer: Answer, ticket: int, block: bool) -> None:
        self.answer = answer
        self.ticket = ticket
        self.block = block


class Held:
    """A held claim whose first run took nothing: `Service.hold` holds it in the held lines."""

    __slots__ = ("claim", "work", "last", "seen", "started", "req", "raw")

    def __init__(self, claim: Any, work: Any, last: Answer, seen: int, started: float, req: Request,
                 raw: bytes) -> None:
        self.claim = claim  # the engine's prepared claim (held/port.py)
        self.work = work  # what the request runs each time (app.Work)
        self.last = last  # its answer so far (took nothing), answered at its deadline
        self.seen = seen
        self.started = started
        self.req = req
        self.raw = raw


class Service:
    """The calls the transport makes into the application (app.App is the one there is). It has
    methods only: a compiled subclass lays its attributes out after its own slots (an ASGI
    `__call__` adds one), so a base class's attributes would not be where the base writes them."""

    def answer_lines(self) -> tuple[bytes, bytes]:
        """The header lines every answer of /query and /batch carries, before its own headers and
        after them (the server's version; the CORS headers): wire.render_api's `version`, `last`."""
        raise NotImplementedError

    def handle(self, req: Request, raw: bytes) -> Answer | Pending | Held | None:
        """The answer to a `POST /query` or `/batch` with its whole body `raw`: now, later, or None
        where the ASGI door answers it (it must wait first: a refused token's delay, a run off the loop)."""
        raise NotImplementedError

    def release(self, pending: Pending, then: Callable[[Answer], None]) -> None:
        """`then(answer)` once a pending answer may be written."""
        raise NotImplementedError

    def hold(self, held: Held, then: Callable[[Answer], None]) -> Callable[[], None]:
        """Hold a claim; `then(answer)` when a run takes something or at its deadline. Returns
        what the transport calls when the client leaves first (no answer is made then)."""
        raise NotImplementedError
