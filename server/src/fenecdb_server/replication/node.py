"""A server's part in replication: primary (it feeds replicas) or replica (it follows one).

`Node` is what the HTTP routes (http/replication.py) and the command line (cli.py) hold: the
file's identity (identity.py), and the primary's feed (feed.py) or the replica's follower
(follower.py). A replica's database is read-only, its refusals naming the primary
(`refusal_message`); promotion stops the follower, forks the history and lifts that.

In a cluster (`--etcd`, cluster.py) the election drives the node instead of the command line:
`lead(term)` (a promotion that also writes the term's first record), `follow(url)` (a primary
steps down, or a replica changes primaries) and `vacant()` (no primary known: no feed, no
follower, every write refused until the election ends).
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .feed import Feed
from .follower import Follower
from .identity import Identity
from .quorum import Quorum

if TYPE_CHECKING:
    from ..database import Database
    from .options import Flags


def refusal_message(primary: str) -> str:
    return f"this server is a replica: send writes and claims to its primary, {primary}"


NO_PRIMARY = "this cluster has no primary now (an election is under way): retry shortly"


def from_flags(db: Database, identity: Identity, flags: Flags) -> Node:
    """The node the command line's replication flags ask for; with `--etcd`, a cluster's member,
    writes refused until it is elected or follows (cluster.py)."""
    node = Node(db, identity, flags.token, primary=flags.primary, buffer_bytes=flags.buffer_bytes,
                sync_replicas=flags.sync_replicas, sync_wait_s=flags.sync_wait_s)
    if flags.etcd:
        from .cluster import Cluster

        node.cluster = Cluster(node, flags.etcd, flags.cluster, flags.advertise, ttl=flags.lease_ttl)
        if node.quorum is not None:
            node.quorum.count(frozenset())  # only the sync set the primary publishes counts (cluster.py)
        db.set_read_only(True, NO_PRIMARY)
        db.engine.catalog.schedules.stop_firing()
    return node


class Node:
    """Replication on one server (see the module's docstring)."""

    def __init__(self, db: Database, identity: Identity, token: str, *, primary: str | None = None,
                 buffer_bytes: int, sync_replicas: int, sync_wait_s: float) -> None:
        self.db = db
        self.identity = identity
        self.token = token.encode()
        self.buffer_bytes = buffer_bytes
        self.primary = primary or ""
        self.feed: Feed | None = None
        self.follower: Follower | None = None
        self.closing = False
        self.delay: Any = None  # the server's auth delay before a 401 (http/auth.py AuthDelay), set by the CLI
        self.promoted: list[Callable[[], None]] = []  # told once a replica is promoted
        self.stepped_down: list[Callable[[], None]] = []  # told each time a cluster's primary stops leading
        self.appliers: list[Callable[[int], None]] = []  # told each change a replica applies
        self._mutex = threading.Lock()
        self.cluster: Any = None  # the cluster this server is a member of (cluster.py), set by the CLI
        # --sync-replicas: the answers of writes wait for that many replicas' disks (quorum.py)
        self.quorum = Quorum(lambda: self.feed, sync_replicas, sync_wait_s) if sync_replicas > 0 else None
        if primary:
            self.follower = Follower(db, identity, primary, token, applied=self._applied)
            db.set_read_only(True, refusal_message(primary))

    @property
    def role(self) -> str:
        if self.follower is not None:
            return "replica"
        return "primary" if self.feed is not None or self.cluster is None else "candidate"

    def allows(self, authorization: str | None) -> bool:
        """Whether `Authorization` carries the replication token (compared in constant time)."""
        if not authorization or not authorization.startswith("Bearer "):
            return False
        return hmac.compare_digest(authorization[7:].strip().encode(), self.token)

    def start(self) -> None:
        if self.cluster is not None:
            return  # the election decides (cluster.py)
        if self.follower is not None:
            self.follower.start()
        else:
            self.identity.ensure_history()
            self.feed = Feed(self.db, self.buffer_bytes)
            self.feed.attach()

    def stop(self) -> None:
        self.closing = True
        if self.follower is not None:
            self.follower.stop()

    def ack(self, ident: str, seq: int) -> bool:
        """A replica says its disk holds change `seq`; False if it is not one this feeds."""
        feed = self.feed
        if feed is None:
            return False
        found = False
        for r in list(feed.replicas):
            if r.ident == ident:
                found = True
                if seq > r.acked:
                    r.acked = min(seq, r.sent)  # never more than it was sent
        if found and self.quorum is not None:
            self.quorum.acked()
        return found

    def _applied(self, seq: int) -> None:
        for tell in self.appliers:
            tell(seq)

    def promote(self) -> dict[str, Any]:
        """A replica made a primary: it stops following, forks its history, takes writes and
        feeds replicas of its own. Answers `{"promoted", "seq", "history"}` (promoted false on a
        server that is a primary already)."""
        with self._mutex:
            follower = self.follower
            if follower is None or self.cluster is not None:  # in a cluster the election promotes
                return {"promoted": False, "seq": self.db.seq, "history": self.identity.history}
            follower.stop()
            self.follower = None
            self.primary = ""
            history = self.identity.promote(self.db.seq)
            self.db.set_read_only(False)
            self.feed = Feed(self.db, self.buffer_bytes)
            self.feed.attach()
        for tell in self.promoted:
            tell()
        return {"promoted": True, "seq": self.db.seq, "history": history}

    # -- driven by the cluster's election (cluster.py) --

    def lead(self, term: int) -> None:
        """Elected primary for `term`: stop following, fork the history (a tail another server
        wrote past this one's changes is never taken as this one's), write the term's first
        record (op `T`), take writes, fire schedules and feed replicas."""
        from ..engine.engine import run_write

        with self._mutex:
            self._unfollow()
            self._unfeed()
            self.primary = ""
            self.identity.promote(self.db.seq)
            engine = self.db.engine
            engine.set_read_only(False)

            def first(blk: Any) -> None:
                engine.catalog.term = max(engine.catalog.term, term)
                blk.ops.append(["T", term])

            run_write(engine, first)
            self.feed = Feed(self.db, self.buffer_bytes)
            self.feed.attach()
            schedules = engine.catalog.schedules
            schedules.start_firing()
            if schedules.changed is not None:  # the timer slept on the due times it knew: a replica's
                schedules.changed()  # replayed ones never woke it
        for tell in self.promoted:
            tell()

    def follow(self, url: str) -> None:
        """Follow the primary at `url` (stepping down if this one leads): writes refused, naming it."""
        with self._mutex:
            if self.follower is not None and self.follower.url == url:
                return
            self._step_down(refusal_message(url))
            self._unfollow()
            self.primary = url
            self.follower = Follower(self.db, self.identity, url, self.token.decode(), applied=self._applied,
                                     floor=self._floor, member=self.cluster.advertise if self.cluster else "")
            self.follower.start()

    def vacant(self) -> None:
        """No primary known: no feed, no follower (its change number final, for the election's
        ranking), every write refused 503 until one is elected."""
        with self._mutex:
            self._step_down(NO_PRIMARY)
            self._unfollow()
            self.primary = ""

    def _floor(self) -> int:
        """The lowest term a stream may carry: the highest this server has seen."""
        cluster = self.cluster
        seen = cluster.term if cluster is not None else 0
        return max(seen, self.db.engine.catalog.term)

    def _step_down(self, message: str) -> None:
        """Writes refused with `message` (under the write lock: none is half-way), schedules
        off, the feed taken out from between the engine and its log (its streams end)."""
        engine = self.db.engine
        engine.lock.acquire_write()
        try:
            engine.set_read_only(True, message)
        finally:
            engine.lock.release_write()
        engine.catalog.schedules.stop_firing()
        if self.feed is not None:
            self._unfeed()
            for tell in self.stepped_down:
                tell()

    def _unfeed(self) -> None:
        feed = self.feed
        if feed is None:
            return
        self.feed = None
        engine = self.db.engine
        engine.lock.acquire_write()
        try:
            if engine.appender is feed:
                engine.appender = feed.inner
        finally:
            engine.lock.release_write()

    def _unfollow(self) -> None:
        follower, self.follower = self.follower, None
        if follower is not None:
            follower.stop()

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "seq": self.db.seq, "history": self.identity.history}
        follower = self.follower
        if follower is not None:
            out.update(follower.describe())
        elif self.feed is not None:
            seq = self.db.seq
            out["replicas"] = [r.describe(seq) for r in list(self.feed.replicas)]
            out["buffer"] = self.feed.kept()
            if self.quorum is not None:
                out["sync_replicas"] = self.quorum.needed
                out["synced"] = self.quorum.held()
        if self.cluster is not None:
            out["cluster"] = self.cluster.describe()
        return out
