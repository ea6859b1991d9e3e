"""The one error type of the server, and its kinds.

Every refusal anywhere in the server is a `FenecError`. The engine raises it with a kind;
only `http/errors` turns a kind into an HTTP answer, and `status` is already the status the
spec names for that kind (`fenecql.md` §17, `http.md` §6), so the in-process `Database`
and the HTTP layer agree.

    FenecError
      kind   status  when
      query    400   syntax, clause not allowed, unbound parameter, too deep, cannot be held
      type     400   a value does not convert, arithmetic mismatch, overflow, bad point
      denied   403   read-only server, outside a token's rules
      notfound 404   unknown collection, field or path
      exists   409   taken name, id or @unique value
      unmet    412   require N not met
      conflict 422   an Idempotency-Key reused for another request
      io       500   the disk refused a write; every later write is refused too
"""

from __future__ import annotations

STATUS = {
    "query": 400,
    "type": 400,
    "auth": 401,
    "denied": 403,
    "notfound": 404,
    "exists": 409,
    "unmet": 412,
    "toolarge": 413,
    "conflict": 422,
    "io": 500,
}


class FenecError(Exception):
    """A refusal: `.status` is the HTTP status, `.message` the `error` text.

    `.at` is the 0-based index of the failing statement of a block (`Database.batch`,
    `POST /batch`), `None` for a single statement. `.row` is the row whose evaluation raised
    it, where the engine knows it: a token's statement answers a withheld message instead when
    that row is one the token may not read (engine/scoped.py), since the message may quote it.
    """

    __slots__ = ("kind", "status", "message", "at", "row")

    def __init__(self, kind: str, message: str, *, at: int | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status if status is not None else STATUS[kind]
        self.message = message
        self.at = at
        self.row: dict | None = None

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


def query_error(message: str) -> FenecError:
    return FenecError("query", message)


def type_error(message: str) -> FenecError:
    return FenecError("type", message)


def not_found(message: str) -> FenecError:
    return FenecError("notfound", message)


def exists(message: str) -> FenecError:
    return FenecError("exists", message)
