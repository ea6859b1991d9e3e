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
   its end, read on the event loop's clock to its grain (uvloop's counts whole milliseconds).
   The throttle never delays a look due to the clock or to a hand-off.
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
7. Across lines. One wake pass visits every affected line in ascending `Line.rank()`, the
   head's arrival, so on a row several lines could take, the request held longest across lines
   runs first (§8.7 rules 1 and 2).
7b. Bidding (§8.7 rule 3, "Who gets the job"). A claim whose order is its own (a key reads a
   parameter or a token claim: `order distance(pickup, $1) limit 1`) is a line of its own, and
   while one is held, every line picking from its collection waits in that collection's
   `Bidding`. A write makes one pass over them: every line looks, the lines that bid by their
   own order in one read-locked pass among the rows written since each last looked
   (`engine/bids.py`); each that finds a row bids its rank. The best bid is the lowest rank, on a
   tie the head held longest; a line ordered by a field ranks every row alike, so it ties with
   any bid and its head's wait decides. Only the winner's head runs; the rest wait behind that
   run and then look again, each for the row it would take then, until a pass finds nothing.
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
import os
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine import bids as B

if TYPE_CHECKING:
    from ..database import Database

LOOK_THROTTLE_S = 0.001
# the coarsest event-loop clock we run on (uvloop's counts milliseconds): timers may fire when
# the clock still reads up to this much before their time
CLOCK_GRAIN_S = 0.001
# Bidding is how held claims work; `FENEC_HELD_BIDDING=off` races them instead (each line looks
# and runs on its own, the first run to write wins) for `bench/bidding_bench.py` to compare.
BIDDING = os.environ.get("FENEC_HELD_BIDDING", "on") != "off"
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
                 "throttle_timer", "time_timer", "moment", "profile", "bidding", "seen", "extra")

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
        # bidding (rule 7b): what the line bids with, the change it last looked at (None: look
        # at the whole collection) and the rows it matched then and did not get
        self.profile: B.Profile | None = B.profile(hold)
        self.bidding: Bidding | None = None
        self.seen: int | None = None
        self.extra: set[int] = set()

    def rank(self) -> tuple[Any, int]:
        """The key a wake pass orders lines by (fairness rule 7)."""
        head = self.queue[0]
        return (0, head.arrival)


class Bidding:
    """The lines picking from one collection while a claim of its own order waits there (7b)."""

    __slots__ = ("home", "lines", "own", "running", "pending", "throttle_until", "timer", "stalled")

    def __init__(self, home: str) -> None:
        self.home = home
        self.lines: dict[Line, None] = {}  # in the order they came
        self.own = 0  # how many of them order by their own key
        self.running = False
        self.pending = False
        self.throttle_until = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.stalled: set[Line] = set()  # ran and took nothing: out of this auction's passes


