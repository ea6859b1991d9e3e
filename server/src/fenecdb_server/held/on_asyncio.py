"""The asyncio driver: held claims on an event loop (the HTTP server's).

The lines' state is touched on the loop only: a write announced from another thread (a worker
thread's `execute`) hops onto it with `call_soon_threadsafe`. `settle` lets a client's close on
its way land before a run (lines.py rule 8):

* where the server tells a client's close in the turn it reads it (`closes_told`: fenec-server's
  protocol, http/protocol.py `eof_received`), a settle asked for inside a write's wake pass (the
  hop, `soon`) runs at the end of that pass, in the same callback: the hop comes in a later turn
  than the write's read, so every close read with the write or before it has been told by then
  (a connection reset is told a callback later, but its held claim is seen closing,
  `HeldClaim.closing`). Every other settle waits for the next turn, after the reads of this one;
* for any other ASGI server, which says so only through connection_lost and the receive()
  watcher, a settle waits three turns.

A run that awaits (a worker thread's) is a task; the lines go on meanwhile.

The wake of one held claim by a write costs, with closes told, the announcement's turn alone:
the wake pass (the look, or the check that stands for it) and then the run, with no task unless
it goes to a worker thread (`--sync always`, a long statement). The write's own answer, where it
waits for that run (`behind_wake`), is written right after the hop, in the same turn.
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
                 closes_told: bool = False) -> None:
        self.loop = loop
        self.told = closes_told
        self.settle_turns = 1 if closes_told else SETTLE_TURNS
        self.runner = runner
        self.fault = fault  # the answer of a run that raised (the runner answers its own errors)
        self._loop_thread = threading.get_ident()
        # inside a hop (closes told): the settles asked for in it, run at its end; None outside one
        self._settling: list[Callable[[], None]] | None = None

    def time(self) -> float:
        return self.loop.time()

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        return self.loop.call_at(when, fn)

    def soon(self, fn: Callable[[], None]) -> None:
        here = threading.get_ident() == self._loop_thread
        if self.told:
            if here:
                self.loop.call_soon(self._hop, fn)
            else:
                self.loop.call_soon_threadsafe(self._hop, fn)
        elif here:
            self.loop.call_soon(fn)
        else:
            self.loop.call_soon_threadsafe(fn)

    def _hop(self, fn: Callable[[], None]) -> None:
        """`fn` (a write's wake pass), then the runs it settled, in the order it asked for them (a
        run's own hand-off settles into the next turn, as outside a hop)."""
        settling: list[Callable[[], None]] = []
        self._settling = settling
        try:
            fn()
        except Exception:
            log.exception("internal fault in a held claims' wake pass")
        finally:
            self._settling = None
        for run in settling:
            try:
                run()
            except Exception:  # as the loop would log a callback's, and the next runs all the same
                log.exception("internal fault running a held claim")

    def settle(self, fn: Callable[[], None]) -> None:
        settling = self._settling
        if settling is not None:
            settling.append(fn)
        elif self.told:
            self.loop.call_soon(fn)
        else:
            self.loop.call_soon(self._turn, self.settle_turns - 1, fn)

    def behind_wake(self, fn: Callable[[], None]) -> None:
        """Run `fn` after the run a write announced in this turn (its wake pass, then its runs), in
        the same turn as that run and after it: where the write's own answer waits, the woken
        worker is answered first."""
        if self.told:
            self.loop.call_soon(fn)  # behind the hop, queued before it by the write's announcement
        else:
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
