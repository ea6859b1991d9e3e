"""A server's part in replication: primary (it feeds replicas) or replica (it follows one).

`Node` is what the HTTP routes (http/replication.py) and the command line (cli.py) hold: the
file's identity (identity.py), and the primary's feed (feed.py) or the replica's follower
(follower.py). A replica's database is read-only, its refusals naming the primary
(`refusal_message`); promotion stops the follower, forks the history and lifts that.
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


def refusal_message(primary: str) -> str:
    return f"this server is a replica: send writes and claims to its primary, {primary}"


class Node:
    """Replication on one server (see the module's docstring)."""

    def __init__(self, db: Database, identity: Identity, token: str, *, primary: str | None = None,
                 buffer_bytes: int = 64 << 20, sync_replicas: int = 0, sync_wait_s: float = 10.0) -> None:
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
        self.appliers: list[Callable[[int], None]] = []  # told each change a replica applies
        self._mutex = threading.Lock()
        # --sync-replicas: the answers of writes wait for that many replicas' disks (quorum.py)
        self.quorum = Quorum(lambda: self.feed, sync_replicas, sync_wait_s) if sync_replicas > 0 else None
        if primary:
            self.follower = Follower(db, identity, primary, token, applied=self._applied)
            db.set_read_only(True, refusal_message(primary))

    @property
    def role(self) -> str:
        return "replica" if self.follower is not None else "primary"

    def allows(self, authorization: str | None) -> bool:
        """Whether `Authorization` carries the replication token (compared in constant time)."""
        if not authorization or not authorization.startswith("Bearer "):
            return False
        return hmac.compare_digest(authorization[7:].strip().encode(), self.token)

    def start(self) -> None:
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
            if follower is None:
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
        return out
