"""The rows written since a change: what a held claim that bids needs to look at (http.md §8.7).

A claim held at the server found nothing when it last looked, at some change `seq`. Only a row
written since then, or the clock, can give it something. So instead of reading the collection
again, a line looks among the ids written since `seq`: this history keeps, per committed write,
the ids it put in each collection (deletions never give a claim a row, so they are not kept).

The history is bounded: it keeps at most `MAX_IDS` ids. Asked about a `seq` older than what it
still holds, or across a schema change of the collection, it answers None, and the caller looks
the ordinary way instead. It is kept only while someone asked for it (`on`), so a database used
in process, or a server with no claim bidding, pays nothing. It is fed by the engine as a write
observer (`Engine.observe`): `note` runs under the write lock, after each committed write.
"""

from __future__ import annotations

from collections import deque

MAX_IDS = 100_000
SCHEMA = "*"  # an entry marking a schema change of the collection: ids before it mean nothing


class Written:
    __slots__ = ("on", "entries", "count", "floor")

    def __init__(self) -> None:
        self.on = False
        self.entries: deque[tuple[int, dict[str, set[int] | str]]] = deque()
        self.count = 0
        self.floor = 0  # a seq at or after which the history is whole

    def start(self, seq: int) -> None:
        if not self.on:
            self.on = True
            self.floor = seq

    def stop(self) -> None:
        self.on = False
        self.entries.clear()
        self.count = 0

    def note(self, seq: int, ops: list) -> None:
        """Under the write lock, after a write committed as change `seq`: remember its ids."""
        per: dict[str, set[int] | str] = {}
        n = 0
        for op in ops:
            kind = op[0]
            if kind == "p":
                ids = per.get(op[1])
                if ids is None:
                    ids = per[op[1]] = set()
                if type(ids) is set:
                    ids.add(op[2])
                    n += 1
            elif kind in ("c", "x", "i", "q"):  # q: a queue's controls (a resume gives rows none wrote)
                per[op[1]] = SCHEMA
        if not per:
            return
        self.entries.append((seq, per))
        self.count += n
        while self.count > MAX_IDS and len(self.entries) > 1:
            old_seq, old = self.entries.popleft()
            self.count -= sum(len(v) for v in old.values() if type(v) is set)
            self.floor = old_seq

    def since(self, coll: str, seq: int) -> set[int] | None:
        """Under the read lock: the ids put in `coll` by writes after change `seq`, or None when
        the history cannot say (too old, or the collection's schema changed since)."""
        if not self.on or seq < self.floor:
            return None
        out: set[int] = set()
        for entry_seq, per in reversed(self.entries):
            if entry_seq <= seq:
                break
            ids = per.get(coll)
            if ids is None:
                continue
            if type(ids) is not set:
                return None
            out |= ids
        return out
