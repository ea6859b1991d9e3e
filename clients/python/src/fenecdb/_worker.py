"""The blocking worker: the loop of the "Job queues" page on threads (docs/workers.md).

    worker = Worker(db, "jobs", batch=10, concurrency=4)
    worker.run(handle)            # until worker.stop() (from any thread) or a signal

`run(handler)` claims a batch (held at the server for `wait`), runs each job through
`handler(job)` on a pool of `concurrency` threads, acks it when the handler returns and fails
it (back-off, or dead past `max_attempts`) when it raises, and claims again. A job claimed
with its attempts past `max_attempts` is dead-lettered without running. One heartbeat thread
extends every job in hand each `heartbeat` (a third of the lease); a 412 there means the lease
was lost: `job.lost` turns true, `job.cancelled` is set, and the worker settles it no more.

The server going away (connection refused or cut, a timeout, a 5xx, a 503) never ends `run`:
the call is retried after a jittered pause under the same Idempotency-Key (`_worker_core`). Any
other refusal (a 404 queue, a 403 policy, a 401 token) stops the worker, and `run` raises it.

`stop()` (any thread; `handle_signals()` maps SIGTERM/SIGINT to it) gives up a held claim at
once (`_abort`), gives the unstarted jobs back at once, lets running ones finish within
`drain_timeout`, then cancels the rest and returns; no call is retried past that deadline, so
`run` returns within `drain_timeout` + 1 s even while the server is down. `stop(hard=True)`
cancels at once. A
thread cannot be killed: "cancel" sets `job.cancelled` and gives the job back, and whatever
the handler does after that is not acked. `for job in worker:` is the same loop with the
settling in the caller's hands (`job.ack()`, `job.fail(error)`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from ._abort import AbortableSender
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
    from ._client import Client
    from ._query import Statement


class Job(JobBase):
    """A leased job of a `Worker`: `payload`, `attempts`, `lost`, `cancelled`; `ack()`, `fail()`, `extend()`.

    `cancelled` is a `threading.Event` set when the lease was lost or the worker stops hard: a
    slow handler waits on it (`job.cancelled.wait(5)`) rather than sleeping."""

    def __init__(self, row: dict[str, Any], owner: str, worker: Worker) -> None:
        super().__init__(row, owner, worker.plan)
        self._worker = worker

    def ack(self) -> bool:
        """Done: deleted (or marked done with `keep_done`). False when it is no longer ours."""
        return self._worker._settle(self, "ack", self.to_ack())

    def fail(self, error: str, *, backoff: Backoff | None = None) -> bool:
        """Back to the queue after the back-off, or dead at `max_attempts`. False when no longer ours."""
        return self._worker._fail(self, error, backoff)

    def extend(self, lease: float | None = None) -> bool:
        """Move the lease on by `lease` seconds (the worker's lease by default)."""
        return self._worker._extend(self, lease, retry=True)


class Worker(WorkerCore):
    """Claims batches of leased jobs from one queue and runs them (see the module docstring).

    Times are seconds. `backoff` is a step (a failed job waits `backoff * attempts²`) or a hook
    `attempts -> seconds`; `on_event` receives every event as a dict (from the worker's threads);
    `timeout` bounds each call, 10 s by default (a held claim gets `wait + timeout`, `wait` + 5 s by default);
    `retry` is (first, most): the pause before a call is sent again is random up to `first`, doubled at each
    failure in a row, `most` at most. `dead_after` is the old name of `max_attempts`, and `heartbeat=False`
    turns the heartbeat off."""

    def __init__(self, db: Client, queue: str, *, name: str | None = None, batch: int = 10,
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
        self._stopping = threading.Event()
        self._hard = threading.Event()
        self._cv = threading.Condition()
        self._in_hand: list[Job] = []
        self._running = 0
        self._sender: AbortableSender | None = None

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self, *, hard: bool = False) -> None:
        """Stop from any thread: give up a held claim, give back unstarted jobs, drain (or not: `hard`)."""
        self.clock.start(hard)
        self._stopping.set()
        if hard:
            self._hard.set()
        sender = self._sender
        if sender is not None:
            sender.abort()
        with self._cv:
            if hard:
                for job in self._in_hand:
                    job.cancelled.set()
            self._cv.notify_all()

    @contextlib.contextmanager
    def handle_signals(self, *signals: int, hard: tuple[int, ...] = ()) -> Iterator[Worker]:
        """While inside, SIGTERM and SIGINT (or the given signals) stop the worker; those in `hard` hard.

        The handler only writes the signal to a pipe; a thread reads it and calls `stop()`, so
        no lock the interrupted main thread holds is ever taken inside the handler."""
        wanted = tuple(dict.fromkeys((*(signals or (signal.SIGTERM, signal.SIGINT)), *hard)))
        read, write = os.pipe()

        def watch() -> None:
            while data := os.read(read, 1):
                self.stop(hard=data[0] in hard)

        def on_signal(signum: int, frame: FrameType | None) -> None:
            os.write(write, bytes([signum]))

        watcher = threading.Thread(target=watch, name=f"{self.name}-signals", daemon=True)
        watcher.start()
        previous = {s: signal.signal(s, on_signal) for s in wanted}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            os.close(write)
            watcher.join()
            os.close(read)

    # -- sending ----------------------------------------------------------------------------------

    def _send(self, call: Call, until: threading.Event, sender: AbortableSender | None = None) -> Any:
        """Send `call`, retrying the network and 5xx until it is answered, `until` is set or a
        stop's deadline passes (each try's timeout cut to what the stop leaves)."""
        pause = Pause(self.options.retry_min, self.options.retry_max)
        while True:
            try:
                request = call.request(self.db._wire, self.options, self.clock.cap())
                return sender.send(request) if sender is not None else self.db._send(request)
            except Exception as exc:
                if self._pause(self._retry_pause(pause, call, exc, until.is_set()), until):
                    raise Stopped(call.kind) from exc

    def _pause(self, delay: float, until: threading.Event) -> bool:
        """Wait out a retry pause: True when `until` was set or a stop's deadline came first.
        A stop during the pause wakes it, so the deadline it brings is heeded at once."""
        end = time.monotonic() + delay
        while True:
            limit = self._pause_limit(end - time.monotonic())
            if until.is_set() or limit is None:
                return True
            if limit <= 0:
                return False
            (until if self._stopping.is_set() else self._stopping).wait(limit)

    def _claim(self, sender: AbortableSender | None) -> list[Job] | None:
        """One claim (held), or None once stopping."""
        if self._stopping.is_set():
            return None
        owner, call = self._claim_call()
        try:
            rows = self._send(call, self._stopping, sender)
        except Stopped:
            return None
        except Exception as exc:
            if self._stopping.is_set() and retryable(exc):
                return None
            raise
        jobs = [Job(row, owner, self) for row in rows]
        with self._cv:
            self._in_hand = jobs
        for job in self._past_max(owner, jobs):
            self._dead_letter(job)
        return [job for job in jobs if job.state is State.PENDING]

    def _settle(self, job: Job, kind: str, statement: Statement, event: str | None = None, **fields: Any) -> bool:
        if not job.begin_settle():
            return False
        try:
            self._send(self.plan.settle(kind, job, statement), self._hard)
        except Exception as exc:
            return self._settle_failed(job, kind, exc)
        return self._settled(job, kind, event, fields)

    def _fail(self, job: Job, error: str, backoff: Backoff | None = None) -> bool:
        statement, event, fields = self._failure(job, error, backoff)
        return self._settle(job, "fail", statement, event, **fields)

    def _dead_letter(self, job: Job) -> None:
        self._settle(job, "dead", self.plan.to_dead(job), error="attempts exhausted")

    def _release(self, job: Job) -> None:
        self._settle(job, "release", self.plan.to_release(job))

    def _extend(self, job: Job, lease: float | None, *, retry: bool) -> bool:
        call = self._extend_call(job, lease)
        if call is None:
            return False
        try:
            if retry:
                self._send(call, self._hard)
            else:
                self.db._send(call.request(self.db._wire, self.options, self.clock.cap()))
        except Exception as exc:
            return self._extend_failed(job, exc)
        return True

    # -- the heartbeat ----------------------------------------------------------------------------

    def _beat(self, done: threading.Event) -> None:
        pause = Pause(self.options.retry_min, self.options.retry_max)
        period = self.options.beat
        while not done.wait(period):
            period = self.options.beat
            with self._cv:
                jobs = [job for job in self._in_hand if job.state in (State.PENDING, State.RUNNING)]
            for job in jobs:
                if done.is_set():
                    return
                try:
                    self._extend(job, None, retry=False)
                    pause.tries = 0
                except Exception as exc:
                    if not retryable(exc):
                        self._end_with(exc)
                        return
                    delay = pause.next()  # the next beat comes sooner, after a retry's pause
                    self.events.emit("retry", job, call="extend", error=error_text(exc), delay_ms=ms(delay))
                    period = min(period, delay)
                    break

    @contextlib.contextmanager
    def _running_loop(self) -> Iterator[AbortableSender]:
        if self._sender is not None:
            raise RuntimeError("this worker is already running")
        sender = self._sender = AbortableSender(self.db)
        if self._stopping.is_set():
            sender.abort()
        done = threading.Event()
        beat = threading.Thread(target=self._beat, args=(done,), name=f"{self.name}-heartbeat", daemon=True)
        if self.heartbeat:
            beat.start()
        try:
            yield sender
        finally:
            done.set()
            if beat.is_alive():
                beat.join()
            self._sender = None
            self.events.emit("stopped")

    # -- run(handler) -----------------------------------------------------------------------------

    def run(self, handler: Callable[[Job], object]) -> None:
        """Run every job through `handler(job)` until stopped (see the module docstring)."""
        with self._running_loop() as sender:
            try:
                while (jobs := self._claim(sender)) is not None:
                    self._work(jobs, handler)
            except BaseException:  # a KeyboardInterrupt outside handle_signals, say: nothing stays leased
                self._give_up()
                raise
        if self.fatal is not None:
            raise self.fatal

    def _give_up(self) -> None:
        self.stop(hard=True)
        with self._cv:
            left = [job for job in self._in_hand if job.state in (State.PENDING, State.RUNNING)]
            self._in_hand = []
        for job in left:
            with contextlib.suppress(Exception):
                self._settle_once(job)

    def _work(self, jobs: list[Job], handler: Callable[[Job], object]) -> None:
        todo = deque(jobs)
        runners = self.options.runners
        while todo:
            with self._cv:
                self._cv.wait_for(lambda: self._running < runners or self._stopping.is_set())
                if self._stopping.is_set():
                    break
                job = todo.popleft()
                if not job.begin():
                    continue
                self._running += 1
            threading.Thread(target=self._run_one, args=(job, handler), name=f"{self.name}-job-{job.id}",
                             daemon=True).start()
        for job in todo:  # stopping: the unstarted go back at once (retried up to the stop's deadline)
            self._release(job)
        with self._cv:
            while self._running and not self._hard.is_set():
                time_left = self.clock.left()
                if time_left is None:
                    self._cv.wait()
                elif time_left <= 0 or not self._cv.wait(time_left) and self.clock.passed():
                    break
            left = [job for job in self._in_hand if job.state in (State.PENDING, State.RUNNING)]
            self._in_hand = []
        if left:  # hard stop, or the drain ran out: cancel and give back what is left
            self._hard.set()
            for job in left:
                job.cancelled.set()
            for job in left:
                with contextlib.suppress(Exception):
                    self._settle_once(job)

    def _settle_once(self, job: Job) -> None:
        """Give back a job on a hard stop: one try, no retry, within the stop's grace (the lease
        lapses if it fails)."""
        job.cancelled.set()
        cap = self.clock.cap()
        if cap is not None and cap <= 0:
            return
        if job.begin_settle():
            try:
                self.db._send(self._release_call(job).request(self.db._wire, self.options, cap))
            except Exception:
                job.end_settle(False)
                raise
            job.end_settle(True)
            self.events.emit("released", job)

    def _run_one(self, job: Job, handler: Callable[[Job], object]) -> None:
        try:
            self.events.emit("start", job)
            failure: BaseException | None = None
            try:
                handler(job)
            except BaseException as exc:  # noqa: B036 - a handler's SystemExit fails its job, never the worker
                failure = exc
            if job.cancelled.is_set() or job.state is not State.RUNNING:
                return
            if failure is None:
                self._settle(job, "ack", job.to_ack())
            else:
                self._fail(job, error_text(failure))
        except Exception as exc:  # an answer no retry mends: it ends run
            self._end_with(exc)
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify_all()

    # -- enqueue ----------------------------------------------------------------------------------

    def enqueue(self, payload: Any, *, delay: float = 0.0) -> int:
        """Put one job into the queue, ready after `delay` seconds; answers the count written, 1."""
        return int(self.db.query(*self.enqueue_statement(payload, delay))["affected"])

    # -- for job in worker ------------------------------------------------------------------------

    def claim(self, *, wait: float | None = None) -> list[Job]:
        """One claim, retried through the network: the oldest ready jobs, up to `batch`, leased."""
        owner, call = self._claim_call(wait)
        return [Job(row, owner, self) for row in self._send(call, self._stopping)]

    def __iter__(self) -> Iterator[Job]:
        with self._running_loop() as sender:
            while (jobs := self._claim(sender)) is not None:
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
                            self._release(job)
                    with self._cv:
                        self._in_hand = []
