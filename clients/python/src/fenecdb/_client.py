"""`Client` and `AsyncClient`: the same calls, blocking or awaited (clients.md §3.2).

Everything that decides what is sent and what an answer means is written once, in `_wire`
(requests, answers, errors) and `_query` (the text). This module only moves bytes, through
httpx: `Client` with `httpx.Client`, `AsyncClient` with `httpx.AsyncClient`. A transport
failure becomes the standard library's `TimeoutError` / `OSError` here, the one place a
request is sent.

Cancellation: cancelling the task awaiting an `AsyncClient` call abandons the request and
closes its connection; the server then gives the job the claim would have taken to the next
waiting worker (http.md §8.10).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import httpx

from ._query import QueryBase, Returning
from ._wire import Request, Rows, Shared, Wire, check_key

DEFAULT_URL = "http://127.0.0.1:8080"


def send_failed(exc: httpx.TransportError) -> OSError:
    if isinstance(exc, httpx.TimeoutException):
        return TimeoutError(f"the request timed out: {exc}")
    return ConnectionError(f"the request could not be sent: {exc}")


class _Base:
    _wire: Wire

    @property
    def seq(self) -> int:
        """The highest `Fenec-Seq` this client (and its copies) has seen."""
        return self._wire.shared.seq

    @property
    def replayed(self) -> bool:
        """Whether the last write's answer was the one kept for its idempotency key."""
        return self._wire.shared.replayed

    @property
    def url(self) -> str:
        return self._url

    _url: str


