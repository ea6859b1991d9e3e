"""Failover decided by etcd leases (replication/cluster.py), fault by fault, against a real etcd
and three real members under `--sync-replicas 1`, with three writers and a worker whose own
records the history checker reads (history.py): no acknowledged write lost, no ack undone, nothing
acknowledged by a deposed primary; and a new primary taking writes within 10 s of each fault.

A cut is made on the network the cluster runs on (network.py): a link set down between network
namespaces, or a fault proxy frozen where a namespace cannot be made; the run's header says which
(`network faults: ...`). The clients still reach a member that is cut off, so its refusal is
tested, not only its silence.

FENEC_FAILOVERS sets the SIGKILL test's rounds (default 3; `make failover` and the failover part of
scripts/test_all.py run 20), FENEC_LEASE_TTL the members' lease (default 2 s),
FENEC_NETWORK_FAULTS=proxy forces the proxies. Without an `etcd` on PATH every test here is skipped
(scripts/test_all.py prints the part's SKIP line).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from harness import ETCD, JOBS, SYNC, TTL, Cluster, Member, record_times, under_load, wait_for
from history import CLAIM, Load

pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd: no 'etcd' on PATH")

FAILOVER_S = 10.0  # the promise: a new primary takes writes within this of the fault
ROUNDS = int(os.environ.get("FENEC_FAILOVERS", "3"))


def term_of(m: Member) -> int:
    return int(m.status().get("cluster", {}).get("term", 0))


def others(cluster: Cluster, p: Member) -> list[Member]:
    return [m for m in cluster.members if m is not p]


def writes_flow(load: Load, more: int = 10) -> None:
    n = load.history.count()
    wait_for("writes to be acknowledged", lambda: load.history.count() >= n + more)


def new_term_taking_writes(load: Load, term: int, fault_at: float, others: list[Member] | None = None,
                           elected: list[float] | None = None) -> float:
    """Seconds from the fault to the first write acknowledged in a term above `term`; with
    `others`, the seconds to one of them saying it leads a later term are added to `elected`."""
    if others is not None and elected is not None:
        def leads() -> bool:
            return any(m.status().get("cluster", {}).get("leading") and term_of(m) > term for m in others)
        wait_for("a new primary", leads, 60)
        elected.append(time.monotonic() - fault_at)
    got = wait_for("a write acknowledged in a new term", lambda: load.history.terms_after(term, fault_at), 60)
    return min(a.answered for a in got) - fault_at


def finish(cluster: Cluster, load: Load) -> Member:
    load.stop()
    p = cluster.settled(60)
    code, _, rows = p.request("POST", "/query", {"query": "get jobs"}, timeout=30)
    assert code == 200
    load.history.check(rows)
    for m in cluster.members:  # a deposed primary's tail cut or re-imaged, never merged: the same rows
        if m is not p:
            assert m.request("POST", "/query", {"query": "get jobs"}, timeout=30)[2] == rows, m.name
    return p


def test_a_killed_primary_is_replaced_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    times: list[float] = []
    elected: list[float] = []
    with under_load(tmp_path, *SYNC) as (cluster, load):
        for _ in range(ROUNDS):
            p = cluster.settled(60)
            term = term_of(p)
            writes_flow(load)
            fault_at = time.monotonic()
            p.kill()
            times.append(new_term_taking_writes(load, term, fault_at, others(cluster, p), elected))
            p.start()  # back on its file: it rejoins as a replica
        finish(cluster, load)
    record_times("SIGKILL the primary", times, elected)
    assert max(elected) < FAILOVER_S, elected


def test_a_primary_cut_off_from_etcd_and_the_replicas_fences_itself_and_rejoins(tmp_path: Path) -> None:
    times: list[float] = []
    elected: list[float] = []
    with under_load(tmp_path, *SYNC) as (cluster, load):
        for _ in range(2):
            p = cluster.settled(60)
            term = term_of(p)
            writes_flow(load)
            fault_at = time.monotonic()
            p.cut()  # the clients still reach it: it must refuse them
            times.append(new_term_taking_writes(load, term, fault_at, others(cluster, p), elected))
            writes_flow(load)
            p.heal()
            wait_for("the old primary to follow the new one", lambda m=p: m.status().get("role") == "replica")
        finish(cluster, load)
    record_times("cut the primary off", times, elected)
    assert max(elected) < FAILOVER_S, elected


def test_a_primary_cut_off_from_etcd_alone_stops_acknowledging_before_its_lease_lapses(tmp_path: Path) -> None:
    """No sync replica here: the replicas would stop acknowledging the deposed primary's writes
    and hide a missing fence. Its lease alone must stop it."""
    with under_load(tmp_path) as (cluster, load):
        p = cluster.primary()
        term = term_of(p)
        writes_flow(load)
        fault_at = time.monotonic()
        p.cut(peers=False)  # the replicas still follow it, the clients still write to it
        new_term_taking_writes(load, term, fault_at)
        writes_flow(load)
        late = [a for a in load.history.acked if a.term <= term and a.sent > fault_at + TTL]
        assert not late, f"acknowledged after its lease lapsed: {late[:5]}"
        p.heal()
        wait_for("the old primary to follow the new one", lambda m=p: m.status().get("role") == "replica")
        load.stop()
        load.history.check_fenced()


def test_a_replica_cut_off_from_etcd_changes_nothing(tmp_path: Path) -> None:
    with under_load(tmp_path, *SYNC) as (cluster, load):
        p = cluster.settled()
        term = term_of(p)
        r = next(m for m in cluster.members if m is not p)
        writes_flow(load)
        r.cut(peers=False)
        wait_for("the replica's lease to lapse", lambda: not r.status().get("cluster", {}).get("etcd", True))
        time.sleep(TTL * 2)  # past its lease: its member key is gone
        writes_flow(load)
        assert r.status().get("role") == "replica"  # it kept following
        r.heal()
        writes_flow(load)
        assert term_of(p) == term and cluster.primary() is p  # no election
        finish(cluster, load)


def test_a_primary_paused_past_its_lease_acknowledges_nothing_after_and_rejoins(tmp_path: Path) -> None:
    times: list[float] = []
    elected: list[float] = []
    with under_load(tmp_path, *SYNC) as (cluster, load):
        for _ in range(2):
            p = cluster.settled(60)
            term = term_of(p)
            writes_flow(load)
            fault_at = time.monotonic()
            p.signal(signal.SIGSTOP)
            times.append(new_term_taking_writes(load, term, fault_at, others(cluster, p), elected))
            writes_flow(load)
            p.signal(signal.SIGCONT)  # its held answers, its late renewals: none may count
            wait_for("the paused primary to follow the new one", lambda m=p: m.status().get("role") == "replica")
        finish(cluster, load)
    record_times("SIGSTOP the primary", times, elected)
    assert max(elected) < FAILOVER_S, elected


def test_etcd_restarted_under_load_loses_nothing(tmp_path: Path) -> None:
    times: list[float] = []
    with under_load(tmp_path, *SYNC) as (cluster, load):
        for _ in range(2):
            cluster.settled(60)
            writes_flow(load)
            cluster.etcd.restart()
            back = time.monotonic()
            n = load.history.count()
            wait_for("writes after etcd's restart", lambda n=n: load.history.count() > n + 5, 60)
            times.append(max(0.0, min(a.answered for a in load.history.acked[n:]) - back))
        finish(cluster, load)
    record_times("restart etcd", times)
    assert max(times) < FAILOVER_S, times


def test_a_held_claim_on_a_primary_that_steps_down_is_answered_at_once(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        p = cluster.settled()
        assert p.request("POST", "/query", {"query": JOBS})[0] == 200
        got: list[tuple[int, object, float]] = []

        def hold() -> None:
            conn = http.client.HTTPConnection(p.host, p.port, timeout=60)
            conn.request("POST", "/query", body=json.dumps({"query": CLAIM, "params": ["w"]}),
                         headers={"fenec-wait": "30000"})
            resp = conn.getresponse()
            got.append((resp.status, json.loads(resp.read()), time.monotonic()))

        t = threading.Thread(target=hold)
        t.start()
        wait_for("the claim to be held", lambda: "fenec_held_claims 1" in metrics(p))
        fault_at = time.monotonic()
        p.cut()  # the claim's client still reaches it
        t.join(60)
        status, body, at = got[0]
        assert at - fault_at < 15, "the held claim waited out its Fenec-Wait"  # its lease is 2 s
        assert status in (200, 503) and not (status == 200 and body), (status, body)  # nothing taken


def test_an_idempotent_claim_retried_on_the_elected_primary_answers_the_first_try(tmp_path: Path) -> None:
    """The keys travel with the records: a claim retried under its Idempotency-Key on the member
    elected after the primary's SIGKILL is answered the jobs the first try took, as on one server."""
    with Cluster(tmp_path, *SYNC) as cluster:
        p = cluster.settled()
        assert p.query(JOBS)[0] == 200
        for i in range(5):
            assert p.query("put jobs {payload: $1, run_at: now()}", [i])[0] == 200
        key = {"idempotency-key": "claim-1"}
        code, _, first = p.query(CLAIM, ["w1"], key)
        assert code == 200 and len(first) == 1
        p.kill()
        q = cluster.primary()

        def retried() -> tuple[int, dict[str, str], Any] | None:
            answer = q.query(CLAIM, ["w1"], key)
            return None if answer[0] == 503 else answer  # 503: still taking over

        code, headers, again = wait_for("the elected primary to answer the retry", retried)
        assert code == 200 and again == first, (code, again)
        assert headers.get("idempotent-replayed") == "true"
        code, _, other = q.query(CLAIM, ["w1"], {"idempotency-key": "claim-2"})
        assert code == 200 and other and other != first  # a new key claims another job


