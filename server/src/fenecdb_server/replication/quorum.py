"""`--sync-replicas N`: a write is answered once N replicas hold it on their own disks.

Each replica says which change its disk holds (`POST /_replication/ack`, sent by its follower as
its fsyncs cover the records it applied: `follower.py`); the primary keeps the highest each
replica said (`Replica.acked`, one count a replica however often it reconnects) and, on its event
loop, calls back each answer waiting for a change once N distinct replicas are at or past it. An
answer that waits `wait_s` without that is refused 503: the write is on the primary's disk, and
on fewer replicas' than promised, so a failover may lose it; the client is told so, never told it
is safe. Nothing of this runs on a server without `--sync-replicas`.

`level` is the highest change N replicas have held at once: it only grows (a replica that leaves
takes nothing off a disk), so an answer at or below it is sent at once. The waits are callbacks
(`when`), not tasks: the transport's direct path hands an answer owed later over with no task
(http/app.py). One timer serves them all: the waits are kept in the order they began, which is
the order their deadlines come in, and the timer stands at the first one not yet answered.

In a cluster (`--etcd`) the replicas that count are named instead (`count`, by cluster.py): the
sync set the primary publishes in etcd, and the replicas joining it. A change is held once every
one of them holds it (none held while they are fewer than N), so each member of the published set
holds every acknowledged write, and the election (which lets only them win) loses none.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
from collections.abc import Callable

from ..flags import DEFAULTS
from .feed import Feed

WAIT_S = float(DEFAULTS["--sync-replicas-wait"])  # where the command line names none


class Wait:
    """One answer waiting for N replicas: `then(True)` once they hold `seq`, `then(False)` at `deadline`."""

    __slots__ = ("seq", "then", "deadline", "done")

    def __init__(self, seq: int, then: Callable[[bool], None], deadline: float) -> None:
        self.seq = seq
        self.then = then
        self.deadline = deadline
        self.done = False


class Quorum:
    """The answers waiting for N replicas, on one event loop."""

    def __init__(self, feed_of: Callable[[], Feed | None], needed: int, wait_s: float = WAIT_S) -> None:
        self.feed_of = feed_of  # () -> the current Feed or None (promotion makes a new one)
        self.needed = needed
        self.wait_s = wait_s
        self.level = 0  # the highest change N replicas held at once (the module's docstring)
        self._by_seq: list[tuple[int, int, Wait]] = []  # a heap: the first to be covered first
        self._by_time: collections.deque[Wait] = collections.deque()  # the first to expire first
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self.refused = 0  # answers refused 503 since start
        self.counted: frozenset[str] | None = None  # the members whose acks count (None: any N replicas)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the answers wait on

    def count(self, members: frozenset[str]) -> None:
        """From any thread: only the replicas named `members` (advertise URLs) count from now on,
        each of them needed; the answers they now cover are woken on the loop."""
        self.counted = members
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.acked)

    def held(self) -> int:
        """The change N distinct replicas hold at least now (0: fewer than N replicas said any)."""
        feed = self.feed_of()
        if feed is None:
            return 0
        counted = self.counted
        if counted is not None:
            if len(counted) < self.needed:
                return 0
            held: dict[str, int] = {}
            for r in list(feed.replicas):
                if r.member in counted and r.acked > held.get(r.member, -1):
                    held[r.member] = r.acked
            return min(held.values()) if len(held) == len(counted) else 0
        best: dict[str, int] = {}
        for r in list(feed.replicas):
            if r.acked > best.get(r.ident, -1):
                best[r.ident] = r.acked
        acked = sorted(best.values(), reverse=True)
        return acked[self.needed - 1] if len(acked) >= self.needed else 0

    def acked(self) -> None:
        """A replica said more: call back the answers N replicas now cover."""
        held = self.held()
        if held <= self.level:
            return
        self.level = held
        waiting = self._by_seq
        while waiting and waiting[0][0] <= held:
            wait = heapq.heappop(waiting)[2]
            if not wait.done:
                wait.done = True
                wait.then(True)

    def release(self) -> None:
        """On the loop: every answer waiting now is refused at once (a cluster's primary that
        steps down: no replica acks it any more, cluster.py)."""
        waiting, self._by_seq = self._by_seq, []
        for _, _, wait in waiting:
            if not wait.done:
                wait.done = True
                wait.then(False)

    def when(self, seq: int, then: Callable[[bool], None]) -> None:
        """On the loop: `then(True)` once N replicas hold change `seq` (now, if they do), or
        `then(False)` after `wait_s` without."""
        if seq <= self.level:
            then(True)
            return
        loop = self._loop = asyncio.get_running_loop()
        wait = Wait(seq, then, loop.time() + self.wait_s)
        heapq.heappush(self._by_seq, (seq, next(self._order), wait))
        self._by_time.append(wait)
        if self._timer is None:
            self._timer = loop.call_at(wait.deadline, self._expire)

    def _expire(self) -> None:
        """The timer: refuse the waits whose deadline passed, then stand at the next one."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        waits = self._by_time
        while waits and (waits[0].done or waits[0].deadline <= now):
            wait = waits.popleft()
            if not wait.done:
                wait.done = True
                self.refused += 1
                wait.then(False)
        if waits:
            self._timer = loop.call_at(waits[0].deadline, self._expire)
        if len(self._by_seq) > 2 * len(waits) + 64:  # the refused ones, dropped while no replica acks
            self._by_seq = [w for w in self._by_seq if not w[2].done]
            heapq.heapify(self._by_seq)
