"""The asyncio worker: the loop of `_worker`, on tasks (docs/workers.md).

    worker = AsyncWorker(db, "jobs", batch=10, concurrency=4)
    await worker.run(handle)      # `async def handle(job)`; until worker.stop() or a signal

Each job of a batch is a task; an `asyncio.Semaphore` lets `concurrency` of them run at once, in
the batch's order. The heartbeat is a task too. A lost lease cancels that job's task (its
`job.lost` is true, and the worker settles it no more). `stop()` may be called from any thread:
it cancels a held claim at once (cancelling a request closes its connection, and the
server gives the claim up), gives the unstarted jobs back at once, waits for the running ones
up to `drain_timeout`, then cancels them and gives them back; no call is retried past that
deadline, so `run` returns within `drain_timeout` + 1 s even while the server is down.
`stop(hard=True)` cancels at once. A refusal no retry mends (404, 403, 401) stops the worker and
`run` raises it.

Statements, retries and events are `_worker_core`'s, as for the blocking worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._worker_core import (
    Backoff,
    Call,
    JobBase,
    OnEvent,
    Pause,
    State,
    Stopped,
    WorkerCore,
    error_text,
    ms,
    options,
    retryable,
    squared,
)

if TYPE_CHECKING:
    from ._client import AsyncClient
    from ._query import Statement


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` was set within `seconds`."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


class AsyncJob(JobBase):
    """A leased job of an `AsyncWorker`: the calls of `Job`, awaited. A lost lease cancels the
    handler's task; `cancelled` is set first (a `threading.Event`, to read from any thread)."""

    def __init__(self, row: dict[str, Any], owner: str, worker: AsyncWorker) -> None:
        super().__init__(row, owner, worker.plan)
        self._worker = worker
        self.task: asyncio.Task[Any] | None = None

    def cancel(self) -> None:
        super().cancel()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    async def ack(self) -> bool:
        return await self._worker._settle(self, "ack", self.to_ack())

    async def fail(self, error: str, *, backoff: Backoff | None = None) -> bool:
        return await self._worker._fail(self, error, backoff)

    async def extend(self, lease: float | None = None) -> bool:
        return await self._worker._extend(self, lease, retry=True)


