"""A capture transport for unit tests: the client's `transport=` seam, so client tests need no server.

Each request is recorded as the bytes the real transport would write (`fenecdb._http11`), read
back into method, path, headers and body, with the timeout it was sent with. A reply is an
`answer(status, json=..., headers=...)`, or an exception the transport would raise
(`ConnectionError`, `TimeoutError`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import fenecdb
from fenecdb._http11 import Answer, Target
from fenecdb._wire import Request

TARGET = Target("http://fenec.test")


class Headers(dict[str, str]):
    """Header names in any case."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


class Sent:
    """A request as it went over the wire."""

    def __init__(self, request: Request) -> None:
        wire = TARGET.encode(request)
        head, _, self.content = wire.partition(b"\r\n\r\n")
        line, *fields = head.decode("latin-1").split("\r\n")
        self.method, self.path, self.version = line.split(" ")
        self.headers = Headers()
        for field in fields:
            name, _, value = field.partition(":")
            assert name.lower() not in self.headers, f"{name} sent twice"
            self.headers[name.lower()] = value.strip()
        self.timeout = request.timeout
        self.server = request.server  # the base URL of a client given a list (docs/clients.md)


def answer(status: int, json: Any = None, headers: Mapping[str, str] | None = None) -> Answer:
    body = b"" if json is None else _dumps(json)
    return status, {k.lower(): v for k, v in (headers or {}).items()}, body


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


Reply = Callable[[Sent], Answer | Awaitable[Answer]]


class Capture:
    """A transport: records each request, answers with `reply(sent)`."""

    def __init__(self, reply: Reply | None = None) -> None:
        self.requests: list[Sent] = []
        self.reply: Reply = reply or (lambda sent: answer(200, json={"affected": 1}))

    def __call__(self, request: Request) -> Any:
        sent = Sent(request)
        self.requests.append(sent)
        return self.reply(sent)

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]

    def client(self, **kwargs: Any) -> fenecdb.Client:
        return fenecdb.Client("http://fenec.test", transport=self, **kwargs)

    def async_client(self, **kwargs: Any) -> fenecdb.AsyncClient:
        return fenecdb.AsyncClient("http://fenec.test", transport=self, **kwargs)
