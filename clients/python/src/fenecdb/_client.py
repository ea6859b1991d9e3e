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

Servers: `url` is one base URL or a list of them (a primary and its replicas); `_servers.Route`
decides, answer by answer, where each call goes (a replica's 403 naming its primary, a server that
cannot be reached, replica reads with `read_from="replica"`). Each URL has its own pool.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, Self, TypeVar

from ._anet import AsyncPool
from ._http11 import Answer, Target
from ._net import Pool, Watch
from ._query import QueryBase, Returning
from ._servers import Route, Servers
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
    _servers: Servers
    _closed = False  # once closed, no pool is opened for a server named later

    def _setup(self, url: str | Sequence[str], token: str | None, timeout: float | None,
               read_from: str) -> Target:
        self._servers = Servers(url, read_from)
        self._wire = Wire(token, timeout, None, Shared())
        targets = [Target(u) for u in self._servers.urls]  # a bad URL anywhere in the list is refused now
        return targets[0]

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
        """The server this client sends writes and claims to now: its current primary."""
        return self._servers.primary

    @property
    def servers(self) -> list[str]:
        """Every server this client knows, in its order: those it was given, then any a replica named."""
        return list(self._servers.urls)

    def with_idempotency_key(self, key: str) -> Self:
        """A copy whose writes carry `Idempotency-Key: key`; it shares connections and `seq`."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._wire = Wire(self._wire.token, self._wire.timeout, check_key(key), self._wire.shared)
        return copy

    def _query(self, text: str, params: Sequence[Any] | None, idempotency_key: str | None,
               wait: float | None, read: bool = False) -> Step[Any]:
        made = self._wire.query(text, params, wait=wait, idempotency_key=idempotency_key, read=True if read else None)
        return made, _rows_or_answer

    def _batch(self, statements: Iterable[Any], idempotency_key: str | None, wait: float | None) -> Step[Any]:
        return self._wire.batch(statements, wait=wait, idempotency_key=idempotency_key), _same


class Client(_ClientCore):
    """A blocking client: `Client(url, token=None, timeout=30.0, *, read_from="primary")`; one may be
    shared by threads. `url` is a server's URL or a list of them (docs/clients.md, "Replicas and
    failover"); `read_from="replica"` sends the builder's reads to a replica of the list.

    `transport` replaces the network: a function from a `Request` (its `server` the URL it goes to)
    to `(status, headers, body)`."""

    def __init__(self, url: str | Sequence[str] = DEFAULT_URL, token: str | None = None,
                 timeout: float | None = 30.0, *, read_from: str = "primary", transport: Send | None = None) -> None:
        target = self._setup(url, token, timeout, read_from)
        self._pool = Pool(target) if transport is None else None
        self._pools: dict[str, Pool] = {} if self._pool is None else {self._servers.urls[0]: self._pool}
        self._transport = transport

    def _exchange(self, url: str, request: Request, watch: Watch | None) -> Answer:
        if self._transport is not None:
            return self._transport(replace(request, server=url))
        pool = self._pools.get(url)
        if pool is None:
            if self._closed:
                raise RuntimeError("the client is closed")
            pool = self._pools.setdefault(url, Pool(Target(url)))
        return pool.send(request, watch)

    def _send(self, request: Request, watch: Watch | None = None) -> Any:
        route = Route(self._servers, request, self._wire.shared.seq)
        while True:
            url, sent = route.target()
            try:
                status, headers, body = self._exchange(url, sent, watch)
            except OSError as exc:
                if route.unreachable(exc):
                    continue
                raise
            if status in (403, 503, 504) and route.refused(status, headers):
                continue
            return self._wire.answer(sent, status, headers, body)

    def _run(self, step: Step[T]) -> T:
        request, shape = step
        return shape(None if request is None else self._send(request))

    def collection(self, name: str) -> Query:
        return Query(name, self)

    def query(self, text: str, params: Sequence[Any] | None = None, *, idempotency_key: str | None = None,
              wait: float | None = None, read: bool = False) -> Any:
        """One statement as text: its rows, `{"affected": n}` or `{"message": ...}`. `read=True` says
        it is a read, which `read_from="replica"` may send to a replica."""
        return self._run(self._query(text, params, idempotency_key, wait, read))

    def batch(self, statements: Iterable[Any], *, idempotency_key: str | None = None,
              wait: float | None = None) -> Any:
        """Statements as one all-or-nothing block: the decoded `{"ok": n, "results": [...]}`."""
        return self._run(self._batch(statements, idempotency_key, wait))

    def close(self) -> None:
        self._closed = True
        for pool in list(self._pools.values()):
            pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AsyncClient(_ClientCore):
    """The same calls, awaited: `async with AsyncClient(url) as db: ...`."""

    def __init__(self, url: str | Sequence[str] = DEFAULT_URL, token: str | None = None,
                 timeout: float | None = 30.0, *, read_from: str = "primary",
                 transport: AsyncSend | None = None) -> None:
        target = self._setup(url, token, timeout, read_from)
        self._pool = AsyncPool(target) if transport is None else None
        self._pools: dict[str, AsyncPool] = {} if self._pool is None else {self._servers.urls[0]: self._pool}
        self._transport = transport

    async def _exchange(self, url: str, request: Request) -> Answer:
        if self._transport is not None:
            made = self._transport(replace(request, server=url))
            return await made if inspect.isawaitable(made) else made
        pool = self._pools.get(url)
        if pool is None:
            if self._closed:
                raise RuntimeError("the client is closed")
            pool = self._pools.setdefault(url, AsyncPool(Target(url)))
        return await pool.send(request)

    async def _send(self, request: Request) -> Any:
        route = Route(self._servers, request, self._wire.shared.seq)
        while True:
            url, sent = route.target()
            try:
                status, headers, body = await self._exchange(url, sent)
            except OSError as exc:
                if route.unreachable(exc):
                    continue
                raise
            if status in (403, 503, 504) and route.refused(status, headers):
                continue
            return self._wire.answer(sent, status, headers, body)

    async def _run(self, step: Step[T]) -> T:
        request, shape = step
        return shape(None if request is None else await self._send(request))

    def collection(self, name: str) -> AsyncQuery:
        return AsyncQuery(name, self)

    async def query(self, text: str, params: Sequence[Any] | None = None, *,
                    idempotency_key: str | None = None, wait: float | None = None, read: bool = False) -> Any:
        return await self._run(self._query(text, params, idempotency_key, wait, read))

    async def batch(self, statements: Iterable[Any], *, idempotency_key: str | None = None,
                    wait: float | None = None) -> Any:
        return await self._run(self._batch(statements, idempotency_key, wait))

    async def aclose(self) -> None:
        self._closed = True
        for pool in list(self._pools.values()):
            await pool.aclose()

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
