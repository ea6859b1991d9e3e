"""Bidding: who gets the job when claims rank it each their own way (lines.py rule 7b, http.md §8.7
rule 3, "Who gets the job").

A claim whose order is its own (a key reads a parameter or a token claim: `order distance(pickup,
$1) limit 1`) is a line of its own, and while one is held, every line picking from its collection
waits in that collection's `Bidding`. A write makes one pass over them: every line looks, the
lines that bid by their own order in one read-locked pass among the rows written since each last
looked (`engine/bids.py`'s `look_all`, over the engine's written-ids history, kept while any
bidding stands: `written.py`, fed by `EnginePort.observe`); each that finds a row bids its rank. The best bid is the
lowest rank, on a tie the head held longest; a line ordered by a field ranks every row alike, so
it ties with any bid and its head's wait decides. Only the winner's head runs; the rest wait
behind that run and then look again, each for the row it would take then, until a pass finds
nothing. A winner whose run took nothing after all sits out the rest of that auction.

Writes during a pass or inside the 1 ms look gap after an empty one are answered by one more
pass (rule 3). When the last claim of its own order leaves, the bidding dissolves and its lines
go back to their own pumps, in the order of their heads.

`FENEC_HELD_BIDDING=off` races the lines instead (each looks and runs on its own, the first run
to write wins), for `bench/bidding_bench.py` to compare.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from ..engine import bids as B
from .looks import LOOK_THROTTLE_S
from .port import Timer
from .written import Written

if TYPE_CHECKING:
    from .lines import HeldClaims, Line

A = TypeVar("A")

BIDDING = os.environ.get("FENEC_HELD_BIDDING", "on") != "off"
MAX_FILTER_IDS = 10_000  # past it the ids start afresh: lines made later just share less


class Bidding(Generic[A]):
    """The lines picking from one collection while a claim of its own order waits there."""

    __slots__ = ("home", "lines", "own", "running", "pending", "throttle_until", "timer", "stalled")

    def __init__(self, home: str) -> None:
        self.home = home
        self.lines: dict[Line[A], None] = {}  # in the order they came
        self.own = 0  # how many of them order by their own key
        self.running = False
        self.pending = False
        self.throttle_until = 0.0
        self.timer: Timer | None = None
        self.stalled: set[Line[A]] = set()  # ran and took nothing: out of this auction's passes


class Auctions(Generic[A]):
    """The biddings of one set of lines, by collection."""

    def __init__(self, lines: HeldClaims[A]) -> None:
        self.lines = lines
        self.biddings: dict[str, Bidding[A]] = {}
        self._filters: dict[Hashable, int] = {}  # a bidding line's filter -> its id (B.Profile.filter_id)
        self._filter_ids = itertools.count()
        self.written = Written()  # the ids each write put, kept while any bidding stands

    def attach(self, line: Line[A]) -> None:
        """A new line joins its collection's bidding; a line of its own order starts one, which
        every line already picking from that collection joins."""
        prof = line.profile
        if prof is None or not BIDDING:
            return
        if prof.filter_key is not None:
            if len(self._filters) > MAX_FILTER_IDS:
                self._filters.clear()  # ids are never reused
            fid = self._filters.get(prof.filter_key)
            if fid is None:
                fid = self._filters[prof.filter_key] = next(self._filter_ids)
            prof.filter_id = fid
        b = self.biddings.get(prof.home)
        if b is None:
            if not prof.own:
                return
            if not self.biddings:
                # its first pass reads the collection; from then on the lines look among the ids written
                self.written.start(self.lines.engine.observe(self.written.note))
            b = self.biddings[prof.home] = Bidding(prof.home)
            for ln in self.lines.lines.values():
                if ln is not line and ln.bidding is None and ln.profile is not None \
                        and ln.profile.home == prof.home:
                    ln.bidding = b
                    b.lines[ln] = None
                    self.lines.rows.set_blind(ln, True)  # a bidding line is woken by every write
        line.bidding = b
        b.lines[line] = None
        self.lines.rows.set_blind(line, True)
        if prof.own:
            b.own += 1

    def detach(self, line: Line[A]) -> None:
        b = line.bidding
        if b is None:
            return
        line.bidding = None
        if b.lines.pop(line, False) is None and line.profile is not None and line.profile.own:
            b.own -= 1
        b.stalled.discard(line)
        if b.own <= 0 and not b.running:
            self._dissolve(b)

    def _dissolve(self, b: Bidding[A]) -> None:
        """No claim of its own order waits on the collection: its lines go back to their own
        pumps (a write that came meanwhile makes them look, in the order of their heads)."""
        if self.biddings.get(b.home) is b:
            del self.biddings[b.home]
            if not self.biddings:
                self.lines.engine.unobserve(self.written.note)
                self.written.stop()
        if b.timer is not None:
            b.timer.cancel()
            b.timer = None
        members = list(b.lines)
        b.lines.clear()
        for ln in members:
            ln.bidding = None
        if b.pending and not self.lines.closing:
            for ln in sorted((ln for ln in members if ln.queue and not ln.pumping), key=lambda ln: ln.rank()):
                self.lines.start(ln)

    def poke(self, b: Bidding[A], timed: bool = False) -> None:
        """A write (or the clock, or a new claim: `timed`) for the bidding's lines."""
        lines = self.lines
        if lines.closing:
            return
        if b.running:
            b.pending = True
            return
        driver = lines.driver
        if not timed and driver.time() < b.throttle_until:
            b.pending = True  # one pass at the end of the look gap answers every write in it
            if b.timer is None:
                b.timer = driver.call_at(b.throttle_until, lambda: self._gap_end(b))
            return
        if b.timer is not None:
            b.timer.cancel()
            b.timer = None
        b.running = True
        b.pending = False
        self._pass(b)

    def _gap_end(self, b: Bidding[A]) -> None:
        b.timer = None
        if b.pending and not b.running and self.biddings.get(b.home) is b:
            self.poke(b, timed=True)

    def _pass(self, b: Bidding[A]) -> None:
        """One pass of the auction: every member looks; the winner's head runs."""
        lines = self.lines
        if lines.closing:
            self._end(b)
            return
        b.pending = False
        members = [ln for ln in b.lines if ln.queue and not ln.pumping and ln not in b.stalled]
        if not members:
            self._end(b)
            return
        winner, seq = self._bids(members)
        if winner is None:
            b.throttle_until = lines.driver.time() + LOOK_THROTTLE_S
            self._end(b)
            return
        # let disconnects already on their way land before the winner runs (rule 8)
        lines.driver.settle(lambda: lines.run_head(winner, lambda ln, ran: self._ran(b, ln, seq, ran)))

    def _ran(self, b: Bidding[A], winner: Line[A], seq: int, ran: bool | None) -> None:
        if ran:
            # its answer goes out before the others look again
            self.lines.driver.settle(lambda: self._pass(b))
            return
        if ran is False:
            # it took nothing after all: out of this auction; it waits for new rows
            b.stalled.add(winner)
            winner.extra = set()
            if winner.seen is not None:
                winner.seen = seq
            self.lines.time.schedule(winner)
        # the others waited behind that run: they look again, each for the row it would take
        # now (and the winner's line, for its next claim)
        self._pass(b)

    def _end(self, b: Bidding[A]) -> None:
        b.running = False
        if b.own <= 0 or not b.lines:
            self._dissolve(b)
        elif b.pending and not self.lines.closing:
            self.poke(b)

    def _bids(self, members: list[Line[A]]) -> tuple[Line[A] | None, int]:
        """Every member looks; the best bid's line, and the change the own-order looks saw."""
        lines = self.lines
        own: list[Line[A]] = []
        best_own: tuple[tuple[object, int], Line[A]] | None = None
        alike: list[Line[A]] = []  # lines that rank every row alike, which found one
        idle: list[Line[A]] = []
        for ln in members:
            if ln.profile is not None and ln.profile.own:
                own.append(ln)
                continue
            (alike if lines.look(ln) else idle).append(ln)
        seq = 0
        if own:
            asks = [B.Ask(ln.profile, ln.seen, ln.extra) for ln in own if ln.profile is not None]
            engine = lines.engine
            seq, looks = engine.look(lambda: (engine.seq, B.look_all(asks, self.written.since)))
            lines.looks += len(own)
            for ln, lk in zip(own, looks, strict=True):
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
        now = lines.driver.time()
        moments: dict[int, int | None] = {}
        for ln in idle:
            ln.throttle_until = now + LOOK_THROTTLE_S
            lines.time.schedule(ln, moments)
        winner: Line[A] | None = best_own[1] if best_own is not None else None
        for ln in alike:  # a tie with any bid: the head held longest wins
            if winner is None or ln.queue[0].arrival < winner.queue[0].arrival:
                winner = ln
        return winner, seq


def _before(a: tuple[object, int], b: tuple[object, int]) -> bool:
    """Bid `a` beats bid `b`: a lower rank, then the head held longer. Ranks of differently
    shaped orders that do not compare are a tie."""
    try:
        if a[0] != b[0]:
            return bool(a[0] < b[0])  # type: ignore[operator]
    except TypeError:
        pass
    return a[1] < b[1]
