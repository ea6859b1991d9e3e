"""The worker loop of the "Job queues" page, so that users need not write it by hand.

Every step is one statement of the page, made by the builder and visible as text through
the `to_*` methods (so a test, or a curious user, sees exactly what is sent):

    claim   set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
              where run_at <= now() order run_at asc limit <batch> returning *      (held: Fenec-Wait)
    ack     del q where id = $1 and owner = $2 require 1
    extend  set q {run_at: now() + $1} where id = $2 and owner = $3 require 1
    fail    set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null
              else now() + $4 * attempts * attempts end} where id = $5 and owner = $6 require 1

The owner is a claim token, `<worker name>:<counter>`, new for each claim, so two claims of
one job by the same worker are told apart. `ack`, `extend` and `fail` answer True, or False
when the job is no longer ours (the server's 412: the lease lapsed and another claim took it).

While a batch is being worked, a heartbeat extends the lease of each job not yet settled
every third of the lease, so a slow job is not handed to another worker. `stop()` (or a
SIGTERM/SIGINT once `handle_signals()` is on) lets the job in hand finish, settles nothing
else, and ends the iteration; a claim held at the server is abandoned (the server gives its
job to the next waiting worker). A job the caller leaves unsettled is simply not acked: its
lease lapses and another claim takes it again (at least once).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from ._conditions import raw
from ._errors import UnmetError
from ._query import QueryBase, Statement, expr, inc
from ._wire import check_key

if TYPE_CHECKING:
    from ._client import AsyncClient, Client

FAIL_RUN_AT = "case when attempts >= ? then null else now() + ? * attempts * attempts end"


class WorkerStopped(Exception):
    """Raised inside a held claim when a signal stops the worker; the iteration ends."""


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class _Plan:
    """The statements of one queue, shared by the blocking and the async worker."""

    def __init__(self, query: QueryBase, *, name: str | None, batch: int, lease: float, wait: float,
                 dead_after: int, backoff: float) -> None:
        self.query = query
        self.name = name or f"w-{uuid.uuid4().hex[:8]}"
        self.batch = batch
        self.lease = lease
        self.wait = wait
        self.dead_after = dead_after
        self.backoff = backoff
        self._counter = itertools.count(1)

    def next_owner(self) -> str:
        return f"{self.name}:{next(self._counter)}"

    def claim_chain(self) -> Any:
        return self.query.where(raw("run_at <= now()")).order("run_at").limit(self.batch)

    def claim_patch(self, owner: str) -> dict[str, Any]:
        return {"owner": owner, "run_at": expr("now() + ?", _ms(self.lease)), "attempts": inc(1)}

    def mine(self, job_id: Any, owner: str) -> Any:
        return self.query.where("id", job_id).where("owner", owner)

    def fail_patch(self, error: str, backoff: float | None) -> dict[str, Any]:
        step = _ms(self.backoff if backoff is None else backoff)
        return {"owner": None, "error": error, "run_at": expr(FAIL_RUN_AT, self.dead_after, step)}

    def to_claim(self, owner: str) -> Statement:
        return self.claim_chain().to_update(self.claim_patch(owner), returning=True)  # type: ignore[no-any-return]


class _JobBase:
    __slots__ = ("row", "owner", "settled", "lost", "_plan")

    def __init__(self, row: dict[str, Any], owner: str, plan: _Plan) -> None:
        self.row = row
        self.owner = owner
        self.settled = False
        self.lost = False
        self._plan = plan

    @property
    def id(self) -> Any:
        return self.row.get("id")

    @property
    def payload(self) -> Any:
        return self.row.get("payload")

    @property
    def attempts(self) -> int:
        return int(self.row.get("attempts") or 0)

    def to_ack(self) -> Statement:
        return self._plan.mine(self.id, self.owner).to_delete(require=1)  # type: ignore[no-any-return]

    def to_extend(self, lease: float | None = None) -> Statement:
        patch = {"run_at": expr("now() + ?", _ms(self._plan.lease if lease is None else lease))}
        return self._plan.mine(self.id, self.owner).to_update(patch, require=1)  # type: ignore[no-any-return]

    def to_fail(self, error: str, *, backoff: float | None = None) -> Statement:
        return self._plan.mine(self.id, self.owner).to_update(  # type: ignore[no-any-return]
            self._plan.fail_patch(error, backoff), require=1)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id!r} owner={self.owner!r} attempts={self.attempts}>"


class Job(_JobBase):
    """A leased job of a `Worker`: `ack()`, `extend()`, `fail(error, backoff=...)`."""

    __slots__ = ()

    def _settle(self, run: Any, final: bool) -> bool:
        if self.lost or (self.settled and final):
            return False
        try:
            run()
        except UnmetError:
            self.lost = True
            return False
        if final:
            self.settled = True
        return True

    def ack(self) -> bool:
        """Delete the job: done. False when it is no longer ours."""
        return self._settle(lambda: self._plan.mine(self.id, self.owner).delete(require=1), True)

    def extend(self, lease: float | None = None) -> bool:
        """Move the lease on by `lease` seconds (the worker's lease by default)."""
        patch = {"run_at": expr("now() + ?", _ms(self._plan.lease if lease is None else lease))}
        return self._settle(lambda: self._plan.mine(self.id, self.owner).update(patch, require=1), False)

    def fail(self, error: str, *, backoff: float | None = None) -> bool:
        """Give it back to run again after `backoff * attempts²` seconds, or dead after `dead_after`."""
        patch = self._plan.fail_patch(error, backoff)
        return self._settle(lambda: self._plan.mine(self.id, self.owner).update(patch, require=1), True)


class Worker:
    """Claims batches of leased jobs from one queue and hands them out one at a time:

        worker = Worker(db, "jobs", batch=10, lease=30, wait=30)
        with worker.handle_signals():
            for job in worker:
                try:
                    send(job.payload)
                    job.ack()
                except Exception as e:
                    job.fail(str(e))

    `lease`, `wait` and `backoff` are seconds; a claim is held at the server for up to `wait`.
    """

    def __init__(self, db: Client, queue: str, *, name: str | None = None, batch: int = 10,
                 lease: float = 30.0, wait: float = 30.0, dead_after: int = 5, backoff: float = 1.0,
                 heartbeat: bool = True) -> None:
        self.db = db
        self.plan = _Plan(db.collection(queue), name=name, batch=batch, lease=lease, wait=wait,
                          dead_after=dead_after, backoff=backoff)
        self.heartbeat = heartbeat
        self._stop = threading.Event()
        self._claiming = False

    @property
    def name(self) -> str:
        return self.plan.name

    def to_claim(self, owner: str) -> Statement:
        return self.plan.to_claim(owner)

    def claim(self, *, wait: float | None = None, idempotency_key: str | None = None) -> list[Job]:
        """One claim: the oldest ready jobs, up to `batch`, each leased to a new owner token."""
        owner = self.plan.next_owner()
        db = self.db if idempotency_key is None else self.db.with_idempotency_key(check_key(idempotency_key))
        chain = db.collection(self.plan.query._collection).where(raw("run_at <= now()")) \
            .order("run_at").limit(self.plan.batch)
        rows = chain.update(self.plan.claim_patch(owner), returning=True,
                            wait=self.plan.wait if wait is None else wait)
        return [Job(row, owner, self.plan) for row in rows]

    def stop(self) -> None:
        """End the iteration after the job in hand; a held claim is given up."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @contextlib.contextmanager
    def handle_signals(self, *signals: int) -> Iterator[Worker]:
        """SIGTERM and SIGINT (or the given signals) stop the worker cleanly while inside."""
        wanted = signals or (signal.SIGTERM, signal.SIGINT)

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stop()
            if self._claiming:
                raise WorkerStopped(signum)

        previous = {s: signal.signal(s, on_signal) for s in wanted}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _beat(self, jobs: list[Job], done: threading.Event) -> None:
        period = self.plan.lease / 3
        while not done.wait(period):
            for job in jobs:
                if not (job.settled or job.lost):
                    job.extend()

    def __iter__(self) -> Iterator[Job]:
        while not self._stop.is_set():
            self._claiming = True
            try:
                jobs = self.claim()
            except WorkerStopped:
                return
            finally:
                self._claiming = False
            if not jobs:
                continue
            done = threading.Event()
            beat = threading.Thread(target=self._beat, args=(jobs, done), daemon=True) if self.heartbeat else None
            if beat:
                beat.start()
            try:
                for job in jobs:
                    if job.lost:
                        continue
                    yield job
                    if self._stop.is_set():
                        return
            finally:
                done.set()
                if beat:
                    beat.join()


class AsyncJob(_JobBase):
    """A leased job of an `AsyncWorker`: the same calls, awaited."""

    __slots__ = ()

    async def _settle(self, run: Any, final: bool) -> bool:
        if self.lost or (self.settled and final):
            return False
        try:
            await run()
        except UnmetError:
            self.lost = True
            return False
        if final:
            self.settled = True
        return True

    async def ack(self) -> bool:
        return await self._settle(lambda: self._plan.mine(self.id, self.owner).delete(require=1), True)

    async def extend(self, lease: float | None = None) -> bool:
        patch = {"run_at": expr("now() + ?", _ms(self._plan.lease if lease is None else lease))}
        return await self._settle(lambda: self._plan.mine(self.id, self.owner).update(patch, require=1), False)

    async def fail(self, error: str, *, backoff: float | None = None) -> bool:
        patch = self._plan.fail_patch(error, backoff)
        return await self._settle(lambda: self._plan.mine(self.id, self.owner).update(patch, require=1), True)


class AsyncWorker:
    """`async for job in AsyncWorker(db, "jobs"): ...`; `stop()` cancels a held claim at once."""

    def __init__(self, db: AsyncClient, queue: str, *, name: str | None = None, batch: int = 10,
                 lease: float = 30.0, wait: float = 30.0, dead_after: int = 5, backoff: float = 1.0,
                 heartbeat: bool = True) -> None:
        self.db = db
        self.plan = _Plan(db.collection(queue), name=name, batch=batch, lease=lease, wait=wait,
                          dead_after=dead_after, backoff=backoff)
        self.heartbeat = heartbeat
        self._stopped = False
        self._claim_task: asyncio.Task[Any] | None = None

    @property
    def name(self) -> str:
        return self.plan.name

    def to_claim(self, owner: str) -> Statement:
        return self.plan.to_claim(owner)

    async def claim(self, *, wait: float | None = None, idempotency_key: str | None = None) -> list[AsyncJob]:
        owner = self.plan.next_owner()
        db = self.db if idempotency_key is None else self.db.with_idempotency_key(check_key(idempotency_key))
        chain = db.collection(self.plan.query._collection).where(raw("run_at <= now()")) \
            .order("run_at").limit(self.plan.batch)
        rows = await chain.update(self.plan.claim_patch(owner), returning=True,
                                  wait=self.plan.wait if wait is None else wait)
        return [AsyncJob(row, owner, self.plan) for row in rows]

    def stop(self) -> None:
        self._stopped = True
        if self._claim_task is not None:
            self._claim_task.cancel()

    @property
    def stopped(self) -> bool:
        return self._stopped

    @contextlib.contextmanager
    def handle_signals(self, *signals: int) -> Iterator[AsyncWorker]:
        """SIGTERM and SIGINT (or the given signals) stop the worker while inside (running loop)."""
        loop = asyncio.get_running_loop()
        wanted = signals or (signal.SIGTERM, signal.SIGINT)
        for s in wanted:
            loop.add_signal_handler(s, self.stop)
        try:
            yield self
        finally:
            for s in wanted:
                loop.remove_signal_handler(s)

    async def _beat(self, jobs: list[AsyncJob]) -> None:
        while True:
            await asyncio.sleep(self.plan.lease / 3)
            for job in jobs:
                if not (job.settled or job.lost):
                    await job.extend()

    async def __aiter__(self) -> AsyncIterator[AsyncJob]:
        while not self._stopped:
            self._claim_task = asyncio.ensure_future(self.claim())
            try:
                jobs = await self._claim_task
            except asyncio.CancelledError:
                if self._stopped:
                    return
                raise
            finally:
                self._claim_task = None
            if not jobs:
                continue
            beat = asyncio.ensure_future(self._beat(jobs)) if self.heartbeat else None
            try:
                for job in jobs:
                    if job.lost:
                        continue
                    yield job
                    if self._stopped:
                        return
            finally:
                if beat:
                    beat.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await beat
