"""A cluster member's parts that need no etcd (the failover itself is server/tests_cluster, against a
real etcd): its flags, the term record, the fence's arithmetic, and a member that knows no primary."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fenecdb_server.database import Database
from fenecdb_server.engine.engine import run_write
from fenecdb_server.replication.cluster import Cluster
from fenecdb_server.replication.etcd import EtcdDown, prefix_end
from fenecdb_server.replication.feed import Feed, Replica
from test_replication import TOKEN, Server

CLUSTER = ["--etcd", "http://127.0.0.1:9", "--cluster", "c", "--advertise", "http://127.0.0.1:8"]


@pytest.mark.parametrize(("flags", "said"), [
    (CLUSTER, "--etcd needs --replication-token"),
    (["--replication-token", TOKEN, "--etcd", "http://127.0.0.1:9", "--advertise", "http://127.0.0.1:8"],
     "--cluster"),
    (["--replication-token", TOKEN, "--etcd", "http://127.0.0.1:9", "--cluster", "c"], "--advertise"),
    (["--replication-token", TOKEN, "--cluster", "c"], "needs --etcd"),
    (["--lease-ttl", "4"], "--lease-ttl is a cluster member's: it needs --etcd"),  # no token: still refused
    (["--advertise", "http://127.0.0.1:8"], "needs --etcd"),
    (["--replication-token", TOKEN, *CLUSTER, "--replica-of", "http://127.0.0.1:7"], "excludes --replica-of"),
    (["--replication-token", TOKEN, "--etcd", "127.0.0.1:2379", "--cluster", "c", "--advertise",
      "http://127.0.0.1:8"], "--etcd expects an http://"),
    (["--replication-token", TOKEN, *CLUSTER, "--lease-ttl", "1"], "--lease-ttl"),
    (["--replication-token", TOKEN, *CLUSTER[:2], "--cluster", "a/b", *CLUSTER[4:]], "--cluster <name>"),
])
def test_cluster_flags_are_checked(tmp_path: Path, flags: list[str], said: str) -> None:
    s = Server("--file", str(tmp_path / "x.fenec"), *flags)
    assert s.exit() == 2
    assert any(said in line for line in s.lines), s.lines


def test_a_member_that_knows_no_primary_answers_writes_503_with_retry_after(tmp_path: Path) -> None:
    s = Server("--file", str(tmp_path / "x.fenec"), "--replication-token", TOKEN, *CLUSTER).ready()
    try:
        code, headers, body = s.query("create collection jobs (n int)")
        assert code == 503 and headers.get("retry-after") == "1" and "election" in body["error"]
        assert headers.get("fenec-term") == "0" and "fenec-primary" not in headers
        code, _, _ = s.query("get jobs")  # reads are served: no such collection, not "no primary"
        assert code == 404
        code, _, st = s.request("GET", "/_replication/status", headers={"authorization": f"Bearer {TOKEN}"})
        assert code == 200 and st["role"] == "candidate" and st["cluster"]["etcd"] is False
        code, _, done = s.request("POST", "/_replication/promote", headers={"authorization": f"Bearer {TOKEN}"})
        assert code == 200 and done["promoted"] is False  # in a cluster the election promotes
    finally:
        s.stop()


def test_a_term_record_is_replayed_and_kept_by_a_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "t.fenec")
    db = Database(path, sync="always")
    db.query("create collection jobs (n int)")

    def term(blk: object) -> None:
        db.engine.catalog.term = 7
        blk.ops.append(["T", 7])  # type: ignore[attr-defined]

    run_write(db.engine, term)
    db.query("put jobs {n: 1}")
    db.close()
    db = Database(path)
    assert db.engine.catalog.term == 7 and len(db.query("get jobs")) == 1
    db.compact()
    db.close()
    db = Database(path)
    assert db.engine.catalog.term == 7  # the snapshot carries it
    db.close()


class _Node:
    class db:  # noqa: N801 - what Cluster reads of a node's database
        seq = 0


def test_the_fence_refuses_the_writes_of_a_leadership_that_may_have_lapsed() -> None:
    c = Cluster(_Node(), ["http://127.0.0.1:9"], "c", "http://127.0.0.1:8")  # type: ignore[arg-type]
    assert not c.fenced(5)  # never led: nothing of its own to fence
    c.led_from = 10
    c.leading_until = time.monotonic() + 60
    assert not c.fenced(11)  # the lease is current
    c.leading_until = time.monotonic() - 0.001
    assert c.fenced(11) and c.fenced(12)  # made while it led, answered once the lease may have lapsed
    assert not c.fenced(10)  # made before it led
    c.led_upto = 15
    assert not c.fenced(16)  # applied since as a replica of another


def test_prefix_end_is_the_first_key_after_the_prefix() -> None:
    assert prefix_end(b"/fenec/c/members/") == b"/fenec/c/members0"
    assert prefix_end(b"a\xff") == b"b"


def _replica(member: str, acked: int = 0) -> Replica:
    """A replica of the feed named by its member URL, having said it holds change `acked`."""
    r = Replica(member, 0, member, member)
    r.acked = acked
    return r


class _SyncNode:
    def __init__(self, needed: int) -> None:
        from fenecdb_server.replication.quorum import Quorum

        self.feed = Feed(Database(), 1 << 20)
        self.quorum = Quorum(lambda: self.feed, needed)
        self.quorum.count(frozenset())
        self.db = type("Db", (), {"seq": 5})()


class _SyncEtcd:
    """Records each put of the sync set with the members the quorum counted as it was sent."""

    def __init__(self, node: _SyncNode) -> None:
        self.node = node
        self.puts: list[tuple[list[str], frozenset[str]]] = []
        self.down = False

    def put_if(self, key: bytes, value: bytes, guard: bytes, guard_value: bytes) -> bool:
        import json

        counted = self.node.quorum.counted
        assert counted is not None
        self.puts.append((json.loads(value)["sync"], counted))
        if self.down:
            raise EtcdDown("lost answer")
        return True


def test_a_replica_is_counted_before_the_sync_set_names_it_and_uncounted_after_it_is_left_out() -> None:
    node = _SyncNode(1)
    c = Cluster(node, ["http://127.0.0.1:9"], "c", "http://p")  # type: ignore[arg-type]
    etcd = c.etcd = _SyncEtcd(node)  # type: ignore[assignment]
    quorum = node.quorum
    a, b = _replica("http://a"), _replica("http://b")
    node.feed.replicas.add(a)
    c._sync_step()
    assert quorum.counted == {"http://a"} and etcd.puts == []  # counted first: every write waits for it
    assert quorum.held() == 0
    a.acked = 5  # caught up with what the primary held when it was counted
    c._sync_step()
    assert etcd.puts == [(["http://a"], frozenset({"http://a"}))] and c.sync == {"http://a"}
    assert quorum.held() == 5
    node.feed.replicas.discard(a)  # the sync replica stops streaming; another takes its place
    node.feed.replicas.add(b)
    node.db.seq = 9
    c._sync_step()
    assert quorum.counted == {"http://a", "http://b"} and len(etcd.puts) == 1  # b counted, a still too
    assert quorum.held() == 0  # a write now waits for both
    b.acked = 8
    c._sync_step()
    assert len(etcd.puts) == 1  # b is not caught up: a stays in the set
    b.acked = 9
    etcd.down = True
    with pytest.raises(EtcdDown):
        c._sync_step()
    assert etcd.puts[-1] == (["http://b"], frozenset({"http://a", "http://b"}))  # a counted as the put went
    assert c.sync == {"http://a"} and "http://a" in quorum.counted  # the put may not have been made
    etcd.down = False
    c._sync_step()
    assert c.sync == {"http://b"} and quorum.counted == {"http://b"}  # a uncounted once etcd answered
    assert quorum.held() == 9


def test_a_cluster_quorum_needs_every_counted_member_and_at_least_n() -> None:
    node = _SyncNode(2)
    quorum = node.quorum
    node.feed.replicas.update({_replica("http://a", 7), _replica("http://b", 4), _replica("http://x", 9)})
    quorum.count(frozenset({"http://a"}))
    assert quorum.held() == 0  # fewer than N counted
    quorum.count(frozenset({"http://a", "http://b"}))
    assert quorum.held() == 4  # x is not counted, however far it got
    quorum.count(frozenset({"http://a", "http://b", "http://gone"}))
    assert quorum.held() == 0  # a counted member that does not stream holds nothing
