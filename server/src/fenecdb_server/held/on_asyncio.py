"""The asyncio driver: held claims on an event loop (the HTTP server's).

The lines' state is touched on the loop only: a write announced from another thread (a worker
thread's `execute`) hops onto it with `call_soon_threadsafe`. `settle` gives the loop turns
before a run: one where the server tells a client's close in the turn it reads it (fenec-server's
protocol, http/protocol.py `eof_received`), so the run comes after every read of that turn;
three for any other ASGI server, which says so only through connection_lost and the receive()
watcher. A run that awaits (a worker thread's) is a task; the lines go on meanwhile.

The wake of one held claim by a write costs the announcement's turn (the look, made at once) and
its settling turns; the run is made in the last of them, with no task, unless it goes to a worker
thread (`--sync always`, a long statement).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from .lines import HeldClaim, Outcome
from .port import Timer

A = TypeVar("A")

log = logging.getLogger("fenec.held")

SETTLE_TURNS = 3


class AsyncioDriver(Generic[A]):
    def __init__(self, loop: asyncio.AbstractEventLoop,
                 runner: Callable[[HeldClaim[A]], Outcome[A] | Awaitable[Outcome[A]]], fault: A,
                 settle_turns: int = SETTLE_TURNS) -> None:
        self.loop = loop
        self.settle_turns = settle_turns
        self.runner = runner
        self.fault = fault  # the answer of a run that raised (the runner answers its own errors)
        self._loop_thread = threading.get_ident()

    def time(self) -> float:
        return self.loop.time()

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        return self.loop.call_at(when, fn)

    def soon(self, fn: Callable[[], None]) -> None:
        if threading.get_ident() == self._loop_thread:
            self.loop.call_soon(fn)
        else:
            self.loop.call_soon_threadsafe(fn)

    def settle(self, fn: Callable[[], None]) -> None:
        self.loop.call_soon(self._turn, self.settle_turns - 1, fn)

    def behind_wake(self, fn: Callable[[], None]) -> None:
        """Run `fn` after the run a write announced in this turn (its wake pass, then its settling
        turns), in the same turn as that run and after it: where the write's own answer waits, the
        woken worker is answered first."""
        self.loop.call_soon(self._turn, self.settle_turns, fn)

    def _turn(self, left: int, fn: Callable[[], None]) -> None:
        if left:
            self.loop.call_soon(self._turn, left - 1, fn)
        else:
            fn()

    def run(self, held: HeldClaim[A], done: Callable[[Outcome[A]], None]) -> None:
        """A runner that answers at once (the claim ran on the loop) is handed on at once: the
        wake of a held claim costs no task. One that answers an awaitable (a worker thread)
        gets a task. No reference to it is kept: a done-callback to drop one would cost a turn,
        and a task that awaits is referenced by what it awaits (the executor's future)."""
        try:
            got = self.runner(held)
        except Exception:
            log.exception("internal fault running a held claim")
            done(Outcome(True, self.fault))
            return
        if isinstance(got, Outcome):
            done(got)
        else:
            self.loop.create_task(self._await(got, done))

    async def _await(self, got: Awaitable[Outcome[A]], done: Callable[[Outcome[A]], None]) -> None:
        try:
            outcome = await got
        except Exception:
            log.exception("internal fault running a held claim")
            outcome = Outcome(True, self.fault)
        done(outcome)
