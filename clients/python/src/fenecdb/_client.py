"""`Client` and `AsyncClient`: the same calls, blocking or awaited (clients.md §3.2).

Everything a call decides is written once: `_wire` makes the request and reads the answer
(errors, `seq`, `replayed`, a held claim's timeout), and the `Step`s below say what each
endpoint sends and what it hands back. The four classes are thin shells over them: each
public method is one line that runs a `Step`, blocking (`Client`, `Query`) or awaited
(`AsyncClient`, `AsyncQuery`).

The bytes move over `_net.Pool` (blocking sockets, keep-alive, usable from many threads) or
`_anet.AsyncPool` (asyncio); a transport failure is the standard library's `TimeoutError` /
`ConnectionError`. `transport=` replaces the network with a function from a `Request` to an
answer `(status, headers, body)` (tests pass a recorder; for `AsyncClient` it may be async).

Cancellation: cancelling the task awaiting an `AsyncClient` call abandons the request and
closes its connection; the server then gives the job the claim would have taken to the next
waiting worker (http.md §8.10).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from ._anet import AsyncPool
from ._http11 import Answer, Target
from ._net import Pool
from ._query import QueryBase, Returning
from ._wire import Request, Rows, Shared, Wire, check_key

DEFAULT_URL = "http://127.0.0.1:8080"

T = TypeVar("T")
Send = Callable[[Request], Answer]
AsyncSend = Callable[[Request], Awaitable[Answer] | Answer]


def _same(answer: Any) -> Any:
    return answer


def _rows_or_answer(answer: Any) -> Any:
    return Rows(answer) if isinstance(answer, list) else answer


def _affected(answer: Any) -> int:
    return int(answer["affected"]) if isinstance(answer, dict) else len(answer)


def _first(answer: Any) -> dict[str, Any] | None:
    return answer[0] if answer else None


def _count(answer: Any) -> int:
    return int(answer[0]["count"])


def _zero(answer: Any) -> int:
    return 0


Step = tuple[Request | None, Callable[[Any], T]]
"""One call: the request to send (None: nothing to send), and what its answer becomes."""


class _ClientCore:
    """What both clients share: the url, the wire, the keyed copies and the steps of `query` and `batch`."""

    _wire: Wire
    _url: str

    def _setup(self, url: str, token: str | None, timeout: float | None) -> Target:
        self._url = url.rstrip("/")
        self._wire = Wire(token, timeout, None, Shared())
        return Target(self._url)

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

    def with_idempotency_key(self, key: str) -> Self:
        """A copy whose writes carry `Idempotency-Key: key`; it shares connections and `seq`."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._wire = Wire(self._wire.token, self._wire.timeout, check_key(key), self._wire.shared)
        return copy

    def _query(self, text: str, params: Sequence[Any] | None, idempotency_key: str | None,
               wait: float | None) -> Step[Any]:
        return self._wire.query(text, params, wait=wait, idempotency_key=idempotency_key), _rows_or_answer

    def _batch(self, statements: Iterable[Any], idempotency_key: str | None, wait: float | None) -> Step[Any]:
        return self._wire.batch(statements, wait=wait, idempotency_key=idempotency_key), _same


