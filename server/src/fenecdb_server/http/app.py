"""The HTTP service: `POST /query` and `/batch`, held claims, and the app the server runs (http.md).

One service answers `/query` and `/batch` whichever door a request came in by: `App.serve_now`
reads the body into `Work` (intake.py), runs it (runner.py) and returns the answer now, an
answer owed later (`Pending`, `Held`), or None where it must wait before answering (a run off the
loop). The transport (protocol.py) calls it through `handle` with no task and no ASGI message;
the ASGI door (asgi.py) calls it for the requests the transport leaves to it, and runs the rest
off the loop. `hold` and `release` hand an answer owed later over when it is ready, to either door.

The order of checks for every request is the ASGI door's (asgi.py); the routes, routing.py's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import FenecError
from ..held import HeldClaim, HeldClaims
from ..held.on_asyncio import SETTLE_TURNS, AsyncioDriver
from . import errors as E
from .asgi import AsgiDoor, Receive, Scope, Send
from .auth import OPEN, AuthDelay, AuthRefused
from .bodies import dumps as dumps  # noqa: F401 (re-exported: routes.py, admin.py, bench)
from .busy_poll import BusyPoll
from .config import Config
from .durable import TurnSync
from .exchange import FAULT, Answer, Held, Pending, Request, Service
from .intake import Intake, Refusal
from .limits import OFF_LOOP_BODY
from .metrics import Metrics, Recent
from .replication import ack_answer, confirm_then, owed_to_replicas
from .runner import OffLoop, Runner
from .wire import lines

if TYPE_CHECKING:
    from ..database import Database

log = logging.getLogger("fenec.http")

ACK_PATH = "/_replication/ack"  # the one route of routing.DIRECT_TARGETS that is not /query or /batch
FOR_REPLICAS = -1  # a `Pending`'s ticket when it owes no fdatasync, only the replicas' (--sync-replicas)

class App(Service):
    """The service, with what it keeps for the server's life: the held lines, the metrics, the
    auth delay, the durable turns (`--sync always`)."""

    def __init__(self, db: Database, config: Config | None = None, *,
                 connections: Callable[[], int] = lambda: 0, busy: BusyPoll | None = None,
                 requests: Callable[[], int] = lambda: 0) -> None:
        self.db = db
        self.config = config or Config()
        self.connections = connections
        self.requests = requests  # requests answered so far: a compaction rests while it moves (database.Pace)
        self.metrics = Metrics(self.config.version)
        self.busy = self.metrics.busy = busy  # the protocol's polling window (busy_poll.py), or None
        self.recent = Recent()  # per-second samples for the dashboard (admin.py)
        self._sampler: asyncio.Task[None] | None = None
        self.auth = self.config.auth
        self.delay = AuthDelay(self.config.auth_delay_ms)
        self.lines: HeldClaims[Answer] | None = None  # the held claims (held/), once the loop runs
        self.driver: AsyncioDriver[Answer] | None = None  # their clock and runs, on that loop
        self.intake = Intake(self.config, db.cached)
        self.runner = Runner(db, self.config, self.auth)
        self.version_header = (b"x-fenecdb-version", self.config.version.encode())
        self.cors_headers: list[tuple[bytes, bytes]] = []
        if self.config.cors:
            self.cors_headers = [
                (b"access-control-allow-origin", self.config.cors.encode()),
                (b"access-control-expose-headers", b"fenec-seq, fenec-next, idempotent-replayed"),
                (b"vary", b"Origin"),
            ]
        # the same as lines, for the direct path's answers (protocol.py, wire.render_api)
        self.version_line = lines([self.version_header])
        self.cors_lines = lines(self.cors_headers)
        self.asgi = AsgiDoor(self)

    def answer_lines(self) -> tuple[bytes, bytes]:
        return self.version_line, self.cors_lines

    @property
    def turns(self) -> TurnSync | None:
        """`--sync always`: the loop turns' fdatasync (durable.py), once the loop runs."""
        return self.runner.turns

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.asgi(scope, receive, send)

    def start(self) -> HeldClaims[Answer]:
        if self.lines is None:
            log_ = self.db.log
            if self.config.sync_always and log_ is not None:
                turns = self.runner.turns = TurnSync(log_, asyncio.get_running_loop())
                if self.busy is not None:
                    self.busy.paused = turns.syncing  # the kernel's sync needs this CPU
            driver = self.driver = AsyncioDriver(asyncio.get_running_loop(), self.runner.run_held, FAULT,
                                                 settle_turns=1 if self.config.closes_told else SETTLE_TURNS)
            self.lines = HeldClaims(self.db, driver)
            self._sampler = asyncio.get_running_loop().create_task(self._sample())
        return self.lines

    async def _sample(self) -> None:
        while True:
            self.recent.sample(self.db, self.lines)
            await asyncio.sleep(1.0)

    def shutdown(self) -> int:
        """Stop holding: every held claim is answered at once with its last answer."""
        if self._sampler is not None:
            self._sampler.cancel()
        if self.runner.turns is not None:
            self.runner.turns.close()
        if self.lines is None:
            return 0
        return self.lines.shutdown()

    def handle(self, req: Request, raw: bytes) -> Answer | Pending | Held | None:
        """`POST /query` or `/batch`, called by the transport (protocol.py) when the body's last
        byte arrives: the token checked, then `serve_now`. None where the ASGI door must answer
        it: a refused token (its 401 waits out the address's delay, auth.py), a run off the loop."""
        if req.path == ACK_PATH:  # a replica's ack, with the replication token (replication.py)
            return ack_answer(self.config.replication, req.auth, raw)
        try:
            caller = self.auth.data(req.auth)
        except AuthRefused:
            return None
        if caller is not OPEN:
            self.delay.cleared(req.peer)
            req.credentialed()
        req.caller = caller
        if req.after is not None or self.config.door_only:
            return None  # Fenec-After: the ASGI door waits; in a cluster it gates (replication.py)
        got = self.serve_now(req, raw)
        if got is None:
            return None
        self.metrics.direct += 1
        if type(got) is Answer and owed_to_replicas(self.config.replication, got):
            return Pending(got, FOR_REPLICAS, False)  # --sync-replicas: `release` waits for them
        return got

    def serve_now(self, req: Request, raw: bytes) -> Answer | Pending | Held | None:
        """The answer to `req`, its token already checked, on the loop and with no await: now, or
        owed later (a write's fdatasync under --sync always: `Pending`; a held claim that took
        nothing: `Held`). None where it runs off the loop (a long text not parsed yet, a run the
        loop put back); it wrote nothing then."""
        started = time.perf_counter()
        try:
            work = self.intake.query_work(req, raw) if req.path == "/query" else self.intake.batch_work(req, raw)
        except Refusal as r:
            self.account(started, "read", True, req, raw)
            return Answer(r.status, r.body)
        if work.large:
            return None
        lines_ = self.lines or self.start()
        claim = None
        if work.wait > 0 and not lines_.closing:
            try:
                claim = self.runner.hold_of(work)
            except FenecError as e:
                self.account(started, "read", True, req, raw)
                return Answer(*E.answer(e, batch=work.block))
        seen = self.db.seq
        announced = lines_.announced
        try:
            outcome, kind, owed = self.runner.run_here(work, held=claim is not None, loop=True)
        except OffLoop:
            return None
        if claim is not None and not outcome.final and not lines_.closing and not owed:
            # it took nothing, so it wrote nothing: no fdatasync is owed for it
            return Held(claim, work, outcome.answer, seen, started, req, raw)
        self.account(started, kind, outcome.answer.status >= E.FIRST_REFUSAL, req, raw)
        if owed:
            return Pending(outcome.answer, owed, work.block)
        if lines_.announced != announced:
            # it woke held claims: the one that takes its row is answered first, then this
            return Pending(outcome.answer, 0, work.block)
        return outcome.answer

    def hold(self, held: Held, then: Callable[[Answer], None]) -> Callable[[], None]:
        """Hold a claim; `then(answer)` when a run takes something or at its deadline (never once
        the returned call dropped it: its client left, http.md §8.10)."""
        lines_ = self.lines
        assert lines_ is not None
        req = held.req

        def answered(answer: Answer) -> None:
            self.account(held.started, "write", answer.status >= E.FIRST_REFUSAL, req, held.raw)
            delay = self.delay.refused(req.peer) if answer.status == E.UNAUTHORIZED else 0
            if delay > 0:  # its token expired while it waited: a refusal like any
                asyncio.get_running_loop().call_later(delay, then, answer)
            else:
                self.confirmed(answer, then)

        held_claim = HeldClaim(held.work, held.last, answered)
        lines_.hold(held.claim, held_claim, held.work.wait, held.seen)
        return lambda: lines_.forget(held_claim)

    def release(self, pending: Pending, then: Callable[[Answer], None]) -> None:
        """`then(answer)` once the pending answer's write is durable; the log's 500 if its
        fdatasync failed (durable.py). With no ticket, once the held claim it woke has run. And
        under `--sync-replicas`, once the replicas hold it too (`confirmed`; FOR_REPLICAS: only that)."""
        if pending.ticket == FOR_REPLICAS:
            self.confirmed(pending.answer, then)
            return
        if not pending.ticket:
            assert self.driver is not None
            self.driver.behind_wake(lambda: self.confirmed(pending.answer, then))
            return
        turns = self.runner.turns
        assert turns is not None  # a ticket is owed only under a TurnSync

        def durable(error: FenecError | None) -> None:
            if error is None:
                self.confirmed(pending.answer, then)
            else:
                status, body = E.answer(error, batch=pending.block)
                then(Answer(status, body))

        turns.after(pending.ticket, durable)

    def confirmed(self, answer: Answer, then: Callable[[Answer], None]) -> None:
        """`then(answer)`, once as many replicas as `--sync-replicas` asks hold the change it
        names (replication.py `confirm_then`); at once without."""
        node = self.config.replication
        seq = owed_to_replicas(node, answer) if node is not None else 0
        if seq:
            if self.busy is not None:  # the loop polls until the ack (busy_poll.py, `hold`)
                self.busy.hold(asyncio.get_running_loop())
            confirm_then(node, answer, seq, then)
        else:
            then(answer)

    def account(self, started: float, kind: str, error: bool, req: Request, raw: bytes) -> None:
        seconds = time.perf_counter() - started
        self.metrics.answered(kind, seconds, error)
        slow = self.config.slow_ms
        if slow is not None and seconds * 1000 >= slow:
            self.metrics.slow += 1
            log.warning("slow statement: %.1f ms, http %s: %s %s %s", seconds * 1000, kind, req.method,
                        req.target.decode("latin-1"), _without_params(raw))


def _without_params(raw: bytes) -> str:
    """The body for the slow log, with parameter values left out (server.md §8). A large body is
    not decoded again on the loop for it (it is cut at 1 000 characters anyway)."""
    if len(raw) > OFF_LOOP_BODY:
        return f"(a body of {len(raw)} bytes)"
    texts = []
    for line in raw.split(b"\n"):
        try:
            doc = json.loads(line)
            texts.append(json.dumps({"query": doc.get("query", doc.get("sql"))}, ensure_ascii=False))
        except Exception:
            continue
    return "\n".join(texts)[:1000]


def create_app(db: Database, config: Config | None = None, **kw: Any) -> App:
    return App(db, config, **kw)

