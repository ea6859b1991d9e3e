"""The one error type of the server, its kinds, and the one table of their statuses.

Every refusal anywhere in the server is a `FenecError` with a kind; its HTTP status is the kind's
in `STATUS`, and nowhere else (no raise site names a status): `http/errors` answers a kind with
it, and the in-process `Database` raises the same kinds, so the two agree. A case that needs
another status needs its own kind here. `docs/http.md`'s error table says the same to users
(test_docs_http.py checks each kind's status appears there).

    kind         status  when
    query          400   syntax, clause not allowed, unbound parameter, too deep, cannot be held
    type           400   a value does not convert, arithmetic mismatch, overflow, bad point
    auth           401   a token missing, unknown, forged or expired
    denied         403   read-only server, outside a token's rules
    notfound       404   unknown collection, field or path
    exists         409   taken name, id or @unique value
    busy           409   an admin task asked for while one runs (a second compaction)
    unmet          412   require N not met
    toolarge       413   a body or statement text over its ceiling
    conflict       422   an Idempotency-Key reused for another request
    io             500   the disk refused a write (every later write is refused too), an internal fault
    unavailable    503   the database is closed
"""

from __future__ import annotations

STATUS = {
    "query": 400,
    "type": 400,
    "auth": 401,
    "denied": 403,
    "notfound": 404,
    "exists": 409,
    "busy": 409,
    "unmet": 412,
    "toolarge": 413,
    "conflict": 422,
    "io": 500,
    "unavailable": 503,
}


class FenecError(Exception):
    """A refusal: `.status` is its kind's HTTP status (`STATUS`), `.message` the `error` text.

    `.at` is the 0-based index of the failing statement of a block (`Database.batch`,
    `POST /batch`), `None` for a single statement. `.row` is the row whose evaluation raised
    it, where the engine knows it: a token's statement answers a withheld message instead when
    that row is one the token may not read (engine/scoped.py), since the message may quote it.
    """

    __slots__ = ("kind", "message", "at", "row")

    def __init__(self, kind: str, message: str, *, at: int | None = None) -> None:
        super().__init__(message)
        if kind not in STATUS:
            raise KeyError(kind)
        self.kind = kind
        self.message = message
        self.at = at
        self.row: dict | None = None

    @property
    def status(self) -> int:
        return STATUS[self.kind]

    def __repr__(self) -> str:
        return f"FenecError({self.kind!r}, {self.message!r}, status={self.status}, at={self.at})"

    def __str__(self) -> str:
        return self.message


class Overflow(FenecError):
    """An integer result or value past 64 bits (kind `type`, 400). The same refusal as any other
    type error, but a picking write passes over the row it comes from instead (engine/execute.py):
    a row's own value, put there by a producer, must not stop every claim of its queue."""

    __slots__ = ()

    def __init__(self, message: str) -> None:
        super().__init__("type", message)

