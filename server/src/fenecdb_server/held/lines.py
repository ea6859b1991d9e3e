"""Held claims: the waiting lines, and the fairness contract they keep (http.md §8).

A claim sent to wait (`Fenec-Wait: <ms>` over HTTP, `Database.query(..., wait=ms)` in process)
is run once at once. If it took nothing it is handed to these lines, which keep it waiting and
run it again at the first moment it could take something, or answer it at its deadline with
what its last run answered. The state here is plain Python: a `Driver` (port.py) gives it a
clock, timers and runs, and the engine answers through `EnginePort` and `Claim`.

The fairness contract
---------------------
1. Lines. Held claims whose `set`/`del` statements would pick the same rows (the claim's
   `line_key`: same collection, same filter with its parameters bound, same order) wait in one
   line. A line is first-come first-served: its head is the claim held longest.
2. A committed write wakes only the lines it may give a row. A woken line spends one *look*
   (`claim.would_take()`, a one-row read under the shared read lock); only when the look finds
   a row does its head *run* (the real request, under the write lock). A write therefore costs
   a line one cheap read, never one write per waiting worker.
2b. What a write may give. After a look that found nothing, only a row a write put (inserted
   or updated: its new values) or the clock can give the line a row; a delete never does. So a
   write does not make such a line look: the rows it put, as they are when the line is woken
   (a row deleted since is passed over), are *checked* against the line's filter
   (`claim.takes`, with its token's rules), and only a row that passes wakes the line. That
   check is the line's look: its head runs without reading the collection again (rules 3 to 5
   hold as for a look that found a row). A row that does not pass may still come due: the line's
   timer is brought forward to that row's moment (`claim.moment_of`, rule 6). Lines are
   indexed by an equality term of their filter (`queue = $1`: collection, field, bound value),
   so a written row is checked only against the lines whose value it carries, and against the
   lines with no such term: a write's cost is its rows times the lines they may concern, never
   every held line. A line is *blind*, woken by every write to its collections as before,
   until its first look found nothing (unless its claim is one set/del alone, whose first run
   taking nothing says as much), after a run that took nothing (rule 5: a `require` may be
   what stopped it), while it bids (rule 7b), and for a write whose rows are not known; a
   schema change of a collection wakes every line on it.
3. A look that found nothing stands for the whole line, and the line does not look again for
   1 ms because of writes: writes inside that gap are remembered and answered by one look at
   its end, read on the driver's clock to its grain (uvloop's counts whole milliseconds).
   The throttle never delays a look due to the clock or to a hand-off.
4. Hand-off. A head whose run took something is answered and leaves; the next claim of the
   line looks at once, because more rows may be ready: a burst of jobs is drained by the
   waiting workers in arrival order, the oldest job to the longest-waiting worker.
5. A run that took nothing after all (another line was faster, a `require` was not met) keeps
   the claim its place; the line waits again from the state that run saw.
6. Time (time_wakes.py). No write announces that a delayed job came due or that a lease
   lapsed, so each line sleeps until `claim.next_moment()`, looks, and runs only if a row is
   there. A line that is not blind (rule 2b) and knows the clock of its last empty look checks
   only the rows that came due since (`claim.came_due`: a range of the @sorted index), and
   looks only when one passes. A wake that comes early goes back to sleep: a delayed job is never taken before its
   time. With nothing written and nothing due, a held claim costs no CPU: no timer, no task.
7. Across lines. One wake pass visits every affected line in ascending `Line.rank()`, the
   head's arrival, so on a row several lines could take, the claim held longest across lines
   runs first (§8.7 rules 1 and 2).
7b. Bidding (bidding.py, §8.7 rule 3): a claim whose order is its own bids for a row against
   the other lines picking from its collection; the best rank wins, a tie goes to the head held
   longest.
8. A client gone. Before its head runs, a line lets what is on its way land (`Driver.settle`)
   and drops the heads whose client left without running them; the turn passes at once to the
   next, which takes the row. A claim whose client leaves while nothing is ready is simply
   forgotten.
9. A run in flight is never abandoned: a deadline or a shutdown that falls during it is
   answered with that run's answer, so a row taken is always delivered (a lease to no one is a
   bug).
10. Shutdown. From then on nothing is held: every held claim is answered at once with what its
   last run answered, and new claims are run once.

A look that raises counts as finding a row: the head runs, and its run answers the error.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from .bidding import Auctions
from .looks import LOOK_THROTTLE_S, would_take
from .port import Claim, Driver, EnginePort, Timer
from .row_checks import RowChecks
from .time_wakes import TimeWakes
from .write_wakes import WriteWakes

if TYPE_CHECKING:
    from ..engine.bids import Profile
    from .bidding import Bidding

A = TypeVar("A")

MAX_WAIT_MS = 30_000  # the longest a claim is held (http.md §8): capped once, by `hold`


class Outcome(Generic[A]):
    """What one run of a held claim gave. `final` ends the wait (rows taken, an error other
    than a `require` miss, a replayed answer); otherwise `answer` is what a deadline answers.
    (A record class: the server README's "Compiled modules" says how they are written.)"""

    __slots__ = ("final", "answer")

    def __init__(self, final: bool, answer: A) -> None:
        self.final = final
        self.answer = answer

    def __repr__(self) -> str:
        return f"Outcome(final={self.final!r}, answer={self.answer!r})"


_arrivals = itertools.count()


class HeldClaim(Generic[A]):
    """One held claim: what its runner needs (`payload`), its last answer, and who is told."""

    __slots__ = ("payload", "last", "on_answer", "arrival", "line", "gone", "running", "done", "timer")

    def __init__(self, payload: object, last: A, on_answer: Callable[[A], None]) -> None:
        self.payload = payload  # the adapter's own: the request's statements, token, ...
        self.last = last
        self.on_answer = on_answer  # told once, with the answer; never when forgotten
        self.arrival = next(_arrivals)
        self.line: Line[A] | None = None
        self.gone = False
        self.running = False
        self.done = False
        self.timer: Timer | None = None


class Line(Generic[A]):
    """The held claims that would take the same rows (rule 1), first come first served."""

    __slots__ = ("key", "claim", "queue", "collections", "pumping", "pending", "throttle_until",
                 "throttle_timer", "time_timer", "moment", "profile", "bidding", "seen", "extra", "wakes",
                 "blind", "since", "sure")

    def __init__(self, key: Hashable, claim: Claim) -> None:
        self.key = key
        self.claim = claim
        self.queue: deque[HeldClaim[A]] = deque()
        self.collections: frozenset[str] = claim.collections
        self.pumping = False  # looking or running: a wake meanwhile only sets `pending`
        self.pending = False  # a write came while the line was busy or throttled
        self.throttle_until = 0.0
        self.throttle_timer: Timer | None = None
        self.time_timer: Timer | None = None
        self.moment: int | None = None
        # bidding (rule 7b): what the line bids with, the change it last looked at (None: look
        # at the whole collection) and the rows it matched then and did not get
        self.profile: Profile | None = claim.bid_profile()
        self.bidding: Bidding[A] | None = None
        self.seen: int | None = None
        self.extra: set[int] = set()
        # rule 2b: where a written row is checked for the line (None: every write wakes it), and
        # whether it is woken by every write to its collections for now
        self.wakes: list[tuple[str, tuple[str, ...], tuple[Hashable, ...]]] | None = claim.wakes()
        self.blind = True
        self.since: int | None = None  # the engine's clock before its last look that found nothing
        self.sure = False  # a written row passed its filter: that check was its look (rule 2b)

    def rank(self) -> int:
        """The key a wake pass orders lines by (fairness rule 7): its head's arrival."""
        return self.queue[0].arrival


class HeldClaims(Generic[A]):
    """The held claims of one engine, driven by one `Driver`."""

    def __init__(self, engine: EnginePort, driver: Driver[A]) -> None:
        self.engine = engine
        self.driver = driver
        self.lines: dict[Hashable, Line[A]] = {}
        self.by_collection: dict[str, set[Line[A]]] = {}
        self.rows: RowChecks[A] = RowChecks(self)  # rule 2b: lines indexed for a written row's check
        self.closing = False
        self.held = 0
        self.looks = 0
        self.runs = 0
        self.taken = 0
        self.wakeups = 0
        self.announced = 0  # writes that woke held lines: each made one wake pass
        self.auctions: Auctions[A] = Auctions(self)
        self.time: TimeWakes[A] = TimeWakes(self)
        self.writes: WriteWakes[A] = WriteWakes(self)
        engine.observe(self.writes.note)
        engine.listen(self.writes.announce)

    @property
    def checks(self) -> int:
        """Written rows checked against a line's filter (rule 2b: row_checks.py)."""
        return self.rows.checks

    # -- holding --

    def hold(self, claim: Claim, held: HeldClaim[A], wait_ms: int, seen_seq: int) -> None:
        """Hold a claim whose first run (at change `seen_seq`) took nothing and answered
        `held.last`. The held claim is told its answer by a run that took something, or at its
        deadline (at once when shutting down)."""
        if self.closing:
            held.done = True
            held.on_answer(held.last)
            return
        key = claim.line_key
        line = self.lines.get(key)
        fresh = line is None
        if line is None:
            line = Line(key, claim)
            line.seen = seen_seq
            # rule 2b: a claim of one set/del whose run took nothing saw no row pass its filter
            line.blind = line.wakes is None or not claim.plain
            self.lines[key] = line
            for name in line.collections:
                self.by_collection.setdefault(name, set()).add(line)
            self.rows.index(line, True)
            self.auctions.attach(line)
        elif line.seen is not None and seen_seq < line.seen:
            line.seen = seen_seq
        line.queue.append(held)
        held.line = line
        self.held += 1
        wait_s = min(wait_ms, MAX_WAIT_MS) / 1000
        held.timer = self.driver.call_at(self.driver.time() + wait_s, lambda: self._deadline(held))
        if self.engine.seq != seen_seq:
            # a write landed between the first run and now: look at once
            if not line.pumping:
                self.start(line)
            else:
                line.pending = True
        elif fresh:
            self.time.schedule(line)

    def forget(self, held: HeldClaim[A]) -> None:
        """The client went away (fairness rule 8): drop the claim unless it is running."""
        held.gone = True
        if not held.running and not held.done:
            self._remove(held)
            held.done = True

    def _deadline(self, held: HeldClaim[A]) -> None:
        held.timer = None
        if held.done:
            return
        if held.running:  # rule 9: the run in flight answers it (see _ran)
            return
        self.finish(held, held.last)

    def finish(self, held: HeldClaim[A], answer: A) -> None:
        if held.done:
            return
        held.done = True
        self._remove(held)
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        held.on_answer(answer)

    def _remove(self, held: HeldClaim[A]) -> None:
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
            self.drop_line(line)

    def drop_line(self, line: Line[A]) -> None:
        if line.bidding is not None:
            self.auctions.detach(line)
        if self.lines.get(line.key) is line:
            del self.lines[line.key]
        self.rows.index(line, False)
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

    # -- the pump: look, run the head, hand off --

    def start(self, line: Line[A]) -> None:
        """Wake a line now: look, and run its head if a row is there."""
        if line.bidding is not None:
            line.pending = False
            self.auctions.poke(line.bidding, timed=True)
            return
        line.pumping = True
        line.pending = False
        if line.throttle_timer is not None:
            line.throttle_timer.cancel()
            line.throttle_timer = None
        self._pump(line)

    def look(self, line: Line[A]) -> bool:
        """One look for the whole line (rule 2); an error counts as a row (its run answers it)."""
        self.looks += 1
        return would_take(self.engine, line.claim)

    def _pump(self, line: Line[A]) -> None:
        if not line.queue or self.closing:
            self._pump_end(line)
            return
        line.pending = False
        if line.sure:  # rule 2b: the check that woke it found the row, and stands for its look
            line.sure = False
            self.looks += 1
            found = True
        else:
            since = self.engine.now()  # the look reads the clock after this: rows due by then it sees
            found = self.look(line)
            if not found:
                line.since = since
        if not found:
            if line.blind:
                self.rows.set_blind(line, False)  # rule 2b: from now on the rows written are checked
            line.throttle_until = self.driver.time() + LOOK_THROTTLE_S
            self.time.schedule(line)
            self._pump_end(line)
            return
        # a row is there: the head runs, once what is on its way has landed (rule 8)
        self.driver.settle(lambda: self.run_head(line, self._pumped))

    def _pumped(self, line: Line[A], ran: bool | None) -> None:
        if ran:
            self._pump(line)  # hand-off: the next looks at once (rule 4)
            return
        if ran is False:
            self.rows.set_blind(line, True)  # rule 2b: a row may be there, and it took nothing
            self.time.schedule(line)  # rule 5: wait again from what the run saw
        self._pump_end(line)

    def _pump_end(self, line: Line[A]) -> None:
        line.pumping = False
        if not line.queue:
            self.drop_line(line)
        elif line.pending and not self.closing:
            # writes came while the line ran: one look for all of them, throttled
            if self.driver.time() < line.throttle_until:
                if line.throttle_timer is None:
                    line.throttle_timer = self.writes.at(line.throttle_until, self.writes.throttle_end, line)
            else:
                self.start(line)

    def run_head(self, line: Line[A], then: Callable[[Line[A], bool | None], None]) -> None:
        """Run the line's head, skipping clients that left (rule 8), then `then(line, ran)`:
        True, it was answered (it took, or its deadline or client fell during the run) and the
        next looks at once; False, it took nothing and keeps its place (rule 5); None, no one
        was left to run."""
        while line.queue and line.queue[0].gone:
            gone = line.queue[0]
            self._remove(gone)
            gone.done = True
        if not line.queue:
            then(line, None)
            return
        head = line.queue[0]
        head.running = True
        self.runs += 1
        self.driver.run(head, lambda outcome: then(line, self._ran(head, outcome)))

    def _ran(self, head: HeldClaim[A], outcome: Outcome[A]) -> bool:
        head.running = False
        if outcome.final:
            self.taken += 1
            self.finish(head, outcome.answer)
            return True
        head.last = outcome.answer
        if head.timer is None or head.gone or self.closing:
            # its deadline fell during the run, or its client left: answer what it found
            self.finish(head, outcome.answer)
            return True
        return False

    # -- shutdown (rule 10) --

    def shutdown(self) -> int:
        """Answer every held claim with its last answer; hold nothing from now on. Returns how
        many were answered."""
        self.closing = True
        count = 0
        for line in list(self.lines.values()):
            for held in list(line.queue):
                if not held.running:
                    self.finish(held, held.last)
                    count += 1
            if not line.queue and not line.pumping:
                self.drop_line(line)
        return count

    def close(self) -> int:
        """Shut down and stop listening to the engine."""
        count = self.shutdown()
        self.engine.unlisten(self.writes.announce)
        self.engine.unobserve(self.writes.note)
        return count