class Client(_Base):
    """A blocking client: `Client(url, token=None, timeout=30.0)`.

    `transport` replaces httpx's network transport (tests pass `httpx.MockTransport`)."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float | None = 30.0, *,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._url = url.rstrip("/")
        self._wire = Wire(token, timeout, None, Shared())
        self._http = httpx.Client(base_url=self._url, transport=transport, timeout=timeout)

    def with_idempotency_key(self, key: str) -> Self:
        """A copy whose writes carry `Idempotency-Key: key`; it shares connections and `seq`."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._wire = Wire(self._wire.token, self._wire.timeout, check_key(key), self._wire.shared)
        return copy

    def collection(self, name: str) -> Query:
        return Query(name, self)

    def _send(self, request: Request) -> Any:
        try:
            response = self._http.post(request.path, content=request.body, headers=request.headers,
                                       timeout=request.timeout)
        except httpx.TransportError as exc:
            raise send_failed(exc) from exc
        return self._wire.answer(request, response.status_code, response.headers, response.content)

    def query(self, text: str, params: Sequence[Any] | None = None, *, idempotency_key: str | None = None,
              wait: float | None = None) -> Any:
        """One statement as text: its rows, `{"affected": n}` or `{"message": ...}`."""
        answer = self._send(self._wire.query(text, params, wait=wait, idempotency_key=idempotency_key))
        return Rows(answer) if isinstance(answer, list) else answer

    def batch(self, statements: Iterable[Any], *, idempotency_key: str | None = None,
              wait: float | None = None) -> Any:
        """Statements as one all-or-nothing block: the decoded `{"ok": n, "results": [...]}`."""
        return self._send(self._wire.batch(statements, wait=wait, idempotency_key=idempotency_key))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AsyncClient(_Base):
    """The same calls, awaited: `async with AsyncClient(url) as db: ...`."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float | None = 30.0, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._url = url.rstrip("/")
        self._wire = Wire(token, timeout, None, Shared())
        self._http = httpx.AsyncClient(base_url=self._url, transport=transport, timeout=timeout)

    def with_idempotency_key(self, key: str) -> Self:
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._wire = Wire(self._wire.token, self._wire.timeout, check_key(key), self._wire.shared)
        return copy

    def collection(self, name: str) -> AsyncQuery:
        return AsyncQuery(name, self)

    async def _send(self, request: Request) -> Any:
        try:
            response = await self._http.post(request.path, content=request.body, headers=request.headers,
                                             timeout=request.timeout)
        except httpx.TransportError as exc:
            raise send_failed(exc) from exc
        return self._wire.answer(request, response.status_code, response.headers, response.content)

    async def query(self, text: str, params: Sequence[Any] | None = None, *,
                    idempotency_key: str | None = None, wait: float | None = None) -> Any:
        answer = await self._send(self._wire.query(text, params, wait=wait, idempotency_key=idempotency_key))
        return Rows(answer) if isinstance(answer, list) else answer

    async def batch(self, statements: Iterable[Any], *, idempotency_key: str | None = None,
                    wait: float | None = None) -> Any:
        return await self._send(self._wire.batch(statements, wait=wait, idempotency_key=idempotency_key))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


def _affected(answer: Any) -> int:
    return int(answer["affected"]) if isinstance(answer, dict) else len(answer)


class Query(QueryBase):
    """A query bound to a `Client`: the builder steps, plus endpoints that send one statement."""

    __slots__ = ("_db",)

    def __init__(self, collection: str, db: Client) -> None:
        super().__init__(collection)
        self._db = db

    def _run(self, text: str, params: list[Any], *, read: bool, wait: float | None = None) -> Any:
        return self._db._send(self._db._wire.query(text, params, wait=wait, read=read))

    def rows(self) -> Rows:
        return Rows(self._run(*self._read(), read=True))

    def first(self) -> dict[str, Any] | None:
        rows = self._run(*self._read(first=True), read=True)
        return rows[0] if rows else None

    def count(self) -> int:
        return int(self._run(*self._read(count=True), read=True)[0]["count"])

    def insert(self, docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, require: int | None = None) -> int:
        if not isinstance(docs, Mapping) and len(docs) == 0:
            self.to_insert({"_": 0}, require=require)  # the chain's own refusals still apply
            return 0
        return _affected(self._run(*self.to_insert(docs, require=require), read=False))

    def update(self, patch: Mapping[str, Any], *, all: bool = False, require: int | None = None,
               returning: Returning = None, wait: float | None = None) -> Any:
        """The count written, or with `returning` the rows as written."""
        answer = self._run(*self.to_update(patch, all=all, require=require, returning=returning),
                           read=False, wait=wait)
        return Rows(answer) if returning not in (None, False) else _affected(answer)

    def delete(self, *, all: bool = False, require: int | None = None, returning: Returning = None,
               wait: float | None = None) -> Any:
        """The count deleted, or with `returning` the rows as they were."""
        answer = self._run(*self.to_delete(all=all, require=require, returning=returning),
                           read=False, wait=wait)
        return Rows(answer) if returning not in (None, False) else _affected(answer)


class AsyncQuery(QueryBase):
    """A query bound to an `AsyncClient`: the same endpoints, awaited."""

    __slots__ = ("_db",)

    def __init__(self, collection: str, db: AsyncClient) -> None:
        super().__init__(collection)
        self._db = db

    async def _run(self, text: str, params: list[Any], *, read: bool, wait: float | None = None) -> Any:
        return await self._db._send(self._db._wire.query(text, params, wait=wait, read=read))

    async def rows(self) -> Rows:
        return Rows(await self._run(*self._read(), read=True))

    async def first(self) -> dict[str, Any] | None:
        rows = await self._run(*self._read(first=True), read=True)
        return rows[0] if rows else None

    async def count(self) -> int:
        return int((await self._run(*self._read(count=True), read=True))[0]["count"])

    async def insert(self, docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                     require: int | None = None) -> int:
        if not isinstance(docs, Mapping) and len(docs) == 0:
            self.to_insert({"_": 0}, require=require)
            return 0
        return _affected(await self._run(*self.to_insert(docs, require=require), read=False))

    async def update(self, patch: Mapping[str, Any], *, all: bool = False, require: int | None = None,
                     returning: Returning = None, wait: float | None = None) -> Any:
        answer = await self._run(*self.to_update(patch, all=all, require=require, returning=returning),
                                 read=False, wait=wait)
        return Rows(answer) if returning not in (None, False) else _affected(answer)

    async def delete(self, *, all: bool = False, require: int | None = None, returning: Returning = None,
                     wait: float | None = None) -> Any:
        answer = await self._run(*self.to_delete(all=all, require=require, returning=returning),
                                 read=False, wait=wait)
        return Rows(answer) if returning not in (None, False) else _affected(answer)
