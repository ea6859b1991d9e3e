"""Every status and every refusal the HTTP layer answers, declared in one place.

The engine raises `FenecError` with a kind; this module is the only place a kind becomes an
HTTP answer, with the kind's status from the one table (`errors.STATUS`) and an `{"error": ...}`
body (`http.md` §6). Refusals that belong to the wire
itself (a chunked body, a header block over the ceiling, an unknown route, ...) are built
here too, so every error string the server can write is in this file.

    (the kinds' statuses: errors.py)
"""

from __future__ import annotations

import json

from ..errors import FenecError

# The statuses HTTP answers with (http.md §6), by name: no other module of `http/` writes a status
# number (tests/unit/test_statuses.py). An engine refusal's status is its kind's (`errors.STATUS`).
OK = 200
NO_CONTENT = 204
BAD_REQUEST = 400
UNAUTHORIZED = 401
FORBIDDEN = 403
NOT_FOUND = 404
TIMED_OUT = 408
CONFLICT = 409
LENGTH_REQUIRED = 411
TOO_LARGE = 413
TARGET_TOO_LONG = 414
HEAD_TOO_LARGE = 431
FAULT = 500
NOT_IMPLEMENTED = 501
UNAVAILABLE = 503
TIMED_OUT_GATEWAY = 504  # a Fenec-After change that did not arrive in the wait (replication.py)
# An answer is a refusal from this status on (the metrics' errors, the access log).
FIRST_REFUSAL = BAD_REQUEST

BODY_CEILING = 64 * 1024 * 1024
HEAD_CEILING = 64 * 1024
# the request target (path and query string): httptools reads at most this many bytes of it
TARGET_CEILING = HEAD_CEILING - 1

# Messages of the wire-level refusals (the statuses are those of `http.md` §6).
QUERY_REQUIRED = "`query` is required"
QUERY_NOT_TEXT = "`query` must be text"
NOT_AN_OBJECT = "the body must be a JSON object"
NOT_UTF8 = "the body is not UTF-8"
EMPTY_BATCH = "empty batch"
WAIT_NOT_MS = "Fenec-Wait is milliseconds"
IDEM_SIZE = "an Idempotency-Key is 1 to 255 bytes"
CHUNKED = "a chunked body is not accepted: send Content-Length"
BAD_LENGTH = "Content-Length is not a number"
TOO_MANY = "too many connections"
NO_DESCRIPTORS = "the server is out of file descriptors"
NO_TOKEN = "invalid or missing token"
INTERNAL = "internal fault"


def body(message: str, **extra: object) -> bytes:
    doc: dict[str, object] = {"error": message}
    doc.update(extra)
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def answer(error: FenecError, *, batch: bool = False) -> tuple[int, bytes]:
    """(status, body) for an engine refusal; a `/batch` refusal that names a statement adds
    `completed` and `at` (http.md §4)."""
    if batch and error.at is not None:
        return error.status, body(error.message, completed=0, at=error.at)
    return error.status, body(error.message)


def too_large(size: int) -> bytes:
    return body(f"the body is {size} bytes, the ceiling is {BODY_CEILING}")


def statement_too_large(size: int, ceiling: int) -> bytes:
    return body(f"the statement text is {size} bytes, the ceiling is {ceiling} (--max-statement-bytes): "
                "send values as params")


def timed_out(what: str, seconds: float) -> bytes:
    return body(f"the request {what} did not arrive within {seconds:g} s")


def head_too_large() -> bytes:
    return body(f"the header block is over {HEAD_CEILING} bytes")


def target_too_long() -> bytes:
    return body(f"the request target is over {TARGET_CEILING} bytes")


def no_route(method: str, path: str) -> bytes:
    return body(f"no route: {method} {path}")


def not_implemented(method: str) -> bytes:
    return body(f"method {method} is not supported")


def malformed(why: str) -> bytes:
    return body(f"malformed request: {why}")


def bad_json(why: str) -> bytes:
    return body(f"the body is not JSON: {why}")


def batch_line(k: int, why: str, at: int) -> bytes:
    return body(f"batch line {k}: {why}", completed=0, at=at)