def metrics(m: Member) -> str:
    conn = http.client.HTTPConnection(m.host, m.port, timeout=5)
    try:
        conn.request("GET", "/_metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def test_schedules_fire_on_the_primary_alone_and_go_on_after_a_failover(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        p = cluster.settled()
        for text in ("create collection ticks (n int)", "create schedule tick every 1s put ticks {n: 1}"):
            assert p.request("POST", "/query", {"query": text})[0] == 200

        def ticks(m: Member) -> int:
            code, _, rows = m.request("POST", "/query", {"query": "get ticks count"})
            return int(rows[0]["count"]) if code == 200 else -1

        wait_for("the schedule to fire", lambda: ticks(p) >= 2)
        p.kill()
        q = cluster.primary()
        fired = ticks(q)
        wait_for("the schedule to fire on the new primary", lambda: ticks(q) >= fired + 2)
        p.start()
        q = cluster.settled()
        # a replica that fired too would hold rows of its own: each holds the primary's, up to where it is
        code, _, rows = q.request("POST", "/query", {"query": "get ticks order id"})
        ids = [r["id"] for r in rows]
        for m in cluster.members:
            if m is not q:
                code, _, theirs = m.request("POST", "/query", {"query": "get ticks order id"})
                assert [r["id"] for r in theirs] == ids[:len(theirs)], m.name  # a prefix of the primary's


def delete_key(cluster: Cluster, key: str) -> None:
    conn = http.client.HTTPConnection(cluster.etcd.host, cluster.etcd.port, timeout=5)
    try:
        conn.request("POST", "/v3/kv/deleterange", body=json.dumps({"key": base64.b64encode(key.encode()).decode()}))
        assert conn.getresponse().status == 200
    finally:
        conn.close()


@pytest.mark.parametrize("override", [False, True], ids=["waits", "operator"])
def test_only_the_sync_set_may_win_and_its_member_holds_every_acknowledged_write(tmp_path: Path,
                                                                                 override: bool) -> None:
    """`--sync-replicas 1` and two replicas: the one in the sync set holds every acknowledged
    write, the other lags (it was down while they were made). The primary dies while the sync
    replica is cut off from etcd: the lagging one, alone in etcd, must not take over (it would
    lose them); writes stay refused until the sync replica comes back and wins, or until an
    operator deletes the sync set (docs/operations.md): then the lagging one wins at once."""
    with under_load(tmp_path, *SYNC) as (cluster, load):
        p = cluster.settled()
        term = term_of(p)
        synced = wait_for("the primary's sync set", lambda: p.status().get("cluster", {}).get("sync"))
        assert len(synced) == 1, synced
        s = cluster.by_url[synced[0]]
        o = next(m for m in others(cluster, p) if m is not s)
        writes_flow(load)
        o.kill()  # the replica out of the set: down, so it misses what follows
        writes_flow(load, 30)  # acknowledged: on the primary and the sync replica alone
        s.cut(peers=False)
        wait_for("the sync replica to lose etcd", lambda: not s.status().get("cluster", {}).get("etcd", True))
        time.sleep(TTL * 2)  # past its lease: etcd lists the lagging one alone once it is back
        fault_at = time.monotonic()
        p.kill()
        o.start()  # back on its file, behind the acknowledged writes
        end = time.monotonic() + max(10.0, 4 * TTL)  # past its lease, the settle and the 2 s delay
        while time.monotonic() < end:
            assert not o.status().get("cluster", {}).get("leading"), "the lagging replica took over"
            assert not load.history.terms_after(term, fault_at), "a write acknowledged without the sync replica"
            time.sleep(0.1)
        assert o.status().get("cluster", {}).get("may_lead") == sorted([p.advertise, s.advertise])
        if override:
            deleted_at = time.monotonic()
            delete_key(cluster, "/fenec/t/sync")
            assert cluster.primary(60) is o
            print(f"elected {time.monotonic() - deleted_at:.2f} s after the sync key was deleted")
            load.stop()
            load.history.check_fenced()  # what only the sync replica held may be lost: the operator's choice
            return
        s.heal()
        assert cluster.primary(60) is s
        new_term_taking_writes(load, term, fault_at)
        p.start()  # it rejoins as a replica
        finish(cluster, load)
