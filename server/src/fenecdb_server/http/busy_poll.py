"""After an answer, the loop keeps polling its sockets for a short window before it sleeps.

A worker's next request follows its answer within tens of microseconds: the client reads the
answer, acks or claims again, and writes. If the server's loop has gone to sleep in `epoll_wait`
meanwhile, the request has to wake it: the kernel schedules the process back onto a CPU that may
have idled into a deeper state, and the process resumes with cold caches. Over HTTP that sleep
and wake is a large part of a claim's round trip (bench/README.md, "Busy polling", has the
numbers).

So each answer written (`touch`, from http/protocol.py's `_finish`) pushes a deadline
`window` ahead (counted from the answer, not from the request's arrival: a window counted from the
arrival ran out while the request was served, and was no faster), and while
the deadline is ahead the loop is kept from sleeping: `_spin` re-queues itself with `call_soon`,
and a loop with a ready callback polls its sockets with a zero timeout. A request that arrives in
the window is read on the next poll. Once the window has passed with nothing read, the spin
stops and the loop sleeps as before: an idle server costs no CPU, and a server answering one
request every few seconds spends at most one window of one core on each.

It is a trade of CPU for latency, so it stands down where the CPU is needed elsewhere:
- while an fdatasync runs on the log's ring (`--sync always`, http/durable.py): the kernel runs
  an AIO sync in a worker on the CPU that submitted it, the very CPU the spin would hold (with
  the spin left on, durable puts were far slower). The thread of storage/sync_thread.py
  may run on another CPU, but on a busy machine it shares the loop's: with the spin left on
  during its syncs, eight writers were no faster than with it standing down, so it stands down
  for either (bench/README.md, "Numbers the code's comments used to carry");
- by default, when the process may run on a single CPU (its affinity, or its cgroup's quota):
  there the client it waits for may need that CPU to send the request (cli.py decides).

A write's answer owed to `--sync-replicas` replicas (http/app.py's `confirmed`) holds the loop
polling too (`hold`, for `REPLICAS_S` at most from its own disk's sync): the loop does not go to
sleep between that sync and the replicas' ack, nor before the writer's next request, when the
round trip is short enough for the hold to cover it. The replica the stream woke may have been
put on this very CPU (the kernel wakes a reader onto its writer's CPU when it expects the writer to
sleep soon, and on a machine this small that is where the follower often runs), so while a hold
lasts each poll gives its CPU way (`give`, `sched_yield`) to any thread queued on it, rather than
leave it to the scheduler's next preemption: without that, some rounds were slower than with no
hold at all (bench/README.md, "The loop held for a sync replica's ack").
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

REPLICAS_S = 0.001  # the longest a write's answer owed to replicas holds the loop polling (`hold`)


class BusyPoll:
    """The window after the last answer written in which the loop polls instead of sleeping."""

    __slots__ = ("window", "clock", "paused", "expired", "give", "_until", "_giving_until", "_loop", "_spinning")

    def __init__(self, window: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.window = window  # seconds
        self.clock = clock
        self.paused: Callable[[], bool] = _never  # True: stop spinning now (the loop may sleep)
        self.expired = 0  # windows that ran out with no request read: fenec_busy_poll_expired_total
        self.give: Callable[[], None] = os.sched_yield  # while a hold lasts: each poll gives way
        self._until = 0.0
        self._giving_until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._spinning = False

    @property
    def spinning(self) -> bool:
        return self._spinning

    def touch(self, loop: asyncio.AbstractEventLoop) -> None:
        """An answer was written: keep the loop polling until `window` from now (or later, if a
        hold already keeps it so)."""
        until = self.clock() + self.window
        if until > self._until:
            self._until = until
        if not self._spinning or loop is not self._loop:  # (a spin on a loop since closed never ends)
            self._spinning = True
            self._loop = loop
            loop.call_soon(self._spin)

    def hold(self, loop: asyncio.AbstractEventLoop, seconds: float = REPLICAS_S) -> None:
        """An answer waits for the replicas' ack: keep the loop polling until `seconds` from now,
        each poll giving its CPU way to any thread queued on it (the module's docstring)."""
        until = self.clock() + seconds
        if until > self._until:
            self._until = until
        if until > self._giving_until:
            self._giving_until = until
        if not self._spinning or loop is not self._loop:
            self._spinning = True
            self._loop = loop
            loop.call_soon(self._spin)

    def _spin(self) -> None:
        if self.paused():
            self._spinning = False
        elif (now := self.clock()) < self._until:
            if now < self._giving_until:
                self.give()
            self._loop.call_soon(self._spin)  # type: ignore[union-attr]
        else:
            self._spinning = False
            self.expired += 1


def _never() -> bool:
    return False


def usable_cpus(affinity: set[int], cpu_max: str | None) -> float:
    """How many CPUs this process may use: its affinity, bounded by a cgroup v2 `cpu.max`
    quota ("<quota> <period>", or "max <period>" for none) when one is given."""
    cpus = float(len(affinity))
    if cpu_max:
        parts = cpu_max.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quota, period = int(parts[0]), int(parts[1])
            except ValueError:
                return cpus
            if quota > 0 and period > 0:
                cpus = min(cpus, quota / period)
    return cpus