class Waits:
    """The registry of held requests of one database, driven by the event loop."""

    def __init__(self, db: Database, runner: Runner, loop: asyncio.AbstractEventLoop) -> None:
        self.db = db
        self.runner = runner
        self.loop = loop
        self.lines: dict[Any, Line] = {}
        self.by_collection: dict[str, set[Line]] = {}
        self.biddings: dict[str, Bidding] = {}
        self._filters: dict[Any, int] = {}  # a bidding line's filter -> its id (B.Profile.filter_id)
        self._filter_ids = itertools.count()
        self.closing = False
        self.held = 0
        self.looks = 0
        self.runs = 0
        self.taken = 0
        self.wakeups = 0
        self._loop_thread = threading.get_ident()
        db.listen(self._announce)
        # while a collection has a bidding, its lines look among the rows written since
        self._track = getattr(db, "track_writes", None)

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
        poked: list[Bidding] = []
        if self.biddings:
            # bidding lines look together, in one pass of their collection's bidding (rule 7b)
            rest: set[Line] = set()
            for line in affected:
                b = line.bidding
                if b is None:
                    rest.add(line)
                elif line.queue:
                    self.wakeups += 1
                    if b not in poked:
                        poked.append(b)
                        b.stalled.clear()
            affected = rest
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
        for b in poked:
            self._poke(b)

    def _throttle_end(self, line: Line) -> None:
        line.throttle_timer = None
        if not (line.pending and line.queue and not line.pumping):
            return
        # Fairness across lines (rule 7) holds through the throttle too: a line whose head is
        # older but whose gap ends a little later goes first, so this one waits for it.
        # The line whose timer fired is due whatever the clock reads: uvloop's clock counts whole
        # milliseconds, so at the timer `now` can be 15187.13 against a gap that ends at
        # 15187.130000000001, and a strict comparison here once left a worker asleep beside a
        # ready job until its deadline. The other lines get the clock's grain as slack.
        due_by = self.loop.time() + CLOCK_GRAIN_S
        ready = [ln for ln in self.lines.values() if ln.pending and ln.queue and not ln.pumping]
        rank = line.rank()
        later = max((ln.throttle_until for ln in ready if ln.rank() < rank), default=0.0)
        if later > due_by:
            line.throttle_timer = self.loop.call_at(later, self._throttle_end, line)
            return
        for ln in sorted((ln for ln in ready if ln is line or ln.throttle_until <= due_by), key=Line.rank):
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
            line.seen = seen_seq
            self.lines[hold.line_key] = line
            for name in line.collections:
                self.by_collection.setdefault(name, set()).add(line)
            self._attach(line)
        elif line.seen is not None and seen_seq < line.seen:
            line.seen = seen_seq
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
        if line.bidding is not None:
            self._detach(line)
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

    def _schedule_time(self, line: Line, moments: dict | None = None) -> None:
        if not line.queue:
            if line.time_timer is not None:
                line.time_timer.cancel()
                line.time_timer = None
            return
        fid = line.profile.filter_id if line.profile is not None else None
        if moments is not None and fid is not None and len(line.collections) == 1:
            # lines with one filter (its parameters and rules bound) share the moment
            if fid in moments:
                moment = moments[fid]
            else:
                moment = moments[fid] = line.hold.next_moment()
            if moment == line.moment and line.time_timer is not None:
                return  # its timer is already set for that moment
        else:
            moment = line.hold.next_moment()
        if line.time_timer is not None:
            line.time_timer.cancel()
            line.time_timer = None
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
        b = line.bidding
        if b is not None:
            # the clock gave rows no write announced: every bidding line due now looks at the
            # whole collection, so the nearest of them still wins (rule 7b)
            now = self.db.now()
            for ln in b.lines:
                if ln is line or (ln.moment is not None and ln.moment <= now):
                    ln.seen = None
                    if ln is not line and ln.time_timer is not None:
                        ln.time_timer.cancel()
                        ln.time_timer = None
            self._poke(b, timed=True)
        elif line.pumping:
            line.pending = True
        else:
            self._start(line, timed=True)

    # -- the pump: look, run the head, hand off --

    def _start(self, line: Line, timed: bool = False) -> None:
        if line.bidding is not None:
            line.pending = False
            self._poke(line.bidding, timed=True)
            return
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
            ran = await self._run_head(line)
            if ran is None:
                return
            if ran:
                continue  # hand-off: the next looks at once (rule 4)
            self._schedule_time(line)  # rule 5: wait again from what the run saw
            return

    async def _run_head(self, line: Line) -> bool | None:
        """Run the line's head, skipping clients that left (rule 8). True: it was answered (it
        took, or its deadline or client fell during the run), and the next looks at once; False:
        it took nothing and keeps its place (rule 5); None: no one was left to run."""
        while line.queue and line.queue[0].gone:
            gone = line.queue[0]
            self._remove(gone)
            gone.done = True
        if not line.queue:
            return None
        head = line.queue[0]
        head.running = True
        self.runs += 1
        try:
            outcome = await self.runner(head)
        except Exception:  # the runner answers its own errors; this is a fault
            head.running = False
            self._finish(head, Answer(500, b'{"error":"internal fault"}'))
            return True
        head.running = False
        if outcome.final:
            self.taken += 1
            self._finish(head, outcome.answer)
            return True
        head.last = outcome.answer
        if head.timer is None or head.gone or self.closing:
            # its deadline fell during the run, or its client left: answer what it found
            self._finish(head, outcome.answer)
            return True
        return False

    # -- bidding (rule 7b) --

    def _attach(self, line: Line) -> None:
        """A new line joins its collection's bidding; a line of its own order starts one, which
        every line already picking from that collection joins."""
        prof = line.profile
        if prof is None or not BIDDING:
            return
        if prof.filter_key is not None:
            if len(self._filters) > 10_000:
                self._filters.clear()  # ids are never reused: lines made later just share less
            fid = self._filters.get(prof.filter_key)
            if fid is None:
                fid = self._filters[prof.filter_key] = next(self._filter_ids)
            prof.filter_id = fid
        b = self.biddings.get(prof.home)
        if b is None:
            if not prof.own:
                return
            if not self.biddings and self._track is not None:
                self._track(True)  # its first pass reads the collection: no history before now
            b = self.biddings[prof.home] = Bidding(prof.home)
            for ln in self.lines.values():
                if ln is not line and ln.bidding is None and ln.profile is not None \
                        and ln.profile.home == prof.home:
                    ln.bidding = b
                    b.lines[ln] = None
        line.bidding = b
        b.lines[line] = None
        if prof.own:
            b.own += 1

    def _detach(self, line: Line) -> None:
        b = line.bidding
        if b is None:
            return
        line.bidding = None
        if b.lines.pop(line, False) is None and line.profile is not None and line.profile.own:
            b.own -= 1
        b.stalled.discard(line)
        if b.own <= 0 and not b.running:
            self._dissolve(b)

    def _dissolve(self, b: Bidding) -> None:
        """No claim of its own order waits on the collection: its lines go back to their own
        pumps (a write that came meanwhile makes them look, in the order of their heads)."""
        if self.biddings.get(b.home) is b:
            del self.biddings[b.home]
            if not self.biddings and self._track is not None:
                self._track(False)
        if b.timer is not None:
            b.timer.cancel()
            b.timer = None
        lines = list(b.lines)
        b.lines.clear()
        for ln in lines:
            ln.bidding = None
        if b.pending and not self.closing:
            for ln in sorted((ln for ln in lines if ln.queue and not ln.pumping), key=Line.rank):
                self._start(ln)

    def _poke(self, b: Bidding, timed: bool = False) -> None:
        """A write (or the clock, or a new request: `timed`) for the bidding's lines."""
        if self.closing:
            return
        if b.running:
            b.pending = True
            return
        if not timed and self.loop.time() < b.throttle_until:
            b.pending = True  # one pass at the end of the look gap answers every write in it
            if b.timer is None:
                b.timer = self.loop.call_at(b.throttle_until, self._bid_gap_end, b)
            return
        if b.timer is not None:
            b.timer.cancel()
            b.timer = None
        b.running = True
        b.pending = False
        self.loop.create_task(self._auction(b))

    def _bid_gap_end(self, b: Bidding) -> None:
        b.timer = None
        if b.pending and not b.running and self.biddings.get(b.home) is b:
            self._poke(b, timed=True)

    async def _auction(self, b: Bidding) -> None:
        try:
            while not self.closing:
                b.pending = False
                members = [ln for ln in b.lines if ln.queue and not ln.pumping and ln not in b.stalled]
                if not members:
                    return
                winner, seq = self._bid_pass(members)
                if winner is None:
                    b.throttle_until = self.loop.time() + LOOK_THROTTLE_S
                    return
                # let disconnects already at the socket land before the winner runs (rule 8)
                for _ in range(3):
                    await asyncio.sleep(0)
                ran = await self._run_head(winner)
                if ran:
                    # its answer goes out before the others look again
                    for _ in range(3):
                        await asyncio.sleep(0)
                elif ran is False:
                    # it took nothing after all: out of this auction; it waits for new rows
                    b.stalled.add(winner)
                    winner.extra = set()
                    if winner.seen is not None:
                        winner.seen = seq
                    self._schedule_time(winner)
                # the others waited behind that run: they look again, each for the row it would
                # take now (and the winner's line, for its next request)
        finally:
            b.running = False
            if b.own <= 0 or not b.lines:
                self._dissolve(b)
            elif b.pending and not self.closing:
                self._poke(b)

    def _bid_pass(self, members: list[Line]) -> tuple[Line | None, int]:
        """Every member looks; the best bid's line, and the change the own-order looks saw."""
        own: list[Line] = []
        best_own: tuple | None = None
        alike: list[Line] = []  # lines that rank every row alike, which found one
        idle: list[Line] = []
        for ln in members:
            if ln.profile is not None and ln.profile.own:
                own.append(ln)
                continue
            self.looks += 1
            try:
                found = ln.hold.look()
            except Exception:
                found = True  # run it: the client is answered its error
            (alike if found else idle).append(ln)
        seq = 0
        if own:
            asks = [B.Ask(ln.profile, ln.seen, ln.extra) for ln in own]  # type: ignore[arg-type]
            seq, looks = B.look_all(self.db, asks)
            self.looks += len(own)
            for ln, lk in zip(own, looks, strict=False):
                if lk.failed:
                    alike.append(ln)
                    continue
                if lk.matched is not None:
                    ln.seen = seq
                    ln.extra = lk.matched
                if lk.rid is None:
                    idle.append(ln)
                    continue
                key = (lk.rank, ln.queue[0].arrival)
                if best_own is None or _before(key, best_own[0]):
                    best_own = (key, ln)
        now = self.loop.time()
        moments: dict = {}
        for ln in idle:
            ln.throttle_until = now + LOOK_THROTTLE_S
            self._schedule_time(ln, moments)
        winner: Line | None = best_own[1] if best_own is not None else None
        for ln in alike:  # a tie with any bid: the head held longest wins
            if winner is None or ln.queue[0].arrival < winner.queue[0].arrival:
                winner = ln
        return winner, seq

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


def _before(a: tuple, b: tuple) -> bool:
    """Bid `a` beats bid `b`: a lower rank, then the head held longer. Ranks of differently
    shaped orders that do not compare are a tie."""
    try:
        if a[0] != b[0]:
            return a[0] < b[0]
    except TypeError:
        pass
    return a[1] < b[1]
