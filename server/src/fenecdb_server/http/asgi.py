"""The ASGI door: every request the transport does not answer itself, routed by the one table
(routing.py). `/query` and `/batch` go to the same service as on the direct path
(`App.serve_now`); what must wait first (a large body decoded, a long text parsed, a run the loop
put back) runs here in a worker thread, and the rest of the routes are the FastAPI app of
routes.py behind the table.

Order of checks for every request (each refuses before the next is looked at):
`/_health` (no token, no lock, before routing) → header block over 64 KiB (431) → method
(501) → `OPTIONS` preflight (204) → chunked body (411) → body over 64 MiB (413, before reading
it) → token (401, after the auth delay; auth.py) → route (404) → the body itself (400) →
statement text over `--max-statement-bytes` (413) → the engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import gc_policy
from ..errors import FenecError
from . import errors as E
from . import routing
from .auth import OPEN, AuthRefused
from .bodies import dumps
from .exchange import Answer, Held, Pending, Request, request_of
from .intake import Refusal, Work
from .limits import BODY_CEILING, METHODS, OFF_LOOP_BODY, parse_length

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("fenec.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

JSON_TYPE = (b"content-type", b"application/json; charset=utf-8")
HEALTH_BODY = b'{"ok":true}'
CLOSE = ((b"connection", b"close"),)
PREFLIGHT = [
    (b"access-control-allow-methods", b"GET, POST, PATCH, DELETE, OPTIONS"),
    (b"access-control-allow-headers", b"content-type, authorization, idempotency-key, fenec-after, fenec-wait"),
    (b"access-control-max-age", b"600"),
]


class AsgiDoor:
    """The ASGI callable the server runs (`App.__call__` hands every call here)."""

    def __init__(self, app: App) -> None:
        self.app = app
        from .routes import build_routes

        self.cold = build_routes(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            try:
                await self.http(scope, receive, send)
            except Exception:
                # Every answer is JSON (http.md §6): a fault no route caught is a JSON 500 here,
                # not the ASGI server's plain text. (Once the answer has started, the send fails
                # and the server closes the connection, as it would.)
                log.exception("internal fault answering %s %s", scope.get("method"), scope.get("path"))
                try:
                    await self.respond(send, E.FAULT, E.body(E.INTERNAL), CLOSE)
                except Exception:
                    pass
        elif kind == "lifespan":
            await self.lifespan(receive, send)

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.app.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.app.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        method = scope["method"]
        how = routing.route(method, path)
        if how == routing.HEALTH:
            await self.respond(send, E.OK, HEALTH_BODY, ())
            return
        if scope.get("fenec.too_many"):  # a connection in the reserve past the ceiling (protocol.py)
            await self.respond(send, E.UNAVAILABLE, E.body(E.TOO_MANY), ((b"retry-after", b"1"), *CLOSE))
            return
        if scope.get("fenec.head_too_large"):
            await self.respond(send, E.HEAD_TOO_LARGE, E.head_too_large(), CLOSE)
            return
        if method not in METHODS:
            await self.respond(send, E.NOT_IMPLEMENTED, E.not_implemented(method), ())
            return
        req = request_of(scope)
        if method == "OPTIONS":
            await self.preflight(send)
            return
        if req.chunked:
            await self.respond(send, E.LENGTH_REQUIRED, E.body(E.CHUNKED), CLOSE)
            return
        if req.length is not None:
            length = parse_length(req.length)
            if length is None:
                await self.respond(send, E.BAD_REQUEST, E.body(E.BAD_LENGTH), CLOSE)
                return
            if length > BODY_CEILING:
                await self.respond(send, E.TOO_LARGE, E.too_large(length), CLOSE)
                return
        if how == routing.PUBLIC:
            await self.cold(scope, receive, send)  # no data in it: no token asked
            return
        if how == routing.REPLICATION:  # the replication token's routes, checked there
            from .replication import serve

            await serve(self.app.config.replication, scope, receive, send)
            return
        app = self.app
        try:
            metrics = path in routing.METRICS_PATHS
            caller = app.auth.metrics(req.auth) if metrics else app.auth.data(req.auth)
        except AuthRefused as r:
            await self.refuse(send, req.peer, r.message)
            return
        if caller is not OPEN:
            app.delay.cleared(req.peer)
            req.credentialed()
        req.caller = caller
        if how == routing.DIRECT:
            await self.take(req, receive, send)
        elif how == routing.COLD:
            scope["fenec.caller"] = caller
            await self.cold(scope, receive, send)
        elif how == routing.WHOAMI:
            body = dumps(caller.whoami())
            await self.respond(send, E.OK, b"" if method == "HEAD" else body, (), api=True, length=len(body))
        else:
            await self.respond(send, E.NOT_FOUND, E.no_route(method, path), ())

    async def refuse(self, send: Send, peer: str, message: str) -> None:
        """A 401, written after the address's auth delay (access.md §2.3)."""
        delay = self.app.delay.refused(peer)
        if delay > 0:
            await asyncio.sleep(delay)
        await self.respond(send, E.UNAUTHORIZED, E.body(message), ((b"www-authenticate", b"Bearer"),))

    async def preflight(self, send: Send) -> None:
        cors = self.app.cors_headers
        headers = cors + PREFLIGHT if cors else []
        await send({"type": "http.response.start", "status": E.NO_CONTENT, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    def headers_for(self, body: bytes, extra: Any, *, api: bool = False,
                    length: int | None = None) -> list[tuple[bytes, bytes]]:
        """An answer's headers (the transport adds the date): the same as wire.render_api writes."""
        headers = [JSON_TYPE, (b"content-length", str(len(body) if length is None else length).encode())]
        if api:
            headers.append(self.app.version_header)
        headers.extend(extra)
        headers.extend(self.app.cors_headers)
        return headers

    async def respond(self, send: Send, status: int, body: bytes,
                      extra: Any, *, api: bool = False, length: int | None = None) -> None:
        headers = self.headers_for(body, extra, api=api, length=length)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def send_answer(self, send: Send, answer: Answer, req: Request | None = None) -> None:
        parts = answer.parts
        if parts is None:
            await self.respond(send, answer.status, answer.body, answer.headers, api=True)
            return
        # no content-length: the transport writes it chunked, and each send waits while the
        # transport is paused (cycle.py), so the next piece is rendered only once there is room
        headers = [JSON_TYPE, self.app.version_header, *answer.headers, *self.app.cors_headers]
        gone: list[bool] = []
        leaving = req.leaving if req is not None else None
        hook = partial(gone.append, True)
        if leaving is not None:
            leaving.append(hook)
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        try:
            for piece in parts:
                if gone:
                    return  # the client left (or was cut): the rest is not rendered
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            if leaving is not None and hook in leaving:
                leaving.remove(hook)

    @staticmethod
    async def read_body(receive: Receive) -> bytes | None:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body = message.get("body", b"")
        if not message.get("more_body", False):
            return body
        chunks = [body]
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)

    # -- /query and /batch --

    async def take(self, req: Request, receive: Receive, send: Send) -> None:
        """The service's answer (`App.serve_now`), or the request run off the loop where it
        answers None: a body over OFF_LOOP_BODY, a long text not parsed yet, a run put back."""
        raw = await self.read_body(receive)
        if raw is None:
            return
        if req.after is not None:  # read-your-writes: the change waited for first (replication.py)
            from .replication import wait_after

            refused = await wait_after(self.app.db, req)
            if refused is not None:
                await self.send_answer(send, refused, req)
                return
        got = self.app.serve_now(req, raw) if len(raw) <= OFF_LOOP_BODY else None
        if got is None:
            got = await self.off_loop(req, raw)
        if isinstance(got, Answer):
            await self.send_confirmed(send, got, req)
            return
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()

        def then(answer: Answer) -> None:
            if not future.done():
                future.set_result(answer)

        if isinstance(got, Pending):
            self.app.release(got, then)
            answer: Answer | None = await future
        else:
            answer = await self.await_held(future, self.app.hold(got, then), receive, req.leaving)
        if answer is not None:
            await self.send_confirmed(send, answer, req)

    async def send_confirmed(self, send: Send, answer: Answer, req: Request) -> None:
        """`send_answer`, once as many replicas as `--sync-replicas` asks hold what it answers
        (replication.py `confirm`; at once without)."""
        node = self.app.config.replication
        if node is not None and node.quorum is not None:
            from .replication import confirm

            answer = await confirm(node, answer)
        if node is not None and node.cluster is not None:
            from .replication import gate

            answer = gate(node, answer)
        await self.send_answer(send, answer, req)

    async def off_loop(self, req: Request, raw: bytes) -> Answer | Held:
        """`serve_now`'s work in a worker thread: the body decoded, the held claim prepared and
        the statements run there; an answer owed later is held as on the loop."""
        app = self.app
        runner = app.runner
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        build = app.intake.query_work if req.path == "/query" else app.intake.batch_work
        try:
            if len(raw) > OFF_LOOP_BODY:  # decoding a large JSON body holds the GIL for milliseconds: not on the loop
                work: Work = await loop.run_in_executor(runner.large,
                                                        partial(gc_policy.held_off, partial(build, req, raw)))
            else:
                work = build(req, raw)
        except Refusal as r:
            app.account(started, "read", True, req, raw)
            return Answer(r.status, r.body)
        held = app.lines or app.start()
        claim = None
        if work.wait > 0 and not held.closing:
            try:
                claim = await loop.run_in_executor(runner.large, partial(gc_policy.held_off,
                                                                         partial(runner.hold_of, work)))
            except FenecError as e:
                app.account(started, "read", True, req, raw)
                return Answer(*E.answer(e, batch=work.block))
            except Exception:
                log.exception("prepare_hold failed")
                app.account(started, "read", True, req, raw)
                return Answer(E.FAULT, E.body(E.INTERNAL))
        seen = app.db.seq
        outcome, kind = await runner.run_off_loop(work, held=claim is not None)
        if claim is None or outcome.final or held.closing:
            app.account(started, kind, outcome.answer.status >= E.FIRST_REFUSAL, req, raw)
            return outcome.answer
        return Held(claim, work, outcome.answer, seen, started, req, raw)

    async def await_held(self, future: asyncio.Future[Answer], forget: Callable[[], None], receive: Receive,
                         leaving: list[Callable[[], None]] | None) -> Answer | None:
        """Wait for the held claim's answer, watching the connection (§8.10): told by the
        transport in the turn the client's close is read, before a run for a row it found could
        start (held/lines.py rule 8), and through receive() where the ASGI server is another."""
        if leaving is not None:
            leaving.append(forget)

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait((future, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not watcher.done():
                watcher.cancel()
            if leaving is not None and forget in leaving:
                leaving.remove(forget)
        if future.done() and not future.cancelled():
            return future.result()
        forget()
        return None
