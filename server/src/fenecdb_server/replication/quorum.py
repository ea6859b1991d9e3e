"""`--sync-replicas N`: a write is answered once N replicas hold it on their own disks.

Each replica says which change its disk holds (`POST /_replication/ack`, sent by its follower as
its fsyncs cover the records it applied: `follower.py`); the primary keeps the highest each
replica said (`Replica.acked`, one count a replica however often it reconnects) and, on its event
loop, wakes each answer waiting for a change once N distinct replicas are at or past it. An
answer that waits `wait_s` without that is refused 503: the write is on the primary's disk, and
on fewer replicas' than promised, so a failover may lose it; the client is told so, never told it
is safe. Nothing of this runs on a server without `--sync-replicas`.

In a cluster (`--etcd`) the replicas that count are named instead (`count`, by cluster.py): the
sync set the primary publishes in etcd, and the replicas joining it. A change is held once every
one of them holds it (none held while they are fewer than N), so each member of the published set
holds every acknowledged write, and the election (which lets only them win) loses none.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from .feed import Feed

WAIT_S = 10.0


class Quorum:
    """The answers waiting for N replicas, on one event loop."""

    def __init__(self, feed_of: Callable[[], Feed | None], needed: int, wait_s: float = WAIT_S) -> None:
        self.feed_of = feed_of  # () -> the current Feed or None (promotion makes a new one)
        self.needed = needed
        self.wait_s = wait_s
        self._waiting: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._order = itertools.count()
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
        """The change N distinct replicas hold at least (0: fewer than N replicas said any)."""
        feed = self._feed()
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

    def _feed(self) -> Feed | None:
        return self.feed_of()

    def acked(self) -> None:
        """A replica said more: wake the answers N replicas now cover."""
        held = self.held()
        waiting = self._waiting
        while waiting and waiting[0][0] <= held:
            _, _, fut = heapq.heappop(waiting)
            if not fut.done():
                fut.set_result(True)

    def release(self) -> None:
        """On the loop: every answer waiting now is refused at once (a cluster's primary that
        steps down: no replica acks it any more, cluster.py)."""
        waiting, self._waiting = self._waiting, []
        for _, _, fut in waiting:
            if not fut.done():
                fut.set_result(False)

    async def wait(self, seq: int) -> bool:
        """True once N replicas hold change `seq`; False after `wait_s` without."""
        if seq <= self.held():
            return True
        self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (seq, next(self._order), fut))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.wait_s)
        except TimeoutError:
            self.refused += 1
            fut.cancel()
            if len(self._waiting) > 1024:  # the given-up ones, dropped while no replica acks
                self._waiting = [w for w in self._waiting if not w[2].done()]
                heapq.heapify(self._waiting)
            return False
