"""The one exception tree of the client, and the status each branch stands for.

    Exception
     └─ FenecError(message, status, *, at=None, completed=None)   .status .code .message .at .completed
         ├─ BuilderError          status 0    a chain the builder refuses (clients.md §5); nothing was sent
         ├─ BadRequestError       400         the statement does not parse, a bad parameter, a claim that cannot be held
         ├─ UnauthorizedError     401         no token, or a wrong one
         ├─ ForbiddenError        403         outside the token's rules; a write on a read-only server
         ├─ NotFoundError         404         collection or field not there
         ├─ DuplicateError        409         id or @unique value taken
         ├─ UnmetError            412         a `require n` not met; its write (or its whole batch) put back
         ├─ KeyReusedError        422         an Idempotency-Key reused with another request
         └─ UnavailableError      503 504 507 unavailable / timed out / storage full

Any other status is a plain `FenecError` whose code is `http_<status>`. A network failure or
a timeout is not a `FenecError`: it surfaces as the standard library's `OSError` /
`TimeoutError` (the transports, `_net` and `_anet`, raise only those when a request fails
on the way). Code branches on `status` (or the class); the message is for people.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "FenecError",
    "BuilderError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "DuplicateError",
    "UnmetError",
    "KeyReusedError",
    "UnavailableError",
    "error_for",
]


class FenecError(Exception):
    """A refusal, by the builder (`status == 0`) or by the server (the HTTP status)."""

    code = "error"

    def __init__(self, message: str, status: int = 0, *, at: int | None = None,
                 completed: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.at = at
        self.completed = completed

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        extra = "" if self.at is None else f", at={self.at}, completed={self.completed}"
        return f"{type(self).__name__}({self.message!r}, {self.status}{extra})"


class BuilderError(FenecError):
    """The builder refused the chain before sending; `str(e)` is the exact text of clients.md §5."""

    code = "builder"

    def __init__(self, message: str) -> None:
        super().__init__(message, 0)


class BadRequestError(FenecError):
    code = "bad_request"


class UnauthorizedError(FenecError):
    code = "unauthorized"


class ForbiddenError(FenecError):
    code = "forbidden"


class NotFoundError(FenecError):
    code = "not_found"


class DuplicateError(FenecError):
    code = "conflict"


class UnmetError(FenecError):
    code = "unmet"


class KeyReusedError(FenecError):
    code = "key_reused"


class UnavailableError(FenecError):
    code = "unavailable"


_BY_STATUS: dict[int, type[FenecError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: DuplicateError,
    412: UnmetError,
    422: KeyReusedError,
    503: UnavailableError,
    504: UnavailableError,
    507: UnavailableError,
}

_UNAVAILABLE_CODES = {503: "unavailable", 504: "timeout", 507: "storage_full"}


def error_for(status: int, body: bytes) -> FenecError:
    """The exception for a refusal answered with `status` and `body` (`{"error", "at"?, "completed"?}`)."""
    message = ""
    at: int | None = None
    completed: int | None = None
    try:
        decoded: Any = json.loads(body) if body else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
        message = decoded["error"]
        at = decoded["at"] if isinstance(decoded.get("at"), int) else None
        completed = decoded["completed"] if isinstance(decoded.get("completed"), int) else None
    else:
        message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    cls = _BY_STATUS.get(status, FenecError)
    err = cls(message, status, at=at, completed=completed)
    if cls is FenecError:
        err.code = f"http_{status}"
    elif cls is UnavailableError:
        err.code = _UNAVAILABLE_CODES[status]
    return err
