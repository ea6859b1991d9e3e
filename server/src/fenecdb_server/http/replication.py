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
* `POST /_replication/ack` with the body `replica=<id>&seq=<n>`: a replica's follower says its disk
  holds change n (replication/quorum.py); `{"ok":true}`, or 404 when no stream of that replica is
  open. The transport answers it on its direct path (routing.DIRECT_TARGETS, `ack_answer`).

In a cluster (`--etcd`), `gate` has the last word on every answer to `/query` and `/batch` (fencing,
the term, the primary's name). Under `--sync-replicas N`, `confirm_then` holds each answer carrying a
`Fenec-Seq` until N replicas hold that change (a write's, or what a read-only `/batch` read), or answers
503 after the wait: a callback, so the direct path's answers stay there (app.py); `confirm` is the ASGI
door's.

And `wait_after`, read-your-writes (http.md §7): a `/query` or `/batch` with `Fenec-After: <n>` runs
once this server holds change n, waiting `Fenec-Wait` ms for it (default 5 000, at most 30 000; nothing
is held after it), else 504 with the server's change number; a value that is not a number is 400.

The ASGI door (asgi.py) sends these paths here before its own token check: the replication token
is not a data token, nor a data token this one. On a server with no `--replication-token`: 404.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..database import FILE_HEADER_SIZE, file_header
from ..errors import FenecError
from ..held import MAX_WAIT_MS
from ..replication.feed import KEEPALIVE, KEEPALIVE_S, Feed, Replica
from ..replication.node import NO_PRIMARY
from . import errors as E
from .bodies import dumps
from .limits import parse_wait

if TYPE_CHECKING:
    from ..database import Database
    from ..replication.node import Node
    from .app import App
    from .exchange import Answer, Request

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

JSON = (b"content-type", b"application/json; charset=utf-8")
PATHS = ("/_replication", "/_replication/status", "/_replication/promote")
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
    peer = (scope.get("client") or ("", 0))[0]
    if not node.allows(_header(scope, b"authorization")):
        if node.delay is not None:  # the server's auth delay, as for every 401 (access.md §2.3)
            wait = node.delay.refused(peer)
            if wait > 0:
                await asyncio.sleep(wait)
        await respond(send, E.UNAUTHORIZED, E.body(E.NO_TOKEN), ((b"www-authenticate", b"Bearer"),))
        return
    if node.delay is not None:
        node.delay.cleared(peer)
    loop = asyncio.get_running_loop()
    if path == "/_replication/status":
        await respond(send, E.OK, dumps(node.status()))
    elif path == "/_replication/promote":
        done = await loop.run_in_executor(None, node.promote)
        await respond(send, E.OK, dumps(done))
    elif path == "/_replication/ack":
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        got = ack_answer(node, (_header(scope, b"authorization") or "").encode("latin-1"), b"".join(chunks))
        assert got is not None  # the token was checked above
        await respond(send, got.status, got.body)
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
    replica = Replica(f"{peer[0]}:{peer[1]}", since, _header(scope, b"fenec-replica") or "",
                      _header(scope, b"fenec-member") or "")
    image = not node.identity.continues(history, since) or not feed.fed(since)
    pusher = Pusher(feed, replica, scope.get("fenec.send_now"))
    push = pusher.push
    await send({"type": "http.response.start", "status": E.OK, "headers": [
        (b"content-type", b"application/octet-stream"),
        (b"fenec-history", node.identity.history.encode()), (b"fenec-seq", str(feed.seq).encode()),
        (b"fenec-sync-replicas", str(node.quorum.needed if node.quorum is not None else 0).encode()),
        (b"fenec-term", str(node.db.engine.catalog.term).encode())]})
    await send({"type": "http.response.body", "body": file_header(), "more_body": True})
    feed.replicas.add(replica)
    feed.pushers.append(push)
    loop = asyncio.get_running_loop()
    try:
        replica.last_sent = time.monotonic()
        while not node.closing and feed is node.feed:
            if conn is not None and conn.transport.is_closing():
                return
            more = feed.more()  # before the look: a sync after it wakes this stream
            got = None if image else feed.durable_frames(replica.sent)
            if got is None:
                replica.sent = await send_image(node, send, conn, loop)
                image = False
                replica.last_sent = time.monotonic()
                continue
            if got[1]:
                replica.sent = got[0]
                await send({"type": "http.response.body", "body": got[1], "more_body": True})
                replica.last_sent = time.monotonic()
                continue
            quiet = KEEPALIVE_S - (time.monotonic() - replica.last_sent)
            if quiet > 0:
                pusher.idle = True  # only while the task waits: never beside its own send or an image
                try:
                    await feed.wait(more, quiet)
                finally:
                    pusher.idle = False
            else:
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
                replica.last_sent = time.monotonic()
        await send({"type": "http.response.body", "body": b""})
    finally:
        feed.replicas.discard(replica)
        feed.pushers.remove(push)


class Pusher:
    """A stream's records sent from the log's sync itself (`Feed.synced`, on the loop), while the
    stream's task waits for more: the replica has them in the sync's own turn, where the task would
    send them a turn later (a write under `--sync-replicas` waits for that round trip). Only while
    the task waits (`idle`), and only what the transport takes at once (`AsgiCycle.send_now`); the
    rest, an image owed, a slow reader, is the task's, which looks again when it wakes."""

    __slots__ = ("feed", "replica", "send_now", "idle")

    def __init__(self, feed: Feed, replica: Replica, send_now: Callable[[bytes], bool] | None) -> None:
        self.feed = feed
        self.replica = replica
        self.send_now = send_now
        self.idle = False

    def push(self) -> None:
        send_now = self.send_now
        if not self.idle or send_now is None:
            return
        replica = self.replica
        got = self.feed.durable_frames(replica.sent)
        if got is not None and got[1] and send_now(got[1]):
            replica.sent = got[0]
            replica.last_sent = time.monotonic()


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


AFTER_WAIT_MS = 5_000  # a Fenec-After's wait with no Fenec-Wait (at most MAX_WAIT_MS with one)
AFTER_POLL_S = 0.005  # how often a request waiting for a change looks at the change number
NOT_A_CHANGE = "Fenec-After is a change number"


async def wait_after(db: Database, req: Request) -> Answer | None:
    """None once `db` holds the change `req`'s Fenec-After names (its Fenec-Wait spent on it, so
    the request then runs once, held by nothing); else the 400 or 504 to answer."""
    from .exchange import Answer

    assert req.after is not None
    try:
        change = int(req.after.strip())
    except ValueError:
        return Answer(E.BAD_REQUEST, E.body(NOT_A_CHANGE))
    wait_ms = AFTER_WAIT_MS
    if req.wait is not None:
        sent = parse_wait(req.wait)
        if sent is None:
            return Answer(E.BAD_REQUEST, E.body(E.WAIT_NOT_MS))
        wait_ms = min(MAX_WAIT_MS, sent)
    req.wait = None
    deadline = time.monotonic() + wait_ms / 1000
    while db.seq < change:
        if time.monotonic() >= deadline:
            return Answer(E.TIMED_OUT_GATEWAY, E.body(f"change {change} has not reached this server in the wait",
                                                      seq=db.seq))
        await asyncio.sleep(AFTER_POLL_S)
    return None


def metrics_text(node: Node | None) -> bytes:
    """Replication's lines of `/_metrics` (docs/metrics.md), zeros on a server that has none."""
    changes, seconds, replicas = 0, 0.0, 0
    if node is not None:
        follower = node.follower
        if follower is not None:
            changes, seconds = follower.behind()
        elif node.feed is not None:
            replicas = len(node.feed.replicas)
    return (
        "# HELP fenec_replication_behind_changes Changes its primary holds that this replica has not applied "
        "(0 on a primary).\n"
        "# TYPE fenec_replication_behind_changes gauge\n"
        f"fenec_replication_behind_changes {changes}\n"
        "# HELP fenec_replication_behind_seconds Seconds since this replica last held every change its primary "
        "had (0 while level, and on a primary).\n"
        "# TYPE fenec_replication_behind_seconds gauge\n"
        f"fenec_replication_behind_seconds {seconds:.3f}\n"
        "# HELP fenec_replication_replicas Replicas this primary streams to now.\n"
        "# TYPE fenec_replication_replicas gauge\n"
        f"fenec_replication_replicas {replicas}\n"
    ).encode()


def owed_to_replicas(node: Node | None, answer: Answer) -> int:
    """The change `answer` must wait for on `--sync-replicas` replicas (its `Fenec-Seq`), or 0:
    no quorum, a refusal, no change named, or one the replicas hold already. An Idempotency-Key's
    replay names no change: it waits for the server's latest, which is at or past the write it
    answers for (its first answer may have been the 503 of a write no replica held yet)."""
    if node is None:
        return 0
    quorum = node.quorum
    if quorum is None or answer.status >= E.FIRST_REFUSAL:
        return 0
    for k, v in answer.headers:
        if k == b"fenec-seq":
            seq = int(v)
            return seq if seq > quorum.level else 0
        if k == b"idempotent-replayed":
            seq = node.db.seq
            return seq if seq > quorum.level else 0
    return 0


def confirm_then(node: Node, answer: Answer, seq: int, then: Callable[[Answer], None]) -> None:
    """On the loop: `then(answer)` once `--sync-replicas` replicas hold change `seq`; a 503 if
    they do not within the wait (the write stands on this primary's disk: its client is told it
    is not safe on the replicas, never that it is). Under `--sync <ms>` the primary's own disk
    is synced first, off the loop (replicas are sent only what is on it), rather than wait for
    the period; a failed sync answers the log's error."""
    from .exchange import Answer

    quorum = node.quorum
    assert quorum is not None
    told = [False]

    def once(final: Answer) -> None:
        if not told[0]:
            told[0] = True
            then(final)

    def held(ok: bool) -> None:
        once(answer if ok else Answer(E.UNAVAILABLE, E.body(
            f"change {seq} is on this primary's disk but not yet on {quorum.needed} replica(s)' after "
            f"{quorum.wait_s:g} s (--sync-replicas): a failover may lose it; retry with the same Idempotency-Key",
            seq=seq), [(b"retry-after", b"1")]))

    log = node.db.log
    if log is not None and log.policy != "always" and log.durable < log.appended:
        synced = asyncio.get_running_loop().run_in_executor(None, log.sync_upto, log.appended)

        def failed(done: asyncio.Future[None]) -> None:
            error = done.exception()
            if isinstance(error, FenecError):
                once(Answer(*E.answer(error)))

        synced.add_done_callback(failed)
    quorum.when(seq, held)


async def confirm(node: Node, answer: Answer) -> Answer:
    """`confirm_then` for the ASGI door: `answer`, or what it became, once it may be sent."""
    seq = owed_to_replicas(node, answer)
    if not seq:
        return answer
    got: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    confirm_then(node, answer, seq, got.set_result)
    return await got


def ack_answer(node: Node | None, auth: bytes | None, raw: bytes) -> Answer | None:
    """`POST /_replication/ack` with its body `replica=<id>&seq=<n>`, answered at once: on the
    transport's direct path (app.py) or by the ASGI door (`serve`). None where the door must answer
    it instead: no replication here (404), or not the replication token (its 401 waits out the
    address's delay)."""
    from .exchange import Answer

    if node is None or not node.allows(auth.decode("latin-1") if auth is not None else None):
        return None
    query = urllib.parse.parse_qs(raw.decode("latin-1"))
    try:
        seq = int(query.get("seq", [""])[0])
    except ValueError:
        return Answer(E.BAD_REQUEST, E.body("seq is a change number"))
    if node.ack(query.get("replica", [""])[0], seq):
        return Answer(E.OK, b'{"ok":true}')
    return Answer(E.NOT_FOUND, E.body("no stream of that replica is open"))


def gate(node: Node, answer: Answer) -> Answer:
    """In a cluster (replication/cluster.py), the last word on an answer to `/query` or `/batch`:
    it carries `Fenec-Term`; a write this server made as primary is refused 503 once its lease
    may have lapsed (fencing: nothing is acknowledged after); a refusal names the primary
    (`Fenec-Primary`), or, while none is known, is a 503 with `Retry-After`."""
    from .exchange import Answer

    cluster = node.cluster
    if cluster is None:
        return answer
    extra = [(b"fenec-term", str(cluster.term).encode())]
    leader = cluster.leader if cluster.leader != cluster.advertise else ""
    if leader:
        extra.append((b"fenec-primary", leader.encode()))
    status = answer.status
    if status < E.FIRST_REFUSAL:
        seq = next((int(v) for k, v in answer.headers if k == b"fenec-seq"), 0)
        if seq and cluster.fenced(seq):
            return Answer(E.UNAVAILABLE, E.body(
                "this server's lease as the cluster's primary lapsed before the write was confirmed: it may be "
                "lost; retry with the same Idempotency-Key", seq=seq), [(b"retry-after", b"1"), *extra])
    elif status == E.FORBIDDEN and node.db.read_only and not leader:
        return Answer(E.UNAVAILABLE, E.body(NO_PRIMARY), [(b"retry-after", b"1"), *extra])
    answer.headers = [*answer.headers, *extra]
    return answer


def attach(app: App, node: Node) -> None:
    """Replication's hooks in the app (the command line calls it once, before serving): the node
    its routes answer from, the auth delay its 401s wait, in a cluster the door's gate and a step-down's
    answers to the held claims, and on a replica a `Fenec-Primary` header on every answer until it is
    promoted."""
    from .wire import lines

    app.config.replication = node
    node.delay = app.delay
    app.config.door_only = node.cluster is not None  # the door gates (fencing, the term, the primary)

    def stepped_down() -> None:  # on the cluster's thread: its held claims answered now, on the loop
        lines, driver = app.lines, app.driver
        if lines is None or driver is None:
            return

        def answer_held() -> None:
            if node.quorum is not None:
                node.quorum.release()  # the writes waiting for replicas: 503 now, not after the wait
            if not lines.closing:
                lines.shutdown()  # each held claim answered its last answer (nothing taken) ...
                lines.closing = False  # ... and held claims taken again once this server leads anew

        driver.loop.call_soon_threadsafe(answer_held)

    node.stepped_down.append(stepped_down)
    if not node.primary:
        return
    header = (b"fenec-primary", node.primary.encode())
    app.cors_headers.append(header)
    app.cors_lines = lines(app.cors_headers)

    def promoted() -> None:
        if header in app.cors_headers:
            app.cors_headers.remove(header)
        app.cors_lines = lines(app.cors_headers)

    node.promoted.append(promoted)