class AsyncWorker(WorkerCore):
    """`await AsyncWorker(db, "jobs").run(handler)`, or `async for job in worker: ...`; the options
    of `Worker`."""

    def __init__(self, db: AsyncClient, queue: str, *, name: str | None = None, batch: int = 10,
                 concurrency: int = 1, lease: float = 30.0, wait: float = 30.0,
                 heartbeat: float | None = None, max_attempts: int = 5, dead_after: int | None = None,
                 backoff: Backoff = squared, drain_timeout: float = 30.0, timeout: float = 10.0,
                 retry_min: float = 0.1, retry_max: float = 5.0, keep_done: bool = False,
                 on_event: OnEvent | None = None) -> None:
        super().__init__(db.collection(queue), options(
            queue, name, dead_after, max_attempts, batch=batch, concurrency=concurrency, lease=lease, wait=wait,
            heartbeat=heartbeat, backoff=backoff, drain_timeout=drain_timeout, timeout=timeout,
            retry_min=retry_min, retry_max=retry_max, keep_done=keep_done), on_event)
        self.db = db
        self._stopping = asyncio.Event()
        self._hard = asyncio.Event()
        self._stop_flag = False  # read before the loop is known
        self._loop: asyncio.AbstractEventLoop | None = None
        self._claim_task: asyncio.Task[Any] | None = None
        self._in_hand: list[AsyncJob] = []
        self._active = False

    @property
    def stopped(self) -> bool:
        return self._stop_flag

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self, *, hard: bool = False) -> None:
        """Stop from any thread (or a signal handler on the loop): see the module docstring."""
        self._stop_flag = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._stop_now(hard)
        else:
            loop.call_soon_threadsafe(self._stop_now, hard)

    def _stop_now(self, hard: bool) -> None:
        self.clock.start(hard)
        self._stopping.set()
        if hard:
            self._hard.set()
            for job in self._in_hand:
                if job.state is State.RUNNING:
                    job.cancel()
        if self._claim_task is not None:
            self._claim_task.cancel()

    @contextlib.contextmanager
    def handle_signals(self, *signals: int, hard: tuple[int, ...] = ()) -> Iterator[AsyncWorker]:
        """While inside (in the running loop), SIGTERM and SIGINT, or the given signals, stop the worker."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        wanted = tuple(dict.fromkeys((*(signals or (signal.SIGTERM, signal.SIGINT)), *hard)))
        for s in wanted:
            loop.add_signal_handler(s, functools.partial(self.stop, hard=s in hard))
        try:
            yield self
        finally:
            for s in wanted:
                loop.remove_signal_handler(s)

    # -- sending ----------------------------------------------------------------------------------

    async def _send(self, call: Call, until: asyncio.Event) -> Any:
        pause = Pause(self.options.retry_min, self.options.retry_max)
        while True:
            try:
                return await self.db._send(call.request(self.db._wire, self.options, self.clock.cap()))
            except Exception as exc:
                if await self._pause(self._retry_pause(pause, call, exc, until.is_set()), until):
                    raise Stopped(call.kind) from exc

    async def _pause(self, delay: float, until: asyncio.Event) -> bool:
        """Wait out a retry pause: True when `until` was set or a stop's deadline came first."""
        loop = asyncio.get_running_loop()
        end = loop.time() + delay
        while True:
            limit = self._pause_limit(end - loop.time())
            if until.is_set() or limit is None:
                return True
            if limit <= 0:
                return False
            await _wait(until if self._stopping.is_set() else self._stopping, limit)

    async def _claim(self) -> list[AsyncJob] | None:
        if self._stopping.is_set():
            return None
        owner, call = self._claim_call()
        self._claim_task = asyncio.ensure_future(self._send(call, self._stopping))
        try:
            rows = await self._claim_task
        except (asyncio.CancelledError, Stopped):
            task = asyncio.current_task()
            if self._stopping.is_set() and (task is None or not task.cancelling()):
                return None
            raise
        finally:
            self._claim_task = None
        jobs = [AsyncJob(row, owner, self) for row in rows]
        self._in_hand = jobs
        for job in self._past_max(owner, jobs):
            await self._settle(job, "dead", self.plan.to_dead(job), error="attempts exhausted")
        return [job for job in jobs if job.state is State.PENDING]

    async def _settle(self, job: AsyncJob, kind: str, statement: Statement, event: str | None = None,
                      **fields: Any) -> bool:
        if not job.begin_settle():
            return False
        try:
            await self._send(self.plan.settle(kind, job, statement), self._hard)
        except BaseException as exc:
            return self._settle_failed(job, kind, exc)
        return self._settled(job, kind, event, fields)

    async def _fail(self, job: AsyncJob, error: str, backoff: Backoff | None = None) -> bool:
        statement, event, fields = self._failure(job, error, backoff)
        return await self._settle(job, "fail", statement, event, **fields)

    async def _extend(self, job: AsyncJob, lease: float | None, *, retry: bool) -> bool:
        call = self._extend_call(job, lease)
        if call is None:
            return False
        try:
            if retry:
                await self._send(call, self._hard)
            else:
                await self.db._send(call.request(self.db._wire, self.options, self.clock.cap()))
        except Exception as exc:
            return self._extend_failed(job, exc)
        return True

    # -- the heartbeat ----------------------------------------------------------------------------

    async def _beat(self) -> None:
        pause = Pause(self.options.retry_min, self.options.retry_max)
        period = self.options.beat
        while True:
            await asyncio.sleep(period)
            period = self.options.beat
            jobs = [job for job in self._in_hand if job.state in (State.PENDING, State.RUNNING)]
            answers = await asyncio.gather(*(self._extend(job, None, retry=False) for job in jobs),
                                           return_exceptions=True)
            for job, answer in zip(jobs, answers, strict=True):
                if not isinstance(answer, BaseException):
                    continue
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                if retryable(answer):
                    delay = pause.next()  # the next beat comes sooner, after a retry's pause
                    self.events.emit("retry", job, call="extend", error=error_text(answer), delay_ms=ms(delay))
                    period = min(period, delay)
                else:
                    self._end_with(answer)
            if all(not isinstance(a, BaseException) for a in answers):
                pause.tries = 0

    @contextlib.asynccontextmanager
    async def _running_loop(self) -> AsyncIterator[None]:
        if self._active:
            raise RuntimeError("this worker is already running")
        self._active = True
        self._loop = asyncio.get_running_loop()
        if self._stop_flag:
            self._stop_now(False)
        beat = asyncio.ensure_future(self._beat()) if self.heartbeat else None
        try:
            yield
        finally:
            if beat is not None:
                beat.cancel()
                # the heartbeat catches its own failures; whatever it was doing is over now
                await asyncio.gather(beat, return_exceptions=True)
            self._active = False
            self.events.emit("stopped")

    # -- run(handler) -----------------------------------------------------------------------------

    async def run(self, handler: Callable[[AsyncJob], Awaitable[object]]) -> None:
        """Run every job through `await handler(job)` until stopped."""
        async with self._running_loop():
            while (jobs := await self._claim()) is not None:
                await self._work(jobs, handler)
        if self.fatal is not None:
            raise self.fatal

    async def _work(self, jobs: list[AsyncJob], handler: Callable[[AsyncJob], Awaitable[object]]) -> None:
        gate = asyncio.Semaphore(self.options.runners)
        for job in jobs:
            job.task = asyncio.ensure_future(self._run_one(job, handler, gate))
        pending: set[asyncio.Future[Any]] = {job.task for job in jobs if job.task is not None}
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            while pending and not self._stopping.is_set():
                _, pending = await asyncio.wait(pending | {stopping}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(stopping)
            if pending:  # stopping: the unstarted go back at once, the running get the drain
                await asyncio.gather(*(self._settle(job, "release", self.plan.to_release(job))
                                       for job in jobs if job.state is State.PENDING), return_exceptions=True)
                hard = asyncio.ensure_future(self._hard.wait())
                try:
                    while pending and not self._hard.is_set() and (remaining := self.clock.left() or 0.0) > 0:
                        _, pending = await asyncio.wait(pending | {hard}, timeout=remaining,
                                                        return_when=asyncio.FIRST_COMPLETED)
                        pending.discard(hard)
                finally:
                    hard.cancel()
            left = [job for job in jobs if job.state in (State.PENDING, State.RUNNING)]
            if left:  # hard, or the drain ran out: cancel and give back what is left
                if self._stopping.is_set():
                    self._hard.set()
                for job in left:
                    job.cancel()
                await asyncio.gather(*(self._release_once(job) for job in left), return_exceptions=True)
                await asyncio.gather(*pending, return_exceptions=True)  # a handler that swallows its cancel holds us here
        except BaseException:  # run() itself cancelled: cancel the jobs' tasks, give their jobs back
            left = [job for job in jobs if job.state in (State.PENDING, State.RUNNING)]
            for job in jobs:
                job.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*(self._release_once(job) for job in left), return_exceptions=True)
            raise
        finally:
            stopping.cancel()
            self._in_hand = []

    async def _release_once(self, job: AsyncJob) -> None:
        """Give back a job on a hard stop: one try, no retry, within the stop's grace (the lease
        lapses if it fails)."""
        cap = self.clock.cap()
        if cap is not None and cap <= 0:
            return
        if job.begin_settle():
            try:
                await self.db._send(self._release_call(job).request(self.db._wire, self.options, cap))
            except Exception:
                job.end_settle(False)
                raise
            job.end_settle(True)
            self.events.emit("released", job)

    async def _run_one(self, job: AsyncJob, handler: Callable[[AsyncJob], Awaitable[object]],
                       gate: asyncio.Semaphore) -> None:
        async with gate:
            if self._stopping.is_set() or not job.begin():
                return
            self.events.emit("start", job)
            failure: BaseException | None = None
            try:
                await handler(job)
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if job.cancelled.is_set() and task is not None and task.cancelling():
                    task.uncancel()
                    return  # lost, or a hard stop: not ours to settle
                if task is not None and task.cancelling():
                    raise
                failure = exc  # the handler's own CancelledError: a failure like any other
            except Exception as exc:
                failure = exc
            if job.cancelled.is_set() or job.state is not State.RUNNING:
                return
            try:
                if failure is None:
                    await self._settle(job, "ack", job.to_ack())
                else:
                    await self._fail(job, error_text(failure))
            except Exception as exc:  # an answer no retry mends: it ends run
                self._end_with(exc)

    # -- enqueue ----------------------------------------------------------------------------------

    async def enqueue(self, payload: Any, *, delay: float = 0.0) -> int:
        """Put one job into the queue, ready after `delay` seconds; answers the count written, 1."""
        return int((await self.db.query(*self.enqueue_statement(payload, delay)))["affected"])

    # -- async for job in worker ------------------------------------------------------------------

    async def claim(self, *, wait: float | None = None) -> list[AsyncJob]:
        """One claim, retried through the network: the oldest ready jobs, up to `batch`, leased."""
        owner, call = self._claim_call(wait)
        return [AsyncJob(row, owner, self) for row in await self._send(call, self._stopping)]

    async def __aiter__(self) -> AsyncIterator[AsyncJob]:
        async with self._running_loop():
            while (jobs := await self._claim()) is not None:
                try:
                    for job in jobs:
                        if self._stopping.is_set():
                            break
                        if job.begin():
                            self.events.emit("start", job)
                            yield job
                finally:
                    for job in jobs:
                        if job.state is State.PENDING:
                            await self._settle(job, "release", self.plan.to_release(job))
                    self._in_hand = []
