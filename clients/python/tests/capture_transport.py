"""A capture transport for unit tests: the mock seam of httpx, so client tests need no server."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import fenecdb
import httpx


class Capture:
    """An httpx mock transport handler: records each request, answers with `reply(request)`."""

    def __init__(self, reply: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.reply = reply or (lambda request: httpx.Response(200, json={"affected": 1}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.reply(request)

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]

    def client(self, **kwargs: Any) -> fenecdb.Client:
        return fenecdb.Client("http://fenec.test", transport=httpx.MockTransport(self), **kwargs)
