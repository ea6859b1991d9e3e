"""A cluster member's parts that need no etcd (the failover itself is server/tests_cluster, against a
real etcd): its flags, the term record, the fence's arithmetic, and a member that knows no primary."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fenecdb_server.database import Database
from fenecdb_server.engine.engine import run_write
from fenecdb_server.replication.cluster import Cluster
from fenecdb_server.replication.etcd import prefix_end
from test_replication import TOKEN, Server

CLUSTER = ["--etcd", "http://127.0.0.1:9", "--cluster", "c", "--advertise", "http://127.0.0.1:8"]


@pytest.mark.parametrize(("flags", "said"), [
    (CLUSTER, "--etcd needs --replication-token"),
    (["--replication-token", TOKEN, "--etcd", "http://127.0.0.1:9", "--advertise", "http://127.0.0.1:8"],
     "--cluster"),
    (["--replication-token", TOKEN, "--etcd", "http://127.0.0.1:9", "--cluster", "c"], "--advertise"),
    (["--replication-token", TOKEN, "--cluster", "c"], "needs --etcd"),
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
