"""The nouns of a worker, shared by both drivers: options, the statements, a job's states, the stop's
deadline, the retry rule and pause, the events. What a worker does with them is `_worker_machine`'s;
the two drivers (`_worker`, `_async_worker`) only wait and send.

The statements, each made by the builder (so the text is the one the conformance vectors fix):

    claim    set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
               where run_at <= now() order run_at asc limit <batch> returning *     Fenec-Wait, key claim:<owner>
    ack      del q where id = $1 and owner = $2 require 1                         key ack:<owner>:<id>
             (keep_done: set q {owner: null, run_at: null, done_at: now()} where ... require 1)
    extend   set q {run_at: now() + $1} where id = $2 and owner = $3 require 1    key extend:<owner>:<id>:<beat>
    fail     set q {owner: null, error: $2, run_at: case when attempts >= <max> then null
               else now() + <backoff(attempts)> end} where id = .. and owner = .. require 1  key fail:<owner>:<id>
    dead     set q {owner: null, error: "attempts exhausted", run_at: null} where ... require 1   (claimed past max)
    release  set q {owner: null, run_at: now(), attempts: coalesce(attempts, 0) + -1} where id = .. and owner = ..

The owner is a claim token, `<name>:<n>`, new for each claim (n never repeats, across restarts
too: see `Plan`); every call is sent under an
Idempotency-Key made from it, so a call retried after a lost answer is answered as the first
try was (a claim: the jobs it took, none leaked leased). A connection error, a timeout or a 5xx
is retried after a pause of full jitter (0 to `retry_min`, doubling up to `retry_max`); a 412
means the lease was lost to another claim; any other answer ends `run` with it.

A stop has a deadline (`StopClock`): `drain_timeout` after a graceful stop, at once for a hard
one. No call of a stopping worker is retried past it, and every call's timeout is cut to what is
left of it plus `GRACE`, so `run` returns within `drain_timeout + GRACE` of a stop whether the
server answers or not (conformance/worker-contract.json, "stop_bound").

A job moves PENDING -> RUNNING -> SETTLING -> SETTLED, and to LOST from PENDING or RUNNING (a 412 on
an extend) or from SETTLING (a 412 on its settle), or to RELEASED (given back on stop). Only one
settle ever starts: the one `begin_settle` lets through. A 412 on an extend of a SETTLING job is no
news: the heartbeat sent that extend before the settle and the settle reached the server first (an
ack deletes the row, a fail or give-back clears the owner); the settle's own answer tells whether
the job was still this claim's.
"""

from __future__ import annotations

import enum
import itertools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ._conditions import raw
from ._errors import FenecError, UnmetError
from ._query import QueryBase, expr, inc
from ._wire import Request, Wire

log = logging.getLogger("fenecdb.worker")

Backoff = Callable[[int], float]
GRACE = 1.0  # seconds a stop's last give-backs may take past its deadline (the contract's stop_bound_margin_ms)
OnEvent = Callable[[dict[str, Any]], None]
EXHAUSTED = "attempts exhausted"


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def squared(attempts: int) -> float:
    """The default backoff: attempts² seconds."""
    return float(attempts * attempts)


