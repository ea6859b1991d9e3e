"""Held claims: `Fenec-Wait` (http.md §8), and the fairness contract they keep.

A claim sent with `Fenec-Wait: <ms>` is run once at once by the app. If it took nothing it is
handed to this registry, which keeps the request open and runs it again at the first moment it
could take something, or answers it at its deadline with what its last run answered.

The fairness contract
---------------------
1. Lines. Held requests whose `set`/`del` statements would pick the same rows (the engine's
   `hold.line_key`: same collection, same filter with its parameters bound, same order) wait
   in one line. A line is first-come first-served: its head is the request held longest.
2. A committed write wakes only the lines that read a collection it touched. A woken line
   spends one *look* (`hold.look()`, a one-row `get` under the shared read lock); only when the
   look finds a row does its head *run* (the real request, under the write lock). A write
   therefore costs a line one cheap read, never one write per waiting worker.
3. A look that found nothing stands for the whole line, and the line does not look again for
   1 ms because of writes: writes inside that gap are remembered and answered by one look at
   its end. The throttle never delays a look due to the clock or to a hand-off.
4. Hand-off. A head whose run took something is answered and leaves; the next request of the
   line looks at once, because more rows may be ready: a burst of jobs is drained by the
   waiting workers in arrival order, the oldest job to the longest-waiting worker.
5. A run that took nothing after all (another line was faster, a `require` was not met) keeps
   the request its place; the line waits again from the state that run saw.
6. Time. No write announces that a delayed job came due or that a lease lapsed, so each line
   sleeps until `hold.next_moment()` (the engine reads it from the filter's `now()`
   comparisons and the `@sorted`/`@ttl` indexes), looks, and runs only if a row is there. A wake
   that comes early goes back to sleep: a delayed job is never taken before its time. With
   nothing written and nothing due, a held request costs no CPU: no timer, no task.
7. Across lines. One wake pass visits every affected line in ascending `Line.rank()` — today
   (0, the head's arrival), so on a row several lines could take, the request held longest
   across lines runs first (§8.7 rules 1 and 2). Claims ordered by their own point ("Who gets
   the job", §8.7 rule 3) will bid through `rank()` without changing the lines.
8. A client gone. Before its head runs, a line checks that the client is still connected; a
   request whose client left is dropped without running and the turn passes at once to the
   next request, which takes the row. A request whose client leaves while nothing is ready is
   simply forgotten.
9. A run in flight is never abandoned: a deadline or a shutdown that falls during it is
   answered with that run's answer, so a row taken is always delivered (a lease to no one is a
   bug).
10. Shutdown. From the signal on nothing is held: every held request is answered at once with
   what its last run answered, and new requests are run once.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

LOOK_THROTTLE_S = 0.001
MAX_WAIT_MS = 30_000


@dataclass(slots=True)
class Answer:
    """A whole HTTP answer: status, body and the extra headers it carries."""

    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class Outcome:
    """What one run of a held request gave. `final` ends the hold (rows taken, an error other
    than a `require` miss, a replayed answer); otherwise `answer` is what a deadline answers."""

    final: bool
    answer: Answer


Runner = Callable[["Held"], Awaitable[Outcome]]

_arrivals = itertools.count()


class Held:
    __slots__ = ("payload", "last", "future", "arrival", "line", "gone", "running", "done", "timer")

    def __init__(self, payload: Any, last: Answer, future: asyncio.Future[Answer]) -> None:
        self.payload = payload  # what the runner needs: statements, block, key, ...
        self.last = last
        self.future = future
        self.arrival = next(_arrivals)
        self.line: Line | None = None
        self.gone = False
        self.running = False
        self.done = False
        self.timer: asyncio.TimerHandle | None = None


class Line:
    __slots__ = ("key", "hold", "queue", "collections", "pumping", "pending", "throttle_until",
                 "throttle_timer", "time_timer", "moment")

    def __init__(self, key: Any, hold: Any) -> None:
        self.key = key
        self.hold = hold
        self.queue: deque[Held] = deque()
        self.collections: frozenset[str] = hold.collections
        self.pumping = False
        self.pending = False  # a write came while the line was busy or throttled
        self.throttle_until = 0.0
        self.throttle_timer: asyncio.TimerHandle | None = None
        self.time_timer: asyncio.TimerHandle | None = None
        self.moment: int | None = None

    def rank(self) -> tuple[Any, int]:
        """The key a wake pass orders lines by (fairness rule 7)."""
        head = self.queue[0]
        return (0, head.arrival)


class Waits:
    """The registry of held requests of one database, driven by the event loop."""

    def __init__(self, db: Any, runner: Runner, loop: asyncio.AbstractEventLoop) -> None:
        self.db = db
        self.runner = runner
        self.loop = loop
        self.lines: dict[Any, Line] = {}
        self.by_collection: dict[str, set[Line]] = {}
        self.closing = False
        self.held = 0
        self.looks = 0
        self.runs = 0
        self.taken = 0
        self.wakeups = 0
        self._loop_thread = threading.get_ident()
        db.listen(self._announce)

    # -- the write announcement (engine thread, under its write lock: keep it cheap) --

    def _announce(self, collections: frozenset[str], seq: int) -> None:
        by = self.by_collection
        if not by:
            return
        for name in collections:
            if name in by:
                break
        else:
            return
        if threading.get_ident() == self._loop_thread:
            self.loop.call_soon(self._wake, collections)
        else:
            self.loop.call_soon_threadsafe(self._wake, collections)

    def _wake(self, collections: frozenset[str]) -> None:
        affected: set[Line] = set()
        for name in collections:
            lines = self.by_collection.get(name)
            if lines:
                affected |= lines
        if not affected:
            return
        now = self.loop.time()
        # a line behind an older head that is still in its look gap waits for it (rule 7)
        behind = 0.0
        for line in sorted((ln for ln in affected if ln.queue), key=Line.rank):
            self.wakeups += 1
            if line.pumping:
                line.pending = True
            elif now < line.throttle_until or now < behind:
                line.pending = True
                until = max(line.throttle_until, behind)
                behind = until
                if line.throttle_timer is None:
                    line.throttle_timer = self.loop.call_at(until, self._throttle_end, line)
            else:
                self._start(line)

    def _throttle_end(self, line: Line) -> None:
        line.throttle_timer = None
        if not (line.pending and line.queue and not line.pumping):
            return
        # Fairness across lines (rule 7) holds through the throttle too: a line whose head is
        # older but whose gap ends a little later goes first, so this one waits for it.
        now = self.loop.time()
        ready = [ln for ln in self.lines.values() if ln.pending and ln.queue and not ln.pumping]
        rank = line.rank()
        later = max((ln.throttle_until for ln in ready if ln.rank() < rank), default=0.0)
        if later > now:
            line.throttle_timer = self.loop.call_at(later, self._throttle_end, line)
            return
        for ln in sorted((ln for ln in ready if ln.throttle_until <= now), key=Line.rank):
            if ln.throttle_timer is not None:
                ln.throttle_timer.cancel()
                ln.throttle_timer = None
            self._start(ln)

    # -- holding --

    def hold(self, hold: Any, payload: Any, last: Answer, wait_ms: int, seen_seq: int) -> Held:
        """Hold a request whose first run (at change `seen_seq`) took nothing and answered
        `last`. `held.future` is answered by a run that took something, or at the deadline."""
        future: asyncio.Future[Answer] = self.loop.create_future()
        held = Held(payload, last, future)
        if self.closing:
            held.done = True
            future.set_result(last)
            return held
        line = self.lines.get(hold.line_key)
        fresh = line is None
        if line is None:
            line = Line(hold.line_key, hold)
            self.lines[hold.line_key] = line
            for name in line.collections:
                self.by_collection.setdefault(name, set()).add(line)
        line.queue.append(held)
        held.line = line
        self.held += 1
        held.timer = self.loop.call_later(min(wait_ms, MAX_WAIT_MS) / 1000, self._deadline, held)
        if self.db.seq != seen_seq:
            # a write landed between the first run and now: look at once
            if not line.pumping:
                self._start(line)
            else:
                line.pending = True
        elif fresh:
            self._schedule_time(line)
        return held

    def forget(self, held: Held) -> None:
        """The client went away (fairness rule 8): drop the request unless it is running."""
        held.gone = True
        if not held.running and not held.done:
            self._remove(held)
            held.done = True
            if not held.future.done():
                held.future.cancel()

    def _deadline(self, held: Held) -> None:
        held.timer = None
        if held.done:
            return
        if held.running:  # rule 9: the run in flight answers it (see _pump_line)
            return
        self._finish(held, held.last)

    def _finish(self, held: Held, answer: Answer) -> None:
        if held.done:
            return
        held.done = True
        self._remove(held)
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        if not held.future.done():
            held.future.set_result(answer)

    def _remove(self, held: Held) -> None:
        line = held.line
        if line is None:
            return
        held.line = None
        self.held -= 1
        try:
            line.queue.remove(held)
        except ValueError:
            pass
        if not line.queue and not line.pumping:
            self._drop_line(line)

    def _drop_line(self, line: Line) -> None:
        if self.lines.get(line.key) is line:
            del self.lines[line.key]
        for name in line.collections:
            lines = self.by_collection.get(name)
            if lines is not None:
                lines.discard(line)
                if not lines:
                    del self.by_collection[name]
        for timer in (line.time_timer, line.throttle_timer):
            if timer is not None:
                timer.cancel()
        line.time_timer = line.throttle_timer = None

    # -- time (fairness rule 6) --

    def _schedule_time(self, line: Line) -> None:
        if line.time_timer is not None:
            line.time_timer.cancel()
            line.time_timer = None
        if not line.queue:
            return
        moment = line.hold.next_moment()
        line.moment = moment
        if moment is None:
            return
        delay = (moment - self.db.now()) / 1000
        line.time_timer = self.loop.call_later(max(delay, 0.0), self._time_due, line)

    def _time_due(self, line: Line) -> None:
        line.time_timer = None
        if not line.queue:
            return
        moment = line.moment
        if moment is not None and self.db.now() < moment:
            # woken early (timer granularity): sleep the rest, never run early
            delay = (moment - self.db.now()) / 1000
            line.time_timer = self.loop.call_later(max(delay, 0.0005), self._time_due, line)
            return
        self.wakeups += 1
        if line.pumping:
            line.pending = True
        else:
            self._start(line, timed=True)

    # -- the pump: look, run the head, hand off --

    def _start(self, line: Line, timed: bool = False) -> None:
        line.pumping = True
        line.pending = False
        if line.throttle_timer is not None:
            line.throttle_timer.cancel()
            line.throttle_timer = None
        self.loop.create_task(self._pump(line))

    async def _pump(self, line: Line) -> None:
        try:
            await self._pump_line(line)
        finally:
            line.pumping = False
            if not line.queue:
                self._drop_line(line)
            elif line.pending and not self.closing:
                # writes came while the line ran: one look for all of them, throttled
                now = self.loop.time()
                if now < line.throttle_until:
                    if line.throttle_timer is None:
                        line.throttle_timer = self.loop.call_at(line.throttle_until, self._throttle_end, line)
                else:
                    self._start(line)

    async def _pump_line(self, line: Line) -> None:
        while line.queue and not self.closing:
            line.pending = False
            self.looks += 1
            if not line.hold.look():
                line.throttle_until = self.loop.time() + LOOK_THROTTLE_S
                self._schedule_time(line)
                return
            # a row is there: the head runs, skipping clients that left (rule 8). A close that has
            # already reached the socket becomes `gone` only after a few turns of the loop
            # (connection_lost, then the receive() watcher, then forget), and a put arriving in
            # the same poll wakes the line first: give those turns before picking the head.
            for _ in range(3):
                await asyncio.sleep(0)
            while line.queue and line.queue[0].gone:
                gone = line.queue[0]
                self._remove(gone)
                gone.done = True
            if not line.queue:
                return
            head = line.queue[0]
            head.running = True
            self.runs += 1
            try:
                outcome = await self.runner(head)
            except Exception:  # the runner answers its own errors; this is a fault
                head.running = False
                self._finish(head, Answer(500, b'{"error":"internal fault"}'))
                continue
            head.running = False
            if outcome.final:
                self.taken += 1
                self._finish(head, outcome.answer)
                continue  # hand-off: the next looks at once (rule 4)
            head.last = outcome.answer
            if head.timer is None or head.gone or self.closing:
                # its deadline fell during the run, or its client left: answer what it found
                self._finish(head, outcome.answer)
                continue
            self._schedule_time(line)  # rule 5: wait again from what the run saw
            return

    # -- shutdown (rule 10) --

    def shutdown(self) -> int:
        """Answer every held request with its last answer; hold nothing from now on.
        Returns how many were answered."""
        self.closing = True
        count = 0
        for line in list(self.lines.values()):
            for held in list(line.queue):
                if not held.running:
                    self._finish(held, held.last)
                    count += 1
            if not line.queue and not line.pumping:
                self._drop_line(line)
        return count
