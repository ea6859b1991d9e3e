"""A server's membership of a cluster whose primary is elected through etcd (`--etcd`).

Keys, under `/fenec/<cluster>/`:

* `leader`: `{"url": <advertise URL>, "term": n}`, held under its writer's lease: its holder is
  the primary. Created only while absent, in one transaction with `term` (below).
* `term`: the last term elected, a decimal number; each election's transaction moves it on by one,
  and fails if another moved it meanwhile.
* `members/<advertise URL>`: `{"seq": n, "term": t}`, each member's position (its change number, and
  the term of the last records it applied), under its own lease, put every `PUBLISH_S` and at
  once when the leader key is found gone.
* `sync`: `{"term": t, "leader": <URL>, "sync": [<URL>, ...], "needed": N}`, under no lease: the
  sync set, the replicas whose acknowledgements the primary of term t counts toward
  `--sync-replicas N` (below). Put by the election's transaction, then only while its writer holds
  the leader key (the transaction compares the key's value); absent in a cluster whose primaries
  run without `--sync-replicas`.

One lease a server, of `ttl` seconds, renewed every ttl/4 by a thread of its own (`_renew`).

**Fencing.** The primary acknowledges writes only until `leading_until`: the time it *sent* the
last renewal etcd answered, plus ttl, minus a margin (`margin_s`) for the two clocks' rates. etcd
expires the lease no sooner than ttl after it *received* that renewal, which was after it was
sent; so once etcd can have let the leader key go (and another server have been elected), this
one answers no write (`Cluster.fenced`, http/replication.py `gate`): each is answered 503
rather than acknowledged. It then steps down (`Node.vacant`) and follows whoever is elected.

**Election.** When the leader key is gone, each member stops following (its change number is then
final), publishes its position and, after `SETTLE_S` for the others to publish theirs, ranks the
members that may win (the sync set, below): the highest term, then the most changes applied, then
the name. The first campaigns at
once; the others wait `delay_s` from when they found the key gone (a first that is frozen or cut
off from etcd would otherwise keep the cluster without a primary), then campaign too. Only one
transaction succeeds; its server writes the term's first record (records.py op `T`) and takes
writes (`Node.lead`). The transaction also compares the `sync` key's revision (nothing else moves
it while no leader key is held, and it is the key that said this member may campaign) and puts
`sync` naming the winner alone: the writes it acknowledges from then on are on it and on the
replicas it counts, not on the members the last set named, who may no longer win.

**The sync set.** Under `--sync-replicas N`, a primary counts only the acknowledgements of the
replicas it named in `sync` (quorum.py `count`), and a write is acknowledged once each of them
holds it. A replica joins the set in this order: it is counted first (from then on every write
waits for it too), it catches up to the primary's change number at that moment, and only then is
the set with it put in etcd; a member leaves the set (it stopped streaming) only in that same put,
once the replicas replacing it have caught up, and is counted no more only once etcd answered. So
every member of the set in etcd, and the primary that put it, holds every acknowledged write. When
the leader key is gone, only those members campaign (`_allowed`); if none of them can reach etcd,
no one is elected and writes stay refused rather than lost, until one comes back or an operator
deletes the `sync` key (docs/operations.md, "Failover"). Without `--sync-replicas`, the winner's
transaction deletes the key and any member may campaign.

**Terms.** The stream carries its primary's term (`Fenec-Term`); a replica refuses a stream below
the highest term it has seen (follower.py), so a deposed primary's late records are never applied.
A deposed primary that comes back follows the new one, asking on its old history: its changes
past the new primary's fork are not the new history's, and it is sent an image (identity.py
`continues`): a tail that was never acknowledged is replaced, never merged.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..flags import DEFAULTS
from .etcd import Etcd, EtcdDown

if TYPE_CHECKING:
    from .node import Node

log = logging.getLogger("fenecdb.cluster")

POLL_S = 0.2  # how often the leader key is read
PUBLISH_S = 1.0  # how often a member's position is put while a primary leads
SETTLE_S = 0.4  # the wait for every member to publish its final position once the leader is gone
DELAY_S = 2.0  # a member not ranked first waits this long before it campaigns too
DEFAULT_TTL = int(DEFAULTS["--lease-ttl"])  # the leader's lease, s, where the command line names none


class Cluster:
    """This server in the cluster `name` (see the module's docstring); `start` runs its threads."""

    def __init__(self, node: Node, endpoints: list[str], name: str, advertise: str, ttl: int = DEFAULT_TTL,
                 delay_s: float = DELAY_S) -> None:
        self.node = node
        self.endpoints = endpoints
        self.name = name
        self.advertise = advertise
        self.ttl = ttl
        self.margin_s = max(0.25, ttl * 0.15)
        self.delay_s = delay_s
        root = f"/fenec/{name}/".encode()
        self.leader_key = root + b"leader"
        self.term_key = root + b"term"
        self.members_key = root + b"members/"
        self.member_key = self.members_key + advertise.encode()
        self.sync_key = root + b"sync"
        self.etcd = Etcd(endpoints)
        self.lease = 0
        self.renewed_sent = 0.0  # monotonic time the last renewal etcd answered was sent
        self.leading_until = 0.0  # monotonic: no write is acknowledged from then on
        self.leading = False
        self.led_from = -1  # the change number at which this server's last leadership began (-1: never)
        self.led_upto = -1  # ... and the one at which it was last seen to follow another (-1: not yet)
        self.leader = ""  # the primary's URL, as the leader key says ("" while none)
        self.term = 0  # the highest term seen in etcd
        self.members: dict[str, dict[str, int]] = {}
        self.etcd_ok = False
        self.elections = 0  # this server's elections won since start
        self.sync: frozenset[str] = frozenset()  # the sync set this primary put in etcd for its term
        self.allowed: list[str] | None = None  # who may campaign, as `sync` said when last read (None: any)
        self._joining: dict[str, int] = {}  # replicas counted, not yet in `sync`: the change each must reach
        self._leader_value = b""  # the leader key's value this server put, while it leads
        self._maybe: frozenset[str] = frozenset()  # members a put whose answer was lost may have named
        self._barred_since = 0.0
        self._vacant_since = 0.0
        self._published = 0.0
        self._stop = threading.Event()
        self._lease_lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, name="fenec-cluster", daemon=True),
                         threading.Thread(target=self._renew, name="fenec-lease", daemon=True)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Leave: the lease revoked (the leader key and this member's go at once), writes refused."""
        self._stop.set()
        self.leading_until = 0.0
        for t in self._threads:
            if t.is_alive() and threading.current_thread() is not t:
                t.join(timeout=5)
        lease, self.lease = self.lease, 0
        if lease:
            try:
                self.etcd.revoke(lease)
            except EtcdDown:
                pass
        self.etcd.close()

    # -- fencing: read on the event loop for each write's answer --

    def fenced(self, seq: int) -> bool:
        """Whether an answer that change `seq` was made must be refused: this server's last
        leadership made it, and that leadership may be over (its lease may have expired)."""
        if self.led_from < 0 or seq <= self.led_from:
            return False
        if 0 <= self.led_upto < seq:
            return False  # a change this server applied as a replica since
        return time.monotonic() >= self.leading_until

    # -- the lease: a thread of its own, so a slow read never delays a renewal --

    def _renew(self) -> None:
        etcd = Etcd(self.endpoints)
        try:
            while not self._stop.wait(self.ttl / 4):
                lease = self.lease
                if not lease:
                    continue
                sent = time.monotonic()
                try:
                    left = etcd.keepalive(lease)
                except EtcdDown as e:
                    if time.monotonic() - self.renewed_sent > self.ttl:
                        log.warning("cluster: lease not renewed for %ds: %s", self.ttl, e)
                    continue
                with self._lease_lock:
                    if lease != self.lease:
                        continue
                    if left <= 0:  # expired in etcd: the leader key, if held, is gone
                        self.lease = 0
                        self.leading_until = 0.0
                        continue
                    self.renewed_sent = sent
                    if self.leading:
                        self.leading_until = sent + self.ttl - self.margin_s
        finally:
            etcd.close()

    def _ensure_lease(self) -> None:
        if self.lease and time.monotonic() - self.renewed_sent < self.ttl:
            return
        sent = time.monotonic()
        lease = self.etcd.grant(self.ttl)
        with self._lease_lock:
            self.lease, self.renewed_sent = lease, sent
        self._published = 0.0

    # -- the election: the main thread --

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
                self.etcd_ok = True
            except EtcdDown as e:
                if self.etcd_ok:
                    log.warning("cluster: etcd unreachable: %s", e)
                self.etcd_ok = False
            except Exception:
                log.exception("cluster: internal error")
            if self.leading and time.monotonic() >= self.leading_until:
                log.warning("cluster: lease lapsed: stepping down (term %d)", self.term)
                self._vacate()
            self._stop.wait(POLL_S)

    def _step(self) -> None:
        self._ensure_lease()
        kv = self.etcd.get(self.leader_key)
        now = time.monotonic()
        if kv is None:
            self._no_leader(now)
            return
        try:
            value = json.loads(kv.value)
            url, term = str(value["url"]), int(value["term"])
        except (ValueError, KeyError, TypeError):
            url, term = "", 0
        self.term = max(self.term, term)
        if url == self.advertise:
            if kv.lease != self.lease:  # this server's, under a lease of its life before a restart
                self.etcd.revoke(kv.lease)
                return
            if not self.leading:  # it led, lapsed, and etcd kept the lease: an election anew
                self.etcd.delete(self.leader_key)
                return
            self._sync_step()
        else:
            self._vacant_since = 0.0
            if self.leading:
                log.warning("cluster: %s leads term %d: stepping down", url, term)
                self._vacate()
            if url and (self.leader != url or self.node.follower is None):
                self.leader = url
                self.led_upto = max(self.led_upto, self.node.db.seq) if self.led_from >= 0 else -1
                self.node.follow(url)
        if now - self._published >= PUBLISH_S:
            self._publish()
            self._rank()  # the members, as the status lists them

    def _publish(self) -> None:
        db = self.node.db
        value = json.dumps({"seq": db.seq, "term": db.engine.catalog.term}).encode()
        self.etcd.put(self.member_key, value, self.lease)
        self._published = time.monotonic()

    def _vacate(self) -> None:
        self.leading = False
        self.leading_until = 0.0
        self.leader = ""
        self.node.vacant()

    def _no_leader(self, now: float) -> None:
        if self.leading:
            log.warning("cluster: the leader key is gone while this server led: stepping down")
        if self.leading or self.leader or self.node.follower is not None:
            self._vacate()
        if not self._vacant_since:
            self._vacant_since = now
            self._publish()  # the final position: nothing is followed now
            return
        if now - self._vacant_since < SETTLE_S:
            return
        sync_rev = self._allowed()
        if self.allowed is not None and self.advertise not in self.allowed:
            if not self._barred_since:
                self._barred_since = now
                log.warning("cluster: not in the sync set %s: only they may be elected (they hold every "
                            "acknowledged write)", self.allowed)
            return
        self._barred_since = 0.0
        ranked = [m for m in self._rank() if self.allowed is None or m in self.allowed]
        first = ranked[0] if ranked else self.advertise
        if first != self.advertise and now - self._vacant_since < self.delay_s:
            return
        self._campaign(sync_rev)

    def _allowed(self) -> int:
        """Reads `sync` into `allowed`: the members that may be elected (its writer and its set),
        None when the key is absent (any may). Answers the key's revision (0: absent)."""
        kv = self.etcd.get(self.sync_key)
        if kv is None:
            self.allowed = None
            return 0
        try:
            value = json.loads(kv.value)
            self.allowed = sorted({str(value["leader"]), *(str(m) for m in value["sync"])})
        except (ValueError, KeyError, TypeError):
            log.warning("cluster: the sync key is not a sync set: any member may be elected")
            self.allowed = None
        return kv.mod_revision

    def _sync_step(self) -> None:
        """The primary's sync set kept up (the module's docstring): replicas that stream and are not
        in it are counted and then put in it while fewer than N of its members stream."""
        quorum, feed = self.node.quorum, self.node.feed
        if quorum is None or feed is None:
            return
        acked: dict[str, int] = {}
        for r in list(feed.replicas):
            if r.member:
                acked[r.member] = max(acked.get(r.member, 0), r.acked)
        joining = {m: at for m, at in self._joining.items() if m in acked}
        live = {m for m in self.sync if m in acked}
        if len(live) >= quorum.needed:
            joining = {}  # the set streams again: a replica counted meanwhile is needed no more
        spare = sorted((m for m in acked if m not in self.sync and m not in joining), key=lambda m: (-acked[m], m))
        spare = spare[:max(0, quorum.needed - len(live) - len(joining))]
        if spare:
            seq = self.node.db.seq
            joining.update((m, seq) for m in spare)
        if joining != self._joining:  # counted before anything is put (a joiner gone: counted no more)
            self._joining = joining
            quorum.count(frozenset(self.sync | joining.keys() | self._maybe))
        new = frozenset(live | joining.keys())
        if len(new) < quorum.needed or new == self.sync or any(acked[m] < at for m, at in joining.items()):
            return
        value = self._sync_value(self.term, new, quorum.needed)
        self._maybe |= new  # an answer lost on the way may hide a put made: counted until one is known made
        if not self.etcd.put_if(self.sync_key, value, self.leader_key, self._leader_value):
            return  # no longer the leader: the next step finds out
        log.info("cluster: the sync set is now %s", sorted(new))
        self.sync, self._joining, self._maybe = new, {}, frozenset()
        quorum.count(new)

    def _sync_value(self, term: int, members: frozenset[str], needed: int) -> bytes:
        return json.dumps({"term": term, "leader": self.advertise, "sync": sorted(members), "needed": needed}).encode()

    def _rank(self) -> list[str]:
        self.members = {}
        for kv in self.etcd.get_prefix(self.members_key):
            try:
                value = json.loads(kv.value)
                self.members[kv.key[len(self.members_key):].decode()] = {
                    "seq": int(value["seq"]), "term": int(value["term"])}
            except (ValueError, KeyError, TypeError):
                continue
        return sorted(self.members, key=lambda m: (-self.members[m]["term"], -self.members[m]["seq"], m))

    def _campaign(self, sync_rev: int) -> None:
        self._ensure_lease()
        sent = self.renewed_sent
        kv = self.etcd.get(self.term_key)
        last = int(kv.value or b"0") if kv is not None else 0
        rev = kv.mod_revision if kv is not None else 0
        term = max(last, self.term, self.node.db.engine.catalog.term) + 1  # an etcd that lost its data too
        value = json.dumps({"url": self.advertise, "term": term}).encode()
        quorum = self.node.quorum
        alone = None if quorum is None else self._sync_value(term, frozenset(), quorum.needed)
        if not self.etcd.create(self.leader_key, value, self.lease, also=(self.term_key, str(term).encode(), rev),
                                then=(self.sync_key, sync_rev, alone)):
            return  # another won, or the term (or the sync set) moved: the next step reads who
        self._leader_value = value
        self.sync, self._joining, self._maybe = frozenset(), {}, frozenset()
        if quorum is not None:
            quorum.count(frozenset())  # no replica counts until one is in this term's sync set
        self.term = term
        self.leader = self.advertise
        self._vacant_since = 0.0
        self.led_from, self.led_upto = self.node.db.seq, -1
        self.leading_until = sent + self.ttl - self.margin_s
        self.leading = True
        self.elections += 1
        log.warning("cluster: elected primary of %s for term %d at change %d", self.name, term, self.node.db.seq)
        self.node.lead(term)
        self._publish()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "advertise": self.advertise, "term": self.term, "leader": self.leader or None,
                "leading": self.leading and time.monotonic() < self.leading_until, "etcd": self.etcd_ok,
                "lease_ttl": self.ttl, "members": self.members, "sync": sorted(self.sync) if self.leading else None,
                "may_lead": self.allowed}
