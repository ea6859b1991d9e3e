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
the call is retried after a jittered pause under the same Idempotency-Key. Any
other refusal (a 404 queue, a 403 policy, a 401 token) stops the worker, and `run` raises it.

`stop()` (any thread; `handle_signals()` maps SIGTERM/SIGINT to it) gives up a held claim at
once (`_abort`), gives the unstarted jobs back at once, lets running ones finish within
`drain_timeout`, then cancels the rest and returns; no call is retried past that deadline, so
`run` returns within `drain_timeout` + 1 s even while the server is down. `stop(hard=True)`
cancels at once. A
thread cannot be killed: "cancel" sets `job.cancelled` and gives the job back, and whatever
the handler does after that is not acked. `for job in worker:` is the same loop with the
settling in the caller's hands (`job.ack()`, `job.fail(error)`).

Every decision is `_worker_machine`'s; this driver only sends (the calling thread blocks) and
waits (on one `threading.Condition`), runs each handler on a thread of its own and the heartbeat
on another.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, cast

from ._abort import AbortableSender
from ._client import Client
from ._worker_core import Backoff, JobBase
from ._worker_machine import Effect, Gen, Hand, Machine, Send, Start, Steps, T, Wait


class Job(JobBase):
    """A leased job of a `Worker`: `payload`, `attempts`, `lost`, `cancelled`; `ack()`, `fail()`, `extend()`.

    `cancelled` is a `threading.Event` set when the lease was lost or the worker stops hard: a
    slow handler waits on it (`job.cancelled.wait(5)`) rather than sleeping."""

    def __init__(self, row: dict[str, Any], owner: str, worker: Worker) -> None:
        super().__init__(row, owner, worker.plan)
        self._worker = worker

    def ack(self) -> bool:
        """Done: deleted (or marked done with `keep_done`). False when it is no longer ours."""
        return self._worker._drive(self._worker._settle(self, "ack", self.to_ack()))

    def fail(self, error: str, *, backoff: Backoff | None = None) -> bool:
        """Back to the queue after the backoff, or dead at `max_attempts`. False when no longer ours."""
        return self._worker._drive(self._worker._fail(self, error, backoff))

    def extend(self, lease: float | None = None) -> bool:
        """Move the lease on by `lease` seconds (the worker's lease by default)."""
        return self._worker._drive(self._worker._extend(self, lease, retry=True))


class Worker(Machine[Job, Client]):
    """Claims batches of leased jobs from one queue and runs them (see the module docstring).

    The options are conformance/worker-contract.json's, times in seconds: `backoff` is a function
    `attempts -> seconds` (attempts² by default), `heartbeat=0` turns the heartbeat off, a held
    claim's call gets `wait + timeout`, and the pause before a call is sent again is random below
    `retry_min`, doubling at each failure in a row up to `retry_max`. `on_event` receives every
    event as a dict (from the worker's threads). `dead_after` is the old name of `max_attempts`."""

    _job_type = Job

    def _prepare(self) -> None:
        self._cv = threading.Condition()
        self._sender: AbortableSender | None = None
        self._handler: Callable[[Job], object] | None = None

    def stop(self, *, hard: bool = False) -> None:
        """Stop from any thread: give up a held claim, give back unstarted jobs, drain (or not: `hard`)."""
        self._stop_now(hard)

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

    # -- the effects ------------------------------------------------------------------------------

    def _drive(self, gen: Gen[T]) -> T:
        steps = Steps(gen)
        while (effect := steps.next()) is not None:
            self._answer(steps, effect)
        return steps.value  # type: ignore[return-value]  # set when the generator returned

    def _answer(self, steps: Steps[Any], effect: Effect) -> None:
        try:
            steps.answer = self._perform(effect)
        except BaseException as exc:  # noqa: B036 - thrown into the machine, which decides
            steps.error = exc

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Send):
            request = effect.call.request(self.db._wire, self.options, effect.cap)
            sender = self._sender if effect.held else None
            return sender.send(request) if sender is not None else self.db._send(request)
        if isinstance(effect, Wait):
            with self._cv:
                self._cv.wait_for(effect.ready, effect.seconds)
            return None
        if isinstance(effect, Start):
            threading.Thread(target=self._run_one, args=(effect.job,), name=f"{self.name}-job-{effect.job.id}",
                             daemon=True).start()
            return None
        raise AssertionError(f"no effect {effect!r} outside iteration")

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def _give_up_claim(self) -> None:
        sender = self._sender
        if sender is not None:
            sender.abort()

    @contextlib.contextmanager
    def _running_loop(self) -> Iterator[None]:
        if self._sender is not None:
            raise RuntimeError("this worker is already running")
        self._sender = AbortableSender(self.db)
        if self._stopping:
            self._sender.abort()
        self._beating = self.heartbeat
        beat = threading.Thread(target=self._drive, args=(self._beat(),), name=f"{self.name}-heartbeat",
                                daemon=True)
        if self._beating:
            beat.start()
        try:
            yield
        finally:
            self._beating = False
            self._wake()
            if beat.is_alive():
                beat.join()
            self._sender = None
            self.events.emit("stopped")

    def _run_one(self, job: Job) -> None:
        assert self._handler is not None
        try:
            failure: BaseException | None = None
            try:
                self._handler(job)
            except BaseException as exc:  # noqa: B036 - a handler's SystemExit fails its job, never the worker
                failure = exc
            self._drive(self._finish(job, failure))
        finally:
            self._ended()

    # -- the public loops -------------------------------------------------------------------------

    def run(self, handler: Callable[[Job], object]) -> None:
        """Run every job through `handler(job)` until stopped (see the module docstring)."""
        self._handler = handler
        with self._running_loop():
            try:
                self._drive(self._run())
            except BaseException:  # a KeyboardInterrupt outside handle_signals, say: nothing stays leased
                self._drive(self._give_up())
                raise
        if self.fatal is not None:
            raise self.fatal

    def enqueue(self, payload: Any, *, delay: float = 0.0) -> int:
        """Put one job into the queue, ready after `delay` seconds; answers the count written, 1."""
        return int(self.db.query(*self.enqueue_statement(payload, delay))["affected"])

    def claim(self, *, wait: float | None = None) -> list[Job]:
        """One claim, retried through the network: the oldest ready jobs, up to `batch`, leased."""
        return self._drive(self._claim_once(wait))

    def __iter__(self) -> Iterator[Job]:
        with self._running_loop():
            steps = Steps(self._iterate())
            while (effect := steps.next()) is not None:
                if not isinstance(effect, Hand):
                    self._answer(steps, effect)
                    continue
                try:
                    yield cast(Job, effect.job)
                except GeneratorExit as exc:  # the caller's loop ended: the machine gives the rest back
                    steps.error = exc
