"""One request of the ASGI door (asgi.py) on a connection of ours: its scope, the body the parser
read for it (`receive`), and the answer its `send` gives, rendered by wire.py.

`receive` gives the body as it arrives, then `http.disconnect` once the answer is written or the
client is gone; `send` writes the head when `http.response.start` comes and each body piece as it
comes, waiting first while the transport is paused (a reader that does not read stops the
rendering: `Connection.drain`). An answer with a `content-length` is written as it is; one with
none (a stream: the replication stream, a backup, a long answer) is chunked. When the body's last
piece is written the connection is told (`Door.done`), which starts the next request.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import MutableMapping
from typing import Any, Protocol

from . import errors as E
from .wire import CONTINUE, LAST_CHUNK, chunk, render_close, render_head

log = logging.getLogger("fenec.http")

NO_BODY = frozenset({E.NO_CONTENT, http.HTTPStatus.NOT_MODIFIED})  # statuses that never carry a body (RFC 9110 §6.4.1)


class Door(Protocol):
    """What a cycle needs of its connection (protocol.FenecProtocol)."""

    transport: Any
    write_paused: bool

    async def drain(self) -> None: ...

    def resume_reading(self) -> None: ...

    def dated_lines(self) -> bytes: ...

    def done(self, cycle: AsgiCycle, keep: bool) -> None: ...


class AsgiCycle:
    """A request's ASGI `receive` and `send`, and the state of its answer."""

    def __init__(self, door: Door, scope: dict[str, Any], keep: bool, expect: bool) -> None:
        self.door = door
        self.scope = scope
        self.keep = keep
        self.waiting_continue = expect  # `Expect: 100-continue`: the 100 is written at the first receive
        self.body = bytearray()
        self.more_body = True
        self.event = asyncio.Event()  # set when body comes, the request ends, or the answer or client goes
        self.disconnected = False
        self.started = False
        self.complete = False
        self.chunked = False
        self.left = 0  # bytes of the body its content-length still owes
        self.head_only = scope["method"] == "HEAD"
        scope["fenec.send_now"] = self.send_now

    def add(self, piece: bytes) -> None:
        self.body += piece
        self.event.set()

    def end(self) -> None:
        self.more_body = False
        self.event.set()

    def lost(self) -> None:
        if not self.complete:
            self.disconnected = True
        self.event.set()

    async def run(self, app: Any) -> None:
        """The app on this request; a fault it lets out is a JSON 500 if nothing was written yet."""
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            log.error("internal fault answering %s %s", self.scope.get("method"), self.scope.get("path"),
                      exc_info=exc)
            self.fault()
        else:
            if not self.complete and not self.disconnected:
                log.error("no whole answer to %s %s", self.scope.get("method"), self.scope.get("path"))
                self.fault()

    def fault(self) -> None:
        if self.disconnected:  # the connection is lost, or refused and closing: nothing more is written
            return
        transport = self.door.transport
        if not self.started and not transport.is_closing():
            transport.write(render_close(E.FAULT, E.body(E.INTERNAL)))
        transport.close()

    async def receive(self) -> dict[str, Any]:
        door = self.door
        if self.waiting_continue:
            self.waiting_continue = False
            if not self.disconnected and not door.transport.is_closing():
                door.transport.write(CONTINUE)
        if not self.disconnected and not self.complete:
            door.resume_reading()
            await self.event.wait()
            self.event.clear()
        if self.disconnected or self.complete:
            return {"type": "http.disconnect"}
        message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        return message

    def send_now(self, body: bytes) -> bool:
        """A piece of a chunked body (more to come) written at once, outside the app's task (the
        replication stream's records, sent as the log's sync covers them); False where it must
        wait for `send` instead: the answer not started or not chunked, over, or its reader slow."""
        if not self.chunked or self.complete or self.disconnected or self.door.write_paused or not body:
            return False
        self.door.transport.write(chunk(body))
        return True

    async def send(self, message: MutableMapping[str, Any]) -> None:
        door = self.door
        if door.write_paused and not self.disconnected:
            await door.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {kind}")
            self.start(message["status"], message.get("headers", ()))
            return
        if self.complete or kind != "http.response.body":
            raise RuntimeError(f"unexpected {kind} after the answer")
        body = message.get("body", b"")
        more = message.get("more_body", False)
        transport = door.transport
        if self.head_only:
            pass
        elif self.chunked:
            if body:
                transport.write(chunk(body) + LAST_CHUNK if not more else chunk(body))
            elif not more:
                transport.write(LAST_CHUNK)
        else:
            if len(body) > self.left:
                raise RuntimeError("the body is longer than its content-length")
            self.left -= len(body)
            transport.write(body)
        if not more:
            if self.left and not self.head_only:
                raise RuntimeError("the body is shorter than its content-length")
            self.complete = True
            self.event.set()
            if not self.keep:
                transport.close()
            door.done(self, self.keep)

    def start(self, status: int, given: Any) -> None:
        self.started = True
        self.waiting_continue = False
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        has_close = False
        for name, value in given:
            name = name.lower()
            if b"\n" in value or b"\r" in value:
                raise RuntimeError("a header value holds a line break")
            if name == b"content-length" and length is None:
                length = int(value)
            elif name == b"connection" and b"close" in [t.strip().lower() for t in value.split(b",")]:
                self.keep = False
                has_close = True
            headers.append((name, value))
        self.left = length or 0
        self.chunked = length is None and not self.head_only and status not in NO_BODY
        self.door.transport.write(render_head(status, self.door.dated_lines(), headers,
                                              not self.keep and not has_close, self.chunked))
