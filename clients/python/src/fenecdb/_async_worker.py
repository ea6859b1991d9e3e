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

Every decision is `_worker_machine`'s, as for the blocking worker; this driver only sends (each
call awaited) and waits (on one `asyncio.Event`, set at each change), and runs each handler and
the heartbeat as tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, cast

from ._client import AsyncClient
from ._worker_core import Backoff, JobBase
from ._worker_machine import Effect, Gen, Hand, Machine, Send, Start, Steps, T, Wait


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
        return await self._worker._drive(self._worker._settle(self, "ack", self.to_ack()))

    async def fail(self, error: str, *, backoff: Backoff | None = None) -> bool:
        return await self._worker._drive(self._worker._fail(self, error, backoff))

    async def extend(self, lease: float | None = None) -> bool:
        return await self._worker._drive(self._worker._extend(self, lease, retry=True))


class AsyncWorker(Machine[AsyncJob, AsyncClient]):
    """`await AsyncWorker(db, "jobs").run(handler)`, or `async for job in worker: ...`; the options
    of `Worker`."""

    _job_type = AsyncJob

    def _prepare(self) -> None:
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._claim_task: asyncio.Task[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handler: Callable[[AsyncJob], Awaitable[object]] | None = None
        self._active = False

    def stop(self, *, hard: bool = False) -> None:
        """Stop from any thread (or a signal handler on the loop): see the module docstring."""
        self._stop_asked = True
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

    # -- the effects ------------------------------------------------------------------------------

    async def _drive(self, gen: Gen[T]) -> T:
        steps = Steps(gen)
        while (effect := steps.next()) is not None:
            await self._answer(steps, effect)
        return steps.value  # type: ignore[return-value]  # set when the generator returned

    async def _answer(self, steps: Steps[Any], effect: Effect) -> None:
        try:
            steps.answer = await self._perform(effect)
        except BaseException as exc:  # a cancel too: thrown into the machine, which decides
            steps.error = exc

    async def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Send):
            sent = self.db._send(effect.call.request(self.db._wire, self.options, effect.cap))
            if not effect.held:
                return await sent
            # a held claim runs as a task of its own, so that a stop can cancel it alone: cancelling
            # a request closes its connection, and the server gives the claim up
            task = self._claim_task = asyncio.ensure_future(sent)
            try:
                return await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # run itself is cancelled
                raise ConnectionError("the claim was given up: the worker is stopping") from None
            finally:
                self._claim_task = None
        if isinstance(effect, Wait):
            loop = asyncio.get_running_loop()
            end = None if effect.seconds is None else loop.time() + effect.seconds
            while not effect.ready():
                left = None if end is None else end - loop.time()
                if left is not None and left <= 0:
                    break
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
            return None
        if isinstance(effect, Start):
            job = cast(AsyncJob, effect.job)
            job.task = asyncio.ensure_future(self._run_one(job))
            self._tasks.add(job.task)
            job.task.add_done_callback(self._tasks.discard)
            return None
        raise AssertionError(f"no effect {effect!r} outside iteration")

    def _wake(self) -> None:
        self._changed.set()

    def _give_up_claim(self) -> None:
        if self._claim_task is not None:
            self._claim_task.cancel()

    @contextlib.asynccontextmanager
    async def _running_loop(self) -> AsyncIterator[None]:
        if self._active:
            raise RuntimeError("this worker is already running")
        self._active = True
        self._loop = asyncio.get_running_loop()
        if self._stop_asked:
            self._stop_now(False)
        self._beating = self.heartbeat
        beat = asyncio.ensure_future(self._drive(self._beat())) if self._beating else None
        try:
            yield
        finally:
            self._beating = False
            if beat is not None:
                beat.cancel()  # an extend in flight is given up: the job is settled or given back
                await asyncio.gather(beat, return_exceptions=True)
            self._active = False
            self.events.emit("stopped")

    async def _run_one(self, job: AsyncJob) -> None:
        assert self._handler is not None
        try:
            failure: BaseException | None = None
            try:
                await self._handler(job)
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    if not job.cancelled.is_set():
                        raise
                    task.uncancel()  # lost, or a hard stop: not ours to settle
                failure = exc  # else the handler's own CancelledError: a failure like any other
            except Exception as exc:
                failure = exc
            await self._drive(self._finish(job, failure))
        finally:
            self._ended()

    # -- the public loops -------------------------------------------------------------------------

    async def run(self, handler: Callable[[AsyncJob], Awaitable[object]]) -> None:
        """Run every job through `await handler(job)` until stopped."""
        self._handler = handler
        async with self._running_loop():
            try:
                await self._drive(self._run())
                # a cancelled handler that swallows its cancel holds us here
                await asyncio.gather(*self._tasks, return_exceptions=True)
            except BaseException:  # run() itself cancelled: cancel the jobs' tasks, give their jobs back
                with contextlib.suppress(Exception):
                    await self._drive(self._give_up())
                raise
        if self.fatal is not None:
            raise self.fatal

    async def enqueue(self, payload: Any, *, delay: float = 0.0) -> int:
        """Put one job into the queue, ready after `delay` seconds; answers the count written, 1."""
        return int((await self.db.query(*self.enqueue_statement(payload, delay)))["affected"])

    async def claim(self, *, wait: float | None = None) -> list[AsyncJob]:
        """One claim, retried through the network: the oldest ready jobs, up to `batch`, leased."""
        return await self._drive(self._claim_once(wait))

    async def __aiter__(self) -> AsyncIterator[AsyncJob]:
        async with self._running_loop():
            steps = Steps(self._iterate())
            while (effect := steps.next()) is not None:
                if not isinstance(effect, Hand):
                    await self._answer(steps, effect)
                    continue
                try:
                    yield cast(AsyncJob, effect.job)
                except GeneratorExit as exc:  # the caller's loop ended: the machine gives the rest back
                    steps.error = exc
