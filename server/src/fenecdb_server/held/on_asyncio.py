"""The asyncio driver: held claims on an event loop (the HTTP server's).

The lines' state is touched on the loop only: a write announced from another thread (a worker
thread's `execute`) hops onto it with `call_soon_threadsafe`. A run is a task, since a runner may
await a worker thread; the lines go on meanwhile. `settle` gives the loop three turns, which a
client's close that already reached the socket needs to be seen (connection_lost, then the
receive() watcher, then `Lines.forget`).

The wake of one waiting claim by a write costs what it did before this package: the announcement's
turn (the look, made at once), three settling turns, and one task for the run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from .lines import Lines, Outcome, Waiter
from .port import Claim, Timer

A = TypeVar("A")

log = logging.getLogger("fenec.held")

SETTLE_TURNS = 3


class AsyncioDriver(Generic[A]):
    def __init__(self, loop: asyncio.AbstractEventLoop, runner: Callable[[Waiter[A]], Awaitable[Outcome[A]]],
                 fault: A) -> None:
        self.loop = loop
        self.runner = runner
        self.fault = fault  # the answer of a run that raised (the runner answers its own errors)
        self._thread = threading.get_ident()
        self._tasks: set[asyncio.Task[None]] = set()

    def time(self) -> float:
        return self.loop.time()

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        return self.loop.call_at(when, fn)

    def soon(self, fn: Callable[[], None]) -> None:
        if threading.get_ident() == self._thread:
            self.loop.call_soon(fn)
        else:
            self.loop.call_soon_threadsafe(fn)

    def settle(self, fn: Callable[[], None]) -> None:
        self.loop.call_soon(self._turn, SETTLE_TURNS - 1, fn)

    def _turn(self, left: int, fn: Callable[[], None]) -> None:
        if left:
            self.loop.call_soon(self._turn, left - 1, fn)
        else:
            fn()

    def run(self, waiter: Waiter[A], done: Callable[[Outcome[A]], None]) -> None:
        task = self.loop.create_task(self._run(waiter, done))
        self._tasks.add(task)  # a task nothing refers to may be collected mid-run
        task.add_done_callback(self._tasks.discard)

    async def _run(self, waiter: Waiter[A], done: Callable[[Outcome[A]], None]) -> None:
        try:
            outcome = await self.runner(waiter)
        except Exception:
            log.exception("internal fault running a held claim")
            outcome = Outcome(True, self.fault)
        done(outcome)


def park(lines: Lines[A], claim: Claim, payload: object, last: A, wait_ms: int,
         seen_seq: int) -> tuple[Waiter[A], asyncio.Future[A]]:
    """Hold a claim whose first run took nothing (see `Lines.hold`); the future is its answer.
    On the loop only."""
    future: asyncio.Future[A] = asyncio.get_running_loop().create_future()

    def answer(a: A) -> None:
        if not future.done():
            future.set_result(a)

    waiter = Waiter(payload, last, answer)
    lines.hold(claim, waiter, wait_ms, seen_seq)
    return waiter, future