@dataclass(frozen=True)
class Options:
    """A worker's settings, checked once (conformance/worker-contract.json names them). Times are
    seconds; `backoff` is a function `attempts -> seconds`; `heartbeat` None is a third of the
    lease, 0 turns it off."""

    queue: str
    name: str
    batch: int = 10
    concurrency: int = 1
    lease: float = 30.0
    wait: float = 30.0
    heartbeat: float | None = None
    max_attempts: int = 5
    backoff: Backoff = squared
    drain_timeout: float = 30.0
    timeout: float = 10.0
    keep_done: bool = False
    retry_min: float = 0.1
    retry_max: float = 5.0

    def __post_init__(self) -> None:
        for field, value, low in (("batch", self.batch, 1), ("concurrency", self.concurrency, 1),
                                  ("max_attempts", self.max_attempts, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{field} is a whole number from {low} (got {value!r})")
        for field, number in (("lease", self.lease), ("timeout", self.timeout),
                              ("retry_min", self.retry_min), ("retry_max", self.retry_max)):
            if not number > 0:
                raise ValueError(f"{field} is seconds, more than 0 (got {number!r})")
        for field, number in (("wait", self.wait), ("drain_timeout", self.drain_timeout)):
            if not number >= 0:
                raise ValueError(f"{field} is seconds, from 0 (got {number!r})")
        if self.retry_max < self.retry_min:
            raise ValueError(f"retry_max is at least retry_min (got {self.retry_max!r} < {self.retry_min!r})")
        if self.heartbeat is not None and not 0 <= self.heartbeat < self.lease:
            raise ValueError(f"heartbeat is seconds, less than the lease; 0 turns it off (got {self.heartbeat!r})")
        if not callable(self.backoff):
            raise ValueError(f"backoff is a function attempts -> seconds (got {self.backoff!r})")

    @property
    def beat(self) -> float:
        return self.lease / 3 if self.heartbeat is None else self.heartbeat

    @property
    def beating(self) -> bool:
        return self.heartbeat != 0

    def timeout_of(self, wait: float | None) -> float:
        """A call's timeout: `timeout`; a claim held for `wait` gets `wait` on top."""
        return self.timeout if wait is None else wait + self.timeout

    @property
    def runners(self) -> int:
        return min(self.concurrency, self.batch)


def new_name() -> str:
    return f"w-{uuid.uuid4().hex[:8]}"


class State(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SETTLING = "settling"
    SETTLED = "settled"
    LOST = "lost"
    RELEASED = "released"


# a job in hand, not yet being settled: a 412 on its extend is its lease lost
LIVE = (State.PENDING, State.RUNNING)


@dataclass(frozen=True)
class Call:
    """One statement to send, with its key, and the wait of a held claim."""

    kind: str
    text: str
    params: list[Any]
    key: str
    wait: float | None = None
    job: JobBase | None = None

    def request(self, wire: Wire, options: Options, cap: float | None = None) -> Request:
        """The request; its timeout cut to `cap` seconds when a stop leaves less than that."""
        made = wire.query(self.text, self.params, wait=self.wait, idempotency_key=self.key, read=False)
        timeout = options.timeout_of(self.wait)
        return replace(made, timeout=timeout if cap is None else max(0.001, min(timeout, cap)))


class Plan:
    """The statements of one queue, for the worker's options."""

    def __init__(self, query: QueryBase, options: Options) -> None:
        self.query = query
        self.options = options
        # n counts on from the microseconds since the epoch, not from 1: the server keeps an
        # Idempotency-Key for a day, and a worker restarted under the same name that counted
        # from 1 again would send `claim:<name>:1` once more and be replayed its last life's jobs.
        self._counter = itertools.count(time.time_ns() // 1000)

    @property
    def name(self) -> str:
        return self.options.name

    def next_owner(self) -> str:
        return f"{self.options.name}:{next(self._counter)}"

    def to_claim(self, owner: str) -> tuple[str, list[Any]]:
        o = self.options
        chain = self.query.where(raw("run_at <= now()")).order("run_at").limit(o.batch)
        patch = {"owner": owner, "run_at": expr("now() + ?", ms(o.lease)), "attempts": inc(1)}
        return chain.to_update(patch, returning=True)

    def mine(self, job: JobBase) -> QueryBase:
        return self.query.where("id", job.id).where("owner", job.owner)

    def to_ack(self, job: JobBase) -> tuple[str, list[Any]]:
        if self.options.keep_done:
            done = {"owner": None, "run_at": None, "done_at": expr("now()")}
            return self.mine(job).to_update(done, require=1)
        return self.mine(job).to_delete(require=1)

    def to_extend(self, job: JobBase, lease: float | None = None) -> tuple[str, list[Any]]:
        patch = {"run_at": expr("now() + ?", ms(self.options.lease if lease is None else lease))}
        return self.mine(job).to_update(patch, require=1)

    def to_fail(self, job: JobBase, error: str, backoff: Backoff | None = None, *,
                delay: float | None = None) -> tuple[str, list[Any]]:
        step = self.options.backoff if backoff is None else backoff
        worked = step(job.attempts) if delay is None else delay  # from the attempts the claim read
        run_at = expr("case when attempts >= ? then null else now() + ? end", self.options.max_attempts, ms(worked))
        patch = {"owner": None, "error": error, "run_at": run_at}
        return self.mine(job).to_update(patch, require=1)

    def to_dead(self, job: JobBase) -> tuple[str, list[Any]]:
        patch = {"owner": None, "error": EXHAUSTED, "run_at": None}
        return self.mine(job).to_update(patch, require=1)

    def to_release(self, job: JobBase) -> tuple[str, list[Any]]:
        patch = {"owner": None, "run_at": expr("now()"), "attempts": inc(-1)}  # it never ran
        return self.mine(job).to_update(patch)

    def claim(self, owner: str) -> Call:
        return Call("claim", *self.to_claim(owner), key=f"claim:{owner}", wait=self.options.wait)

    def settle(self, kind: str, job: JobBase, statement: tuple[str, list[Any]], n: int | None = None) -> Call:
        suffix = "" if n is None else f":{n}"
        return Call(kind, *statement, key=f"{kind}:{job.owner}:{job.id}{suffix}", job=job)

    def failure(self, job: JobBase, error: str, backoff: Backoff | None = None) -> tuple[tuple[str, list[Any]],
                                                                                       float | None]:
        """The fail statement of `job`, and the back-off it gets (None: dead). A hook is called once."""
        step = self.options.backoff if backoff is None else backoff
        if job.attempts >= self.options.max_attempts:
            return self.to_fail(job, error, backoff, delay=0.0), None
        delay = step(job.attempts)
        return self.to_fail(job, error, backoff, delay=delay), delay


class JobBase:
    """A claimed job: its row, its claim's owner token, and where it stands."""

    def __init__(self, row: Mapping[str, Any], owner: str, plan: Plan) -> None:
        self.row = dict(row)
        self.owner = owner
        self._plan = plan
        self._lock = threading.Lock()
        self.state = State.PENDING
        self._beats = itertools.count(1)
        # set when the lease is lost or the worker stops hard: a slow handler waits on it
        # (`job.cancelled.wait(5)`) rather than sleeping; a `threading.Event`, read from any thread
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        """Not ours to finish any more: the lease is lost, or the worker stops hard."""
        self.cancelled.set()

    @property
    def id(self) -> Any:
        return self.row.get("id")

    @property
    def payload(self) -> Any:
        return self.row.get("payload")

    @property
    def attempts(self) -> int:
        return int(self.row.get("attempts") or 0)

    @property
    def lost(self) -> bool:
        """True once the lease is known lost (another claim holds the job): do not settle it."""
        return self.state is State.LOST

    @property
    def settled(self) -> bool:
        return self.state in (State.SETTLED, State.RELEASED)

    def _move(self, to: State, *, allowed: tuple[State, ...]) -> bool:
        with self._lock:
            if self.state not in allowed:
                return False
            self.state = to
            return True

    def begin(self) -> bool:
        return self._move(State.RUNNING, allowed=(State.PENDING,))

    def begin_settle(self) -> bool:
        return self._move(State.SETTLING, allowed=(State.PENDING, State.RUNNING))

    def end_settle(self, done: bool) -> None:
        self._move(State.SETTLED if done else State.LOST, allowed=(State.SETTLING,))

    def mark_lost(self) -> bool:
        """An extend answered 412: the lease is lost, unless a settle is under way (it tells)."""
        return self._move(State.LOST, allowed=LIVE)

    def next_beat(self) -> int:
        return next(self._beats)

    def to_ack(self) -> tuple[str, list[Any]]:
        return self._plan.to_ack(self)

    def to_extend(self, lease: float | None = None) -> tuple[str, list[Any]]:
        return self._plan.to_extend(self, lease)

    def to_fail(self, error: str, *, backoff: Backoff | None = None) -> tuple[str, list[Any]]:
        return self._plan.to_fail(self, error, backoff)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} id={self.id!r} owner={self.owner!r} attempts={self.attempts} "
                f"{self.state.value}>")


class StopClock:
    """When a stopping worker gives up: `drain_timeout` after a graceful stop, at once after a
    hard one (the earlier wins). Read from any thread; written under the GIL in one assignment."""

    def __init__(self, drain_timeout: float) -> None:
        self.drain_timeout = drain_timeout
        self.at: float | None = None

    def start(self, hard: bool) -> None:
        at = time.monotonic() + (0.0 if hard else self.drain_timeout)
        if self.at is None or at < self.at:
            self.at = at

    def left(self) -> float | None:
        """Seconds to the deadline (negative past it), or None when not stopping."""
        return None if self.at is None else self.at - time.monotonic()

    def cap(self) -> float | None:
        """The most a call may take now: what is left of the deadline plus GRACE (None: no stop)."""
        left = self.left()
        return None if left is None else max(0.0, left) + GRACE

    def passed(self) -> bool:
        left = self.left()
        return left is not None and left <= 0


def retryable(exc: BaseException) -> bool:
    """A failure the server may not have caused for good: the network, a timeout, a 5xx."""
    if isinstance(exc, FenecError):
        return exc.status >= 500
    return isinstance(exc, OSError)  # ConnectionError, TimeoutError


def lease_lost(exc: BaseException) -> bool:
    return isinstance(exc, UnmetError)


class Pause:
    """The pause before retrying: full jitter under `retry_min` doubling to `retry_max` (AWS's "full jitter")."""

    def __init__(self, base: float, cap: float) -> None:
        self.base = base
        self.cap = cap
        self.tries = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2 ** min(self.tries, 32))
        self.tries += 1
        return random.uniform(0, ceiling)


def error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class Events:
    """Every event goes to the `on_event` hook (if any) and to the `fenecdb.worker` logger."""

    def __init__(self, worker: str, hook: OnEvent | None) -> None:
        self.worker = worker
        self.hook = hook

    def emit(self, type: str, job: JobBase | None = None, **fields: Any) -> None:
        event: dict[str, Any] = {"type": type, "worker": self.worker}
        if job is not None:
            event.update(id=job.id, owner=job.owner, attempts=job.attempts)
        event.update(fields)
        level = logging.WARNING if type in ("retry", "failed", "dead", "lost") else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "%s %s", type, {k: v for k, v in event.items() if k != "type"})
        if self.hook is not None:
            try:
                self.hook(event)
            except Exception:  # a broken hook must not stop the worker
                log.exception("the on_event hook raised on %s", type)