class Client(_ClientCore):
    """A blocking client: `Client(url, token=None, timeout=30.0)`; one may be shared by threads.

    `transport` replaces the network: a function from a `Request` to `(status, headers, body)`."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float | None = 30.0, *,
                 transport: Send | None = None) -> None:
        target = self._setup(url, token, timeout)
        self._pool = Pool(target) if transport is None else None
        self._exchange: Send = transport if transport is not None else self._pool.send  # type: ignore[union-attr]

    def _send(self, request: Request) -> Any:
        status, headers, body = self._exchange(request)
        return self._wire.answer(request, status, headers, body)

    def _run(self, step: Step[T]) -> T:
        request, shape = step
        return shape(None if request is None else self._send(request))

    def collection(self, name: str) -> Query:
        return Query(name, self)

    def query(self, text: str, params: Sequence[Any] | None = None, *, idempotency_key: str | None = None,
              wait: float | None = None) -> Any:
        """One statement as text: its rows, `{"affected": n}` or `{"message": ...}`."""
        return self._run(self._query(text, params, idempotency_key, wait))

    def batch(self, statements: Iterable[Any], *, idempotency_key: str | None = None,
              wait: float | None = None) -> Any:
        """Statements as one all-or-nothing block: the decoded `{"ok": n, "results": [...]}`."""
        return self._run(self._batch(statements, idempotency_key, wait))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AsyncClient(_ClientCore):
    """The same calls, awaited: `async with AsyncClient(url) as db: ...`."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float | None = 30.0, *,
                 transport: AsyncSend | None = None) -> None:
        target = self._setup(url, token, timeout)
        self._pool = AsyncPool(target) if transport is None else None
        self._transport = transport

    async def _send(self, request: Request) -> Any:
        if self._pool is not None:
            status, headers, body = await self._pool.send(request)
        else:
            assert self._transport is not None
            made = self._transport(request)
            status, headers, body = await made if inspect.isawaitable(made) else made
        return self._wire.answer(request, status, headers, body)

    async def _run(self, step: Step[T]) -> T:
        request, shape = step
        return shape(None if request is None else await self._send(request))

    def collection(self, name: str) -> AsyncQuery:
        return AsyncQuery(name, self)

    async def query(self, text: str, params: Sequence[Any] | None = None, *,
                    idempotency_key: str | None = None, wait: float | None = None) -> Any:
        return await self._run(self._query(text, params, idempotency_key, wait))

    async def batch(self, statements: Iterable[Any], *, idempotency_key: str | None = None,
                    wait: float | None = None) -> Any:
        return await self._run(self._batch(statements, idempotency_key, wait))

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class _QueryCore(QueryBase):
    """The steps of a bound query's endpoints, shared by `Query` and `AsyncQuery`."""

    __slots__ = ("_db",)
    _db: _ClientCore

    def _step(self, made: tuple[str, list[Any]], shape: Callable[[Any], T], *, read: bool,
              wait: float | None = None) -> Step[T]:
        return self._db._wire.query(made[0], made[1], wait=wait, read=read), shape

    def _rows(self) -> Step[Rows]:
        return self._step(self._read(), Rows, read=True)

    def _first(self) -> Step[dict[str, Any] | None]:
        return self._step(self._read(first=True), _first, read=True)

    def _count(self) -> Step[int]:
        return self._step(self._read(count=True), _count, read=True)

    def _insert(self, docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], require: int | None) -> Step[int]:
        if not isinstance(docs, Mapping) and len(docs) == 0:
            self.to_insert({"_": 0}, require=require)  # the chain's own refusals still apply
            return None, _zero
        return self._step(self.to_insert(docs, require=require), _affected, read=False)

    def _update(self, patch: Mapping[str, Any], all: bool, require: int | None, returning: Returning,
                wait: float | None) -> Step[Any]:
        shape = Rows if returning not in (None, False) else _affected
        return self._step(self.to_update(patch, all=all, require=require, returning=returning), shape,
                          read=False, wait=wait)

    def _delete(self, all: bool, require: int | None, returning: Returning, wait: float | None) -> Step[Any]:
        shape = Rows if returning not in (None, False) else _affected
        return self._step(self.to_delete(all=all, require=require, returning=returning), shape,
                          read=False, wait=wait)


class Query(_QueryCore):
    """A query bound to a `Client`: the builder steps, plus endpoints that send one statement."""

    __slots__ = ()
    _db: Client

    def __init__(self, collection: str, db: Client) -> None:
        super().__init__(collection)
        self._db = db

    def rows(self) -> Rows:
        return self._db._run(self._rows())

    def first(self) -> dict[str, Any] | None:
        return self._db._run(self._first())

    def count(self) -> int:
        return self._db._run(self._count())

    def insert(self, docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, require: int | None = None) -> int:
        return self._db._run(self._insert(docs, require))

    def update(self, patch: Mapping[str, Any], *, all: bool = False, require: int | None = None,
               returning: Returning = None, wait: float | None = None) -> Any:
        """The count written, or with `returning` the rows as written."""
        return self._db._run(self._update(patch, all, require, returning, wait))

    def delete(self, *, all: bool = False, require: int | None = None, returning: Returning = None,
               wait: float | None = None) -> Any:
        """The count deleted, or with `returning` the rows as they were."""
        return self._db._run(self._delete(all, require, returning, wait))


class AsyncQuery(_QueryCore):
    """A query bound to an `AsyncClient`: the same endpoints, awaited."""

    __slots__ = ()
    _db: AsyncClient

    def __init__(self, collection: str, db: AsyncClient) -> None:
        super().__init__(collection)
        self._db = db

    async def rows(self) -> Rows:
        return await self._db._run(self._rows())

    async def first(self) -> dict[str, Any] | None:
        return await self._db._run(self._first())

    async def count(self) -> int:
        return await self._db._run(self._count())

    async def insert(self, docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                     require: int | None = None) -> int:
        return await self._db._run(self._insert(docs, require))

    async def update(self, patch: Mapping[str, Any], *, all: bool = False, require: int | None = None,
                     returning: Returning = None, wait: float | None = None) -> Any:
        return await self._db._run(self._update(patch, all, require, returning, wait))

    async def delete(self, *, all: bool = False, require: int | None = None, returning: Returning = None,
                     wait: float | None = None) -> Any:
        return await self._db._run(self._delete(all, require, returning, wait))
