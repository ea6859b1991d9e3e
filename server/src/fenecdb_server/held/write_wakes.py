"""Write wakes (fairness rules 2, 3 and 7 of lines.py): a committed write wakes the held lines
it may give a row, in one pass, oldest head first.

The writer's thread is told twice under its write lock, and both must stay cheap: `note` keeps
the write's ops, `announce` hops onto the driver's thread if a line waits on a collection
written. There `wake` works out the lines affected (every line of a collection whose rows are
not known or whose schema changed, the blind lines, and those a written row passes: row_checks.py),
then starts each in rank order, or leaves it pending while its look gap lasts (rule 3), its gap's
end (`throttle_end`) starting it and the older lines due by then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from .looks import CLOCK_GRAIN_S
from .port import Timer

if TYPE_CHECKING:
    from .bidding import Bidding
    from .lines import HeldClaims, Line

A = TypeVar("A")


class WriteWakes(Generic[A]):
    def __init__(self, lines: HeldClaims[A]) -> None:
        self.lines = lines
        self.noted_seq = -1  # the last write's ops, noted for its announcement (writer's thread)
        self.noted_ops: list | None = None

    def note(self, seq: int, ops: list) -> None:
        """A write observer: told each committed write's ops just before its announcement."""
        self.noted_seq = seq
        self.noted_ops = ops

    def announce(self, collections: frozenset[str], seq: int) -> None:
        by = self.lines.by_collection
        if not by:
            return
        for name in collections:
            if name in by:
                break
        else:
            return
        self.lines.announced += 1
        ops = self.noted_ops if self.noted_seq == seq else None
        self.lines.driver.soon(lambda: self.wake(collections, ops))

    def wake(self, collections: frozenset[str], ops: list | None = None) -> None:
        affected: set[Line[A]] = set()
        if ops is None:  # the rows written are not known: every line on them looks
            for name in collections:
                lines = self.lines.by_collection.get(name)
                if lines:
                    affected |= lines
        else:
            written: dict[str, list[dict]] = {}
            for op in ops:
                kind = op[0]
                if kind == "p":
                    rows = written.get(op[1])
                    if rows is None:
                        written[op[1]] = [op[3]]
                    else:
                        rows.append(op[3])
                elif kind == "c" or kind == "x" or kind == "i" or kind == "q":
                    written[op[1]] = []
                    lines = self.lines.by_collection.get(op[1])
                    if lines:
                        affected |= lines  # a schema change: every line on it looks
                        if kind == "q":
                            self.lines.rows.controlled(lines)
            for name in collections:
                lines = self.lines.rows.blind.get(name)
                if lines:
                    affected |= lines
            if written:
                self.lines.rows.check(written, affected)
        if not affected:
            return
        now = self.lines.driver.time()
        poked: list[Bidding[A]] = []
        if self.lines.auctions.biddings:
            # bidding lines look together, in one pass of their collection's bidding (rule 7b)
            rest: set[Line[A]] = set()
            for line in affected:
                b = line.bidding
                if b is None:
                    rest.add(line)
                elif line.queue:
                    self.lines.wakeups += 1
                    if b not in poked:
                        poked.append(b)
                        b.stalled.clear()
            affected = rest
        # a line behind an older head that is still in its look gap waits for it (rule 7)
        behind = 0.0
        for line in sorted((ln for ln in affected if ln.queue), key=_rank):
            self.lines.wakeups += 1
            if line.pumping:
                line.pending = True
            elif now < line.throttle_until or now < behind:
                line.pending = True
                until = max(line.throttle_until, behind)
                behind = until
                if line.throttle_timer is None:
                    line.throttle_timer = self.at(until, self.throttle_end, line)
            else:
                self.lines.start(line)
        for b in poked:
            self.lines.auctions.poke(b)

    def at(self, when: float, fn: Callable[[Line[A]], None], line: Line[A]) -> Timer:
        return self.lines.driver.call_at(when, lambda: fn(line))

    def throttle_end(self, line: Line[A]) -> None:
        line.throttle_timer = None
        if not (line.pending and line.queue and not line.pumping):
            return
        # Fairness across lines (rule 7) holds through the throttle too: a line whose head is
        # older but whose gap ends a little later goes first, so this one waits for it.
        # The line whose timer fired is due whatever the clock reads: uvloop's clock counts whole
        # milliseconds, so at the timer `now` can be 15187.13 against a gap that ends at
        # 15187.130000000001, and a strict comparison would leave a worker asleep beside a
        # ready job until its deadline. The other lines get the clock's grain as slack.
        due_by = self.lines.driver.time() + CLOCK_GRAIN_S
        ready = [ln for ln in self.lines.lines.values() if ln.pending and ln.queue and not ln.pumping]
        rank = line.rank()
        later = max((ln.throttle_until for ln in ready if ln.rank() < rank), default=0.0)
        if later > due_by:
            line.throttle_timer = self.at(later, self.throttle_end, line)
            return
        for ln in sorted((ln for ln in ready if ln is line or ln.throttle_until <= due_by), key=_rank):
            if ln.throttle_timer is not None:
                ln.throttle_timer.cancel()
                ln.throttle_timer = None
            if ln.pending and ln.queue and not ln.pumping:  # an earlier start may have run it
                self.lines.start(ln)


def _rank(line: Line[A]) -> int:
    return line.rank()
