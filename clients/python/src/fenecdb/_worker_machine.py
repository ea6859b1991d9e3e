"""The worker's one state machine: every decision of `Worker` and `AsyncWorker`, written once.

What to claim, when to beat, what to settle and how, the stop's deadline, the retry rule and the
events are decided here, in generators that never wait and never send: each yields an *effect*
and is resumed with its outcome (an answer, or an exception thrown in):

    Send(call, cap, held)   send one call, its timeout cut to `cap`; `held` a claim a stop gives up
    Wait(ready, seconds)    until `ready()` or `seconds` (None: no limit); woken by `_wake()`
    Start(job)              run the handler on `job` (a thread, a task); `_ended(job)` when it is over
    Hand(job)               `for job in worker`: give the caller `job`

A driver (`_worker` on threads, `_async_worker` on asyncio) turns each effect into its I/O or its
waiting and resumes the generator (`Steps`); it holds no rule of its own. So both workers claim,
beat, settle, retry, drain and stop alike, and conformance/worker-contract.json is met, or
missed, by both at once.

State shared between the driver's threads (the run loop, the heartbeat, the handlers, `stop()`):
the flags `_stopping` and `_hard` only ever turn true; `_in_hand` is replaced, never changed in
place; `_running` changes under `_lock`. Whoever changes one calls `_wake()`, and a `Wait` checks
its `ready()` again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ._query import QueryBase, Statement, expr
from ._worker_core import (
    EXHAUSTED,
    LIVE,
    Backoff,
    Call,
    Events,
    JobBase,
    OnEvent,
    Options,
    Pause,
    Plan,
    State,
    StopClock,
    error_text,
    lease_lost,
    ms,
    new_name,
    retryable,
    squared,
)

T = TypeVar("T")
J = TypeVar("J", bound=JobBase)

SETTLED_EVENT = {"ack": "done", "fail": "failed", "dead": "dead", "release": "released"}


@dataclass(frozen=True)
class Send:
    call: Call
    cap: float | None
    held: bool = False


@dataclass(frozen=True)
class Wait:
    ready: Callable[[], bool]
    seconds: float | None


@dataclass(frozen=True)
class Start:
    job: JobBase


@dataclass(frozen=True)
class Hand:
    job: JobBase


Effect = Send | Wait | Start | Hand
Gen = Generator[Effect, Any, T]


class Steps(Generic[T]):
    """Resumes a generator of effects: `next()` is the next effect (None once it returned
    `value`); between two, the driver sets `answer` or `error`, the outcome of the last one."""

    def __init__(self, gen: Gen[T]) -> None:
        self.gen = gen
        self.answer: Any = None
        self.error: BaseException | None = None
        self.value: T | None = None

    def next(self) -> Effect | None:
        error, self.error = self.error, None
        try:
            return self.gen.throw(error) if error is not None else self.gen.send(self.answer)
        except StopIteration as end:
            self.value = end.value
            return None


class Stopped(Exception):
    """A call given up because the worker is stopping."""


class Database(Protocol):
    def collection(self, name: str) -> QueryBase: ...


D = TypeVar("D", bound=Database)


class Machine(Generic[J, D]):
    """A worker but for how it waits and sends (see the module docstring): `db` a client, `queue`
    the queue's collection, the options conformance/worker-contract.json names (`dead_after` the
    old name of `max_attempts`). A driver sets `_job_type` and gives `_prepare`, `_wake`,
    `_give_up_claim` and `stop`."""

    _job_type: Callable[[dict[str, Any], str, Any], J]

    def __init__(self, db: D, queue: str, *, name: str | None = None, batch: int = 10,
                 concurrency: int = 1, lease: float = 30.0, wait: float = 30.0,
                 heartbeat: float | None = None, max_attempts: int = 5, dead_after: int | None = None,
                 backoff: Backoff = squared, drain_timeout: float = 30.0, timeout: float = 10.0,
                 retry_min: float = 0.1, retry_max: float = 5.0, keep_done: bool = False,
                 on_event: OnEvent | None = None) -> None:
        self.db = db
        self.options = options = Options(
            queue=queue, name=name or new_name(), batch=batch, concurrency=concurrency, lease=lease, wait=wait,
            heartbeat=heartbeat, max_attempts=max_attempts if dead_after is None else dead_after, backoff=backoff,
            drain_timeout=drain_timeout, timeout=timeout, retry_min=retry_min, retry_max=retry_max,
            keep_done=keep_done)
        self.plan = Plan(db.collection(queue), options)
        self.heartbeat = options.beating
        self.events = Events(options.name, on_event)
        self.clock = StopClock(options.drain_timeout)
        self.fatal: BaseException | None = None  # the answer that ends run, raised once stopped
        self._stop_asked = False  # stop() was called (an asyncio worker's may reach the loop later)
        self._stopping = False
        self._hard = False
        self._in_hand: list[J] = []
        self._running = 0
        self._beating = False  # the heartbeat goes on while true
        self._lock = threading.Lock()
        self._primary = getattr(db, "url", None)  # the client's primary last seen: a change is a `primary` event
        self._prepare()

    @property
    def stopped(self) -> bool:
        return self._stop_asked

    @property
    def name(self) -> str:
        return self.options.name

    def to_claim(self, owner: str) -> Statement:
        return self.plan.to_claim(owner)

    def enqueue_statement(self, payload: Any, delay: float = 0.0) -> Statement:
        """The contract's enqueue: `put <queue> {payload: $1, run_at: now() + $2, attempts: $3}`."""
        if not delay >= 0:
            raise ValueError(f"delay is seconds, from 0 (got {delay!r})")
        return self.plan.query.to_insert({"payload": payload, "run_at": expr("now() + ?", ms(delay)), "attempts": 0})

    # -- what a driver gives ----------------------------------------------------------------------

    def _prepare(self) -> None:
        """The driver's own state, made last in the constructor."""
        raise NotImplementedError

    def _wake(self) -> None:
        """Something a `Wait` may be waiting for changed."""
        raise NotImplementedError

    def _give_up_claim(self) -> None:
        """End a held claim in flight at once (its send raises a ConnectionError)."""
        raise NotImplementedError

    # -- stopping ---------------------------------------------------------------------------------

    def _stop_now(self, hard: bool) -> None:
        """The stop, on the driver's side of the threads: a deadline, no more claims, a held claim
        given up; a hard stop cancels every job in hand."""
        self.clock.start(hard)
        self._stop_asked = self._stopping = True
        if hard:
            self._hard = True
            for job in self._in_hand:
                if job.state in LIVE:
                    job.cancel()
        self._give_up_claim()
        self._wake()

    def _end_with(self, exc: BaseException) -> None:
        """`exc` ends run: kept (the first one) and the worker stopped gracefully."""
        if self.fatal is None:
            self.fatal = exc
        self.stop()

    def stop(self, *, hard: bool = False) -> None:  # each driver's own: where the stop is carried out
        raise NotImplementedError

    def _is_stopping(self) -> bool:
        return self._stopping

    def _is_hard(self) -> bool:
        return self._hard

    # -- sending, with the retry rule -------------------------------------------------------------

    def _sending(self, send: Send) -> Gen[Any]:
        """One send; then, whatever came of it, a `primary` event if the client's primary changed
        meanwhile (a replica named it, or the one before could not be reached)."""
        try:
            return (yield send)
        finally:
            self._seen_primary()

    def _seen_primary(self) -> None:
        url = getattr(self.db, "url", None)
        with self._lock:
            if url is None or url == self._primary:
                return
            self._primary = url
        self.events.emit("primary", url=url)

    def _send(self, call: Call, until: Callable[[], bool], held: bool = False) -> Gen[Any]:
        """Send `call`, retrying the network and 5xx until it is answered, `until()` or a stop's
        deadline passes (each try's timeout cut to what the stop leaves): then `Stopped`. Any
        other failure is raised as it is."""
        pause = Pause(self.options.retry_min, self.options.retry_max)
        while True:
            try:
                return (yield from self._sending(Send(call, self.clock.cap(), held)))
            except Exception as exc:
                if not retryable(exc):
                    raise
                if until() or self.clock.passed():
                    raise Stopped(call.kind) from exc
                delay = pause.next()
                self.events.emit("retry", call.job, call=call.kind, error=error_text(exc), delay_ms=ms(delay))
                if (yield from self._pause(delay, until)):
                    raise Stopped(call.kind) from exc

    def _pause(self, delay: float, until: Callable[[], bool]) -> Gen[bool]:
        """Wait out a retry pause: True when `until()` or a stop's deadline came first. A stop
        during the pause wakes it, so the deadline it brings is heeded at once."""
        end = time.monotonic() + delay
        while True:
            limit = end - time.monotonic()
            left = self.clock.left()
            if left is not None:
                if left <= 0:
                    return True
                limit = min(limit, left)
            if until():
                return True
            if limit <= 0:
                return False
            yield Wait(until if self._stopping else self._is_stopping, limit)

    # -- claiming ---------------------------------------------------------------------------------

    def _claim_call(self, wait: float | None = None) -> tuple[str, Call]:
        """A new claim token and its claim (held for `wait` when given, else the options' wait)."""
        owner = self.plan.next_owner()
        call = self.plan.claim(owner)
        if wait is not None:
            call = Call(call.kind, call.text, call.params, call.key, wait)
        return owner, call

    def _claim_once(self, wait: float | None) -> Gen[list[J]]:
        """The public `claim()`: one claim, retried through the network, its jobs left to the caller."""
        owner, call = self._claim_call(wait)
        rows = yield from self._send(call, self._is_stopping)
        return [self._job_type(row, owner, self) for row in rows]

    def _claim(self) -> Gen[list[J] | None]:
        """The run's next claim (held, given up by a stop): its jobs to run, or None once stopping.
        The jobs it took are in hand; those claimed past `max_attempts` are dead-lettered unrun."""
        if self._stopping:
            return None
        owner, call = self._claim_call()
        try:
            rows = yield from self._send(call, self._is_stopping, held=True)
        except Stopped:
            return None
        except Exception as exc:
            if self._stopping and retryable(exc):
                return None
            raise
        jobs = [self._job_type(row, owner, self) for row in rows]
        self._in_hand = jobs
        if jobs:
            self.events.emit("claimed", owner=owner, count=len(jobs))
        for job in jobs:
            if job.attempts > self.options.max_attempts:
                yield from self._settle(job, "dead", self.plan.to_dead(job), error=EXHAUSTED)
        return [job for job in jobs if job.state is State.PENDING]

    # -- settling ---------------------------------------------------------------------------------

    def _settle(self, job: JobBase, kind: str, statement: Statement, event: str | None = None,
                **fields: Any) -> Gen[bool]:
        """Ack, fail, dead-letter or give back `job`, once: False when it is no longer ours (its
        lease went to another claim: a `lost` event) or the worker stopped first."""
        if not job.begin_settle():
            return False
        try:
            yield from self._send(self.plan.settle(kind, job, statement), self._is_hard)
        except BaseException as exc:
            job.end_settle(False)
            if lease_lost(exc):
                job.cancelled.set()
                self.events.emit("lost", job, call=kind)
                return False
            if isinstance(exc, Stopped):
                return False
            raise
        job.end_settle(True)
        self.events.emit(event or SETTLED_EVENT[kind], job, **fields)
        return True

    def _fail(self, job: JobBase, error: str, backoff: Backoff | None = None) -> Gen[bool]:
        """Back to the queue after the backoff the worker works out, sent as a parameter; dead at
        `max_attempts` (a `dead` event instead of `failed`)."""
        statement, delay = self.plan.failure(job, error, backoff)
        if delay is None:
            return (yield from self._settle(job, "fail", statement, "dead", error=error))
        return (yield from self._settle(job, "fail", statement, error=error, delay_ms=ms(delay)))

    def _release(self, job: JobBase) -> Gen[bool]:
        return (yield from self._settle(job, "release", self.plan.to_release(job)))

    def _release_once(self, job: JobBase) -> Gen[None]:
        """Give back a job at the drain's end or on a hard stop: one try, no retry, within the
        stop's grace (the lease lapses if it fails)."""
        job.cancelled.set()
        cap = self.clock.cap()
        if cap is not None and cap <= 0 or not job.begin_settle():
            return
        try:
            yield from self._sending(Send(self.plan.settle("release", job, self.plan.to_release(job)), cap))
        except BaseException:
            job.end_settle(False)
            raise
        job.end_settle(True)
        self.events.emit("released", job)

    def _extend(self, job: JobBase, lease: float | None, *, retry: bool) -> Gen[bool]:
        """Move `job`'s lease on: False when it is settled, lost (cancelled, a `lost` event) or the
        worker stopped. Without `retry` (the heartbeat's) a failure is raised."""
        if job.state not in LIVE:
            return False
        call = self.plan.settle("extend", job, self.plan.to_extend(job, lease), job.next_beat())
        try:
            if retry:
                yield from self._send(call, self._is_hard)
            else:
                yield from self._sending(Send(call, self.clock.cap()))
        except Exception as exc:
            if lease_lost(exc):
                if job.mark_lost():
                    job.cancel()
                    self.events.emit("lost", job, call="extend")
                return False
            if isinstance(exc, Stopped):
                return False
            raise
        return True

    # -- the heartbeat ----------------------------------------------------------------------------

    def _beat(self) -> Gen[None]:
        """Each `heartbeat`, extend every job in hand, started or not, until `_beating` turns false.
        A failure the retry rule mends brings the next beat sooner; any other ends run."""
        pause = Pause(self.options.retry_min, self.options.retry_max)
        period = self.options.beat
        while True:
            yield Wait(self._beat_over, period)
            period = self.options.beat
            for job in [job for job in self._in_hand if job.state in LIVE]:
                if self._beat_over():
                    return
                try:
                    yield from self._extend(job, None, retry=False)
                    pause.tries = 0
                except Exception as exc:
                    if not retryable(exc):
                        self._end_with(exc)
                        return
                    delay = pause.next()
                    self.events.emit("retry", job, call="extend", error=error_text(exc), delay_ms=ms(delay))
                    period = min(period, delay)
                    break
            if self._beat_over():
                return

    def _beat_over(self) -> bool:
        return not self._beating

    # -- run(handler) -----------------------------------------------------------------------------

    def _run(self) -> Gen[None]:
        while (jobs := (yield from self._claim())) is not None:
            yield from self._work(jobs)

    def _work(self, jobs: Sequence[J]) -> Gen[None]:
        """Start the batch's jobs, `concurrency` at a time in its order; on a stop give the
        unstarted back at once and drain the running until the deadline, then cancel and give back
        what is left. A slot is freed only once its job is settled (`_ended`)."""
        todo = deque(jobs)
        runners = self.options.runners
        while todo:
            yield Wait(lambda: self._running < runners or self._stopping, None)
            if self._stopping:
                break
            job = todo.popleft()
            if not job.begin():
                continue
            with self._lock:
                self._running += 1
            self.events.emit("start", job)
            yield Start(job)
        for job in todo:
            yield from self._release(job)
        while self._running and not self._hard:
            left, at = self.clock.left(), self.clock.at  # a stop that comes meanwhile sets a deadline
            if left is not None and left <= 0:
                break
            yield Wait(self._drained(at), left)
        left_over = [job for job in self._in_hand if job.state in LIVE]
        self._in_hand = []
        if left_over:  # a hard stop, or the drain ran out: cancel and give back what is left
            self._hard = True
            self._wake()
            for job in left_over:
                job.cancel()
            for job in left_over:
                try:
                    yield from self._release_once(job)
                except Exception:  # the lease lapses instead
                    pass

    def _drained(self, at: float | None) -> Callable[[], bool]:
        """Whether the running jobs are over, the stop hard, or the deadline other than `at`."""
        return lambda: not self._running or self._hard or self.clock.at != at

    def _finish(self, job: JobBase, failure: BaseException | None) -> Gen[None]:
        """A handler ended, returning (`failure` None) or raising: ack or fail its job, unless it is
        no longer ours. An answer no retry mends ends run."""
        if job.cancelled.is_set() or job.state is not State.RUNNING:
            return
        try:
            if failure is None:
                yield from self._settle(job, "ack", self.plan.to_ack(job))
            else:
                yield from self._fail(job, error_text(failure))
        except Exception as exc:
            self._end_with(exc)

    def _ended(self) -> None:
        """A handler's job is settled (or no longer ours): its slot is free."""
        with self._lock:
            self._running -= 1
        self._wake()

    def _give_up(self) -> Gen[None]:
        """`run` itself interrupted (a KeyboardInterrupt, a cancelled task): nothing stays leased."""
        self._stop_now(True)
        left, self._in_hand = [job for job in self._in_hand if job.state in LIVE], []
        for job in left:
            try:
                yield from self._release_once(job)
            except Exception:
                pass

    # -- for job in worker ------------------------------------------------------------------------

    def _iterate(self) -> Gen[None]:
        while (jobs := (yield from self._claim())) is not None:
            try:
                for job in jobs:
                    if self._stopping:
                        break
                    if job.begin():
                        self.events.emit("start", job)
                        yield Hand(job)
            finally:
                for job in jobs:
                    if job.state is State.PENDING:
                        yield from self._release(job)
                self._in_hand = []
