"""The replication routes (server.md §7), with the replication token only (access.md):

* `GET /_replication?since=<n>&history=<id>`: the primary's stream (replication/feed.py has its
  bytes): an image first when the replica's change `n` is older than what the feed keeps, or of
  another history; then every record past it already on the primary's disk, in order, as they
  come, with a keep-alive after a second of silence. Headers `Fenec-History` and `Fenec-Seq` (the
  primary's change number as the stream starts). A replica is not a primary: 409.
* `GET /_replication/status`: `{"role", "seq", "history", ...}`: a replica adds `primary`,
  `connected`, `behind` (changes it knows of not applied yet) and `last_contact_s`; a primary
  lists `replicas` (each one's `peer`, `sent`, `behind`) and what its `buffer` keeps.
* `POST /_replication/promote`: a replica becomes a primary: `{"promoted":true,"seq":n,"history":id}`.

The ASGI door (asgi.py) sends these paths here before its own token check: the replication token
is not a data token, nor a data token this one. On a server with no `--replication-token`: 404.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..replication.feed import KEEPALIVE, KEEPALIVE_S, Replica, frames
from ..storage.format import FILE_HEADER_SIZE, file_header
from . import errors as E
from .bodies import dumps

if TYPE_CHECKING:
    from ..replication.node import Node

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

JSON = (b"content-type", b"application/json; charset=utf-8")
PATHS = ("/_replication", "/_replication/status", "/_replication/promote")
POLL_S = 0.002  # how often a stream looks for records newly on disk while it has none to send
IMAGE_CHUNK = 256 << 10


async def respond(send: Send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    headers = [JSON, (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: MutableMapping[str, Any], name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return str(v.decode("latin-1"))
    return None


async def serve(node: Node | None, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
    path = scope["path"]
    method = scope["method"]
    if node is None:
        await respond(send, E.NOT_FOUND, E.no_route(method, path))
        return
    if not node.allows(_header(scope, b"authorization")):
        await respond(send, E.UNAUTHORIZED, E.body(E.NO_TOKEN), ((b"www-authenticate", b"Bearer"),))
        return
    loop = asyncio.get_running_loop()
    if path == "/_replication/status":
        await respond(send, E.OK, dumps(node.status()))
    elif path == "/_replication/promote":
        done = await loop.run_in_executor(None, node.promote)
        await respond(send, E.OK, dumps(done))
    else:
        await stream(node, scope, send)


async def stream(node: Node, scope: MutableMapping[str, Any], send: Send) -> None:
    feed = node.feed
    if feed is None:
        await respond(send, E.CONFLICT, E.body(f"this server is a replica of {node.primary}: follow the primary"))
        return
    query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
    try:
        since = int(query.get("since", ["0"])[0])
        if since < 0:
            raise ValueError
    except ValueError:
        await respond(send, E.BAD_REQUEST, E.body("since is a change number"))
        return
    history = query.get("history", [""])[0]
    conn = scope.get("fenec.conn")
    peer = scope.get("client") or ("?", 0)
    replica = Replica(f"{peer[0]}:{peer[1]}", since)
    image = not node.identity.continues(history, since) or not feed.fed(since)
    await send({"type": "http.response.start", "status": E.OK, "headers": [
        (b"content-type", b"application/octet-stream"),
        (b"fenec-history", node.identity.history.encode()), (b"fenec-seq", str(feed.seq).encode())]})
    await send({"type": "http.response.body", "body": file_header(), "more_body": True})
    feed.replicas.add(replica)
    loop = asyncio.get_running_loop()
    try:
        last = time.monotonic()
        while not node.closing and feed is node.feed:
            if conn is not None and conn.transport.is_closing():
                return
            got = None if image else feed.durable_after(replica.sent)
            if got is None:
                replica.sent = await send_image(node, send, conn, loop)
                image = False
                last = time.monotonic()
                continue
            if got:
                replica.sent = got[-1][0]
                await send({"type": "http.response.body", "body": frames(got), "more_body": True})
                last = replica.last_sent = time.monotonic()
            elif time.monotonic() - last >= KEEPALIVE_S:
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
                last = time.monotonic()
            else:
                await asyncio.sleep(POLL_S)
        await send({"type": "http.response.body", "body": b""})
    finally:
        feed.replicas.discard(replica)


async def send_image(node: Node, send: Send, conn: Any, loop: asyncio.AbstractEventLoop) -> int:
    """A backup of the database (as `GET /_admin/backup` writes it) sent as the stream's next
    record; answers the change number it holds."""
    seq, _size, file = await loop.run_in_executor(None, node.db.backup_file)
    log = node.db.log
    if log is not None:  # only what is on the primary's disk: the image's last writes too
        await loop.run_in_executor(None, log.sync)
    try:
        file.seek(FILE_HEADER_SIZE)  # the stream's own header is sent already: the snapshot record
        while True:
            if conn is not None and conn.transport.is_closing():
                break
            piece = await loop.run_in_executor(None, file.read, IMAGE_CHUNK)
            if not piece:
                break
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    finally:
        file.close()
    return seq
