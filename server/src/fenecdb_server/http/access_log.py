"""`--access-log PATH|-`: one line per request, written when its answer is sent.

    2026-12-03T15:40:00.123Z 127.0.0.1 POST /query 200 1.234ms 45B

UTC time the request arrived, the peer's address, the method, the path, the status (`-` when
the client went away before any answer, as a held claim's may), the time from arrival to the
last byte in ms, and the body bytes sent. Never the query string, a header or a body: parameter
values, tokens and payloads stay out. The path is cut at 200 characters, and any byte outside
printable ASCII, a space or a `%` in it is %-escaped, so a line is always one line.

It wraps the whole ASGI app (health checks and refusals included) and costs nothing when off:
`cli.serve` wraps the app only when the flag is given. The file is opened for appending, one
`write` per line (so a `logrotate` with copytruncate, or a rename then restart, works).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import IO, Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
MAX_PATH = 200


def clean_path(path: str) -> str:
    out = []
    for ch in path[:MAX_PATH]:
        o = ord(ch)
        if 0x21 <= o <= 0x7E and ch != "%":
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogateescape"))
    if len(path) > MAX_PATH:
        out.append("...")
    return "".join(out)


def open_log(target: str) -> IO[str]:
    if target == "-":
        return sys.stdout
    return open(target, "a", encoding="utf-8", buffering=1)


class AccessLog:
    def __init__(self, app: Any, out: IO[str]) -> None:
        self.app = app
        self.out = out

    def __getattr__(self, name: str) -> Any:  # the wrapped App's own attributes (shutdown, ...)
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = time.time()
        started = time.perf_counter()
        status: list[int] = []
        sent = [0]

        async def counting(message: MutableMapping[str, Any]) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                status.append(message["status"])
            elif kind == "http.response.body":
                sent[0] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            self.write(scope, arrived, status[0] if status else None, time.perf_counter() - started, sent[0])

    def write(self, scope: Scope, arrived: float, status: int | None, seconds: float, nbytes: int) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(arrived)) + f".{int(arrived * 1000) % 1000:03d}Z"
        client = scope.get("client")
        peer = client[0] if client else "-"
        line = (f"{stamp} {peer} {clean_path(scope.get('method', '-'))} {clean_path(scope.get('path', ''))} "
                f"{status if status is not None else '-'} {seconds * 1000:.3f}ms {nbytes}B\n")
        try:
            self.out.write(line)
            self.out.flush()
        except Exception:  # a broken log is never fatal (server.md §8)
            pass
