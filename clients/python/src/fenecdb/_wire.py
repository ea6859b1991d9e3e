"""What goes over the wire, written once for both clients (clients.md §1, §3.2, §3.8).

`Wire` turns a call into a `Request` (path, headers, body, timeout) and an answer's status,
headers and body into the decoded value or a `FenecError`. `Client` and `AsyncClient` only
move the bytes: over `_net` (blocking sockets) or `_anet` (asyncio), both speaking `_http11`.

* The body is always sent whole, with its Content-Length (the server refuses chunked bodies).
* `Fenec-Wait` is sent in milliseconds, `round(wait * 1000)`; the request's timeout is then
  the client's timeout plus the wait, so a held claim is never cut short by our own timeout.
* `Fenec-Seq` answers raise the shared `seq`; `Idempotent-Replayed: true` sets `replayed`.
* Wait and the idempotency key are headers only: they never change the text or parameters.
* JSON is written and read with orjson; the standard library's `json` takes over only where
  orjson refuses a value `json` accepts (an integer past 64 bits), so what is sent is the same.
  A float that is not finite is refused (`ValueError`), as `json.dumps(allow_nan=False)` did.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._errors import BuilderError, error_for
from ._values import encode, show

Statement = tuple[str, Sequence[Any] | None]


class Rows(list[dict[str, Any]]):
    """The rows a read (or a write with `returning`) answered: a list of dicts."""


@dataclass
class Shared:
    """State the copies of one client share (`with_idempotency_key`)."""

    seq: int = 0
    replayed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(slots=True)
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    timeout: float | None
    write: bool
    read: bool = False  # the call says it reads: with read_from="replica" it may go to a replica
    server: str = ""  # the base URL it goes to (set for a `transport=`, which has no pool per server)


def wait_ms(wait: object) -> int | None:
    """`wait=` seconds, an int or a float of at least 0, as the header's milliseconds."""
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not math.isfinite(wait) or wait < 0:
        raise BuilderError(f"wait is seconds, a number from 0 (got {show(wait)})")
    return round(wait * 1000)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError("an idempotency key is a text, not empty")
    check_header("an idempotency key", key)
    return key


def check_header(what: str, value: str) -> None:
    """A header value is one line: a CR, LF or NUL in it would end the header early."""
    if "\r" in value or "\n" in value or "\0" in value:
        raise ValueError(f"{what} cannot hold a line break or a NUL")


def _json_dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _not_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_not_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_not_finite(v) for v in value)
    return False


def _dump(value: Any) -> bytes:
    try:
        out = orjson.dumps(value)
    except orjson.JSONEncodeError:  # an int past 64 bits (json writes it), or what json refuses too
        return _json_dump(value)
    if b"null" in out and _not_finite(value):  # orjson writes NaN and infinities as null
        return _json_dump(value)  # raises json's ValueError
    return out


def _load(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:  # what only json reads (an int past 64 bits), or raises its error
        return json.loads(body)


_READ = re.compile(r"\s*get(?:[ \n\t]|\Z)", re.IGNORECASE)


def _is_read(text: str) -> bool:
    """Whether a statement's text is a read: its first word is `get`."""
    return _READ.match(text) is not None


def statements_of(items: Iterable[Any]) -> list[tuple[str, list[Any]]]:
    """A batch's statements: `(text, params)` tuples (the builder's `to_*` fit), or bare texts."""
    out: list[tuple[str, list[Any]]] = []
    for item in items:
        if isinstance(item, str):
            out.append((item, []))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            out.append((item[0], [] if item[1] is None else encode(list(item[1]))))
        else:
            raise BuilderError(f"a batch statement is a text or a (text, params) pair: {show(item)}")
    return out


class Wire:
    """Request building and answer decoding shared by `Client` and `AsyncClient`."""

    def __init__(self, token: str | None, timeout: float | None, key: str | None, shared: Shared) -> None:
        if token:
            check_header("a token", token)
        self.token = token
        self.timeout = timeout
        self.key = key
        self.shared = shared
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._json = {"Content-Type": "application/json", "Accept": "application/json", **auth}
        self._ndjson = {"Content-Type": "application/x-ndjson", "Accept": "application/json", **auth}

    @staticmethod
    def _headers(base: dict[str, str], wait: int | None, key: str | None) -> dict[str, str]:
        headers = base.copy()
        if key is not None:
            headers["Idempotency-Key"] = key
        if wait is not None:
            headers["Fenec-Wait"] = str(wait)
        return headers

    def _timeout(self, wait: int | None) -> float | None:
        if self.timeout is None:
            return None
        return self.timeout + (wait or 0) / 1000

    def query(self, text: str, params: Sequence[Any] | None, *, wait: object = None,
              idempotency_key: str | None = None, read: bool | None = None) -> Request:
        if not isinstance(text, str):
            raise BuilderError(f"a statement is a text: {show(text)}")
        ms = None if wait is None else wait_ms(wait)
        is_read = _is_read(text) if read is None else read
        key = check_key(idempotency_key) if idempotency_key is not None else (None if is_read else self.key)
        body = _dump({"query": text, "params": encode(list(params)) if params is not None else []})
        told = read is True
        if key is None and ms is None:  # the common headers, shared: a request's headers are never changed
            return Request("/query", self._json, body, self.timeout, not is_read, told)
        return Request("/query", self._headers(self._json, ms, key), body, self._timeout(ms), not is_read, told)

    def batch(self, statements: Iterable[Any], *, wait: object = None,
              idempotency_key: str | None = None) -> Request:
        items = statements_of(statements)
        ms = wait_ms(wait)
        key = check_key(idempotency_key) if idempotency_key is not None else self.key
        body = b"".join(_dump({"query": t, "params": p}) + b"\n" for t, p in items)
        write = not all(_is_read(t) for t, _ in items)
        return Request("/batch", self._headers(self._ndjson, ms, key), body, self._timeout(ms), write)

    def answer(self, request: Request, status: int, headers: Mapping[str, str], body: bytes) -> Any:
        """The decoded answer, or the refusal raised as the exception of its status."""
        seq = headers.get("fenec-seq")
        with self.shared.lock:
            if seq is not None and seq.strip().isdecimal():
                self.shared.seq = max(self.shared.seq, int(seq))
            if request.write and status < 400:
                self.shared.replayed = headers.get("idempotent-replayed", "").lower() == "true"
        if status >= 400:
            raise error_for(status, body)
        return _load(body) if body else None
