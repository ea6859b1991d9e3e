"""Which held lines a written row may give a row (fairness rule 2b of lines.py), and the rows
the clock brought (rule 6), checked against a line's filter without a look.

Lines are indexed here by an equality term of their filter (`queue = $1`: collection, field,
bound value): a written row is checked only against the lines whose value it carries (`keyed`),
and against the lines with no such term (`loose`). A *blind* line (`blind`) is woken by every
write to its collections, as a line that must look. A check is one `claim.takes` of a row under
the shared read lock; a row that does not pass may still come due, and brings the line's timer
forward (`claim.moment_of`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from .lines import HeldClaims, Line

A = TypeVar("A")


class RowChecks(Generic[A]):
    """The lines of one `Lines` indexed for rule 2b, and the rows checked (`checks`)."""

    def __init__(self, lines: HeldClaims[A]) -> None:
        self.lines = lines
        # lines by collection, the fields of their filter's equality terms and the values those
        # bind; lines with no such term by collection; the blind lines by collection
        self.keyed: dict[str, dict[tuple[str, ...], dict[tuple[Hashable, ...], set[Line[A]]]]] = {}
        self.loose: dict[str, set[Line[A]]] = {}
        self.blind: dict[str, set[Line[A]]] = {}
        self.checks = 0  # written rows checked against a line's filter

    def check(self, written: dict[str, list[dict]], affected: set[Line[A]]) -> None:
        """Rule 2b: add to `affected` the lines some written row passes the filter of; bring
        forward the timers of those it may pass later."""
        pairs: list[tuple[Line[A], str, list[dict]]] = []
        for name, rows in written.items():
            if not rows:
                continue
            loose = self.loose.get(name)
            if loose:
                for line in loose:
                    if line not in affected:
                        pairs.append((line, name, rows))
            fields = self.keyed.get(name)
            if fields:
                for names, by_value in fields.items():
                    hits: dict[Line[A], list[dict]] = {}
                    for row in rows:
                        # a value of another type (None) passes no `field = text or int` term
                        try:
                            lines = by_value.get(tuple([row.get(f) for f in names]))
                        except TypeError:  # unhashable: the field's type changed under the line
                            lines = set().union(*by_value.values())
                        if lines:
                            for line in lines:
                                got = hits.get(line)
                                if got is None:
                                    hits[line] = [row]
                                else:
                                    got.append(row)
                    for line, got in hits.items():
                        if line not in affected:
                            pairs.append((line, name, got))
        if not pairs:
            return
        sooner: list[tuple[Line[A], int]] = []

        def check() -> None:
            for line, name, rows in pairs:
                if not line.queue or line.blind or line in affected:
                    continue
                claim = line.claim
                moment = line.moment
                for row in rows:
                    rid = row["id"]
                    self.checks += 1
                    if claim.takes(name, rid):
                        affected.add(line)
                        line.sure = True
                        break
                    m = claim.moment_of(name, rid)
                    if m is not None and (moment is None or m < moment):
                        moment = m
                else:
                    if moment is not None and moment != line.moment:
                        sooner.append((line, moment))

        try:
            self.lines.engine.look(check)
        except Exception:
            for line, _name, _rows in pairs:  # it cannot say: they look, as a write of unknown rows
                affected.add(line)
            return
        for line, moment in sooner:
            if line not in affected:
                self.lines.time.sooner(line, moment)

    def clock_check(self, line: Line[A]) -> bool:
        """Rule 6 for a line that is not blind: check the rows the clock brought since its last
        empty look. True when none passes (the line sleeps again); False when it must look."""
        since = line.since
        if since is None or line.blind:
            return False
        claim = line.claim

        def read() -> int | None:
            got = claim.came_due(since)
            if got is None:
                return None
            for name, rid in got[1]:
                self.checks += 1
                if claim.takes(name, rid):
                    return None
            return got[0]

        try:
            now = self.lines.engine.look(read)
        except Exception:
            return False
        if now is None:
            return False
        line.since = now
        self.lines.time.schedule(line)
        return True

    def controlled(self, lines: set[Line[A]]) -> None:
        """A queue's controls changed (engine/controls.py, op `q`): its lines are woken by every
        write from now on, since an ack, which writes no row, can free a cap (rule 2b)."""
        for line in lines:
            if line.wakes is not None:
                self.index(line, False)
                line.wakes = None
                line.blind = True
                self.index(line, True)

    def set_blind(self, line: Line[A], blind: bool) -> None:
        if line.blind is blind or (not blind and (line.wakes is None or line.bidding is not None)):
            return
        line.blind = blind
        for name in line.collections:
            _file(self.blind, name, line, blind)

    def index(self, line: Line[A], add: bool) -> None:
        """Enter (or take out) the line in the indexes a written row is checked through."""
        if line.blind:
            for name in line.collections:
                _file(self.blind, name, line, add)
        for name, field, value in line.wakes or ():
            if not field:
                _file(self.loose, name, line, add)
                continue
            if add:
                self.keyed.setdefault(name, {}).setdefault(field, {}).setdefault(value, set()).add(line)
                continue
            fields = self.keyed.get(name)
            if fields is None:
                continue
            by_value = fields.get(field)
            if by_value is None:
                continue
            lines = by_value.get(value)
            if lines is not None:
                lines.discard(line)
                if not lines:
                    del by_value[value]
                    if not by_value:
                        del fields[field]
                        if not fields:
                            del self.keyed[name]


def _file(index: dict[str, set[Line[A]]], name: str, line: Line[A], add: bool) -> None:
    """Enter the line in `index[name]`, or take it out (an emptied set is dropped with its key)."""
    if add:
        index.setdefault(name, set()).add(line)
        return
    lines = index.get(name)
    if lines is not None:
        lines.discard(line)
        if not lines:
            del index[name]
