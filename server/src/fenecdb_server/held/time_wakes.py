"""Time wakes (fairness rule 6 of lines.py): a line sleeps until the clock alone may give it a row.

No write announces that a delayed job came due or that a lease lapsed. So a line that looked and
found nothing asks its claim for `next_moment()` (the engine reads it from the filter's `now()`
comparisons and the `@sorted`/`@ttl` indexes) and sets one timer for it. At the timer it looks,
and its head runs only if a row is there. A timer that fires before the moment (timers have a
grain; the engine's clock is another clock than the driver's) sets itself again for the rest:
a delayed job is never taken before its time. A line with no moment has no timer.

Lines that bid share one filter when their parameters and rules are bound alike: one pass asks
the engine once per filter (`moments`), and a line whose timer is already set for that moment
keeps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from .lines import HeldClaims, Line

A = TypeVar("A")

EARLY_RETRY_S = 0.0005  # a timer that fired early sleeps at least this long before it looks again


class TimeWakes(Generic[A]):
    def __init__(self, lines: HeldClaims[A]) -> None:
        self.lines = lines

    def schedule(self, line: Line[A], moments: dict[int, int | None] | None = None) -> None:
        """Set the line's timer for its claim's next moment (none if it has none)."""
        if not line.queue:
            if line.time_timer is not None:
                line.time_timer.cancel()
                line.time_timer = None
            return
        engine = self.lines.engine
        fid = line.profile.filter_id if line.profile is not None else None
        if moments is not None and fid is not None and len(line.collections) == 1:
            # lines with one filter (its parameters and rules bound) share the moment
            if fid in moments:
                moment = moments[fid]
            else:
                moment = moments[fid] = self._moment(line)
            if moment == line.moment and line.time_timer is not None:
                return  # its timer is already set for that moment
        else:
            moment = self._moment(line)
        if line.time_timer is not None:
            line.time_timer.cancel()
            line.time_timer = None
        line.moment = moment
        if moment is None:
            return
        self._sleep(line, max(engine.until(moment), 0.0))

    def sooner(self, line: Line[A], moment: int) -> None:
        """A row written may give the line something at `moment` (lines.py rule 2b): its timer
        is set for it unless it is set for that moment or sooner already."""
        if not line.queue or (line.time_timer is not None and line.moment is not None and line.moment <= moment):
            return
        if line.time_timer is not None:
            line.time_timer.cancel()
        line.moment = moment
        self._sleep(line, max(self.lines.engine.until(moment), 0.0))

    def _moment(self, line: Line[A]) -> int | None:
        try:
            return self.lines.engine.look(line.claim.next_moment)
        except Exception:
            return None  # woken by writes alone

    def _sleep(self, line: Line[A], delay: float) -> None:
        driver = self.lines.driver
        line.time_timer = driver.call_at(driver.time() + delay, lambda: self.due(line))

    def due(self, line: Line[A]) -> None:
        """The line's timer fired: look if its moment has come (and every bidding line due)."""
        line.time_timer = None
        if not line.queue:
            return
        lines = self.lines
        engine = lines.engine
        moment = line.moment
        if moment is not None and engine.now() < moment:
            # woken early (timer granularity): sleep the rest, never run early
            self._sleep(line, max(engine.until(moment), EARLY_RETRY_S))
            return
        lines.wakeups += 1
        b = line.bidding
        if b is not None:
            # the clock gave rows no write announced: every bidding line due now looks at the
            # whole collection, so the nearest of them still wins (rule 7b)
            now = engine.now()
            for ln in b.lines:
                if ln is line or (ln.moment is not None and ln.moment <= now):
                    ln.seen = None
                    if ln is not line and ln.time_timer is not None:
                        ln.time_timer.cancel()
                        ln.time_timer = None
            lines.auctions.poke(b, timed=True)
        elif line.pumping:
            line.pending = True
        elif not lines.rows.clock_check(line):  # rule 6: the rows that came due, when it can tell
            lines.start(line)
