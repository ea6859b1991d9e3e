"""Replication against real `fenec-server` processes (server.md §7, issue 43): a replica follows
its primary into its own file, serves reads, refuses every write naming its primary, catches up
after a kill, a freeze or past the buffer (re-imaged), and its file is refused to a plain server.

Each server is a child_server.Server: `python -m fenecdb_server.cli`, on the sources this interpreter
imports. Conditions are waited for with generous deadlines; nothing assumes a rate.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import child_server
import pytest

TOKEN = "replication-secret"
DEADLINE_S = 30.0


class Server(child_server.Server):
    """child_server.Server; `status` with this module's token."""

    def status(self) -> dict[str, Any]:
        code, _, body = self.request("GET", "/_replication/status", headers={"authorization": f"Bearer {TOKEN}"})
        assert code == 200, body
        return body


def primary(path: Path, *flags: str) -> Server:
    return Server("--file", str(path), "--replication-token", TOKEN, "--sync", "always", *flags).ready()


def replica(path: Path, of: Server | str, *flags: str) -> Server:
    url = of if isinstance(of, str) else of.url
    return Server("--file", str(path), "--replication-token", TOKEN, "--replica-of", url, *flags).ready()


def wait_for(what: str, check: Any, deadline: float = DEADLINE_S) -> Any:
    end = time.monotonic() + deadline
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"waited {deadline} s for {what}")
        time.sleep(0.05)


def caught_up(p: Server, r: Server) -> bool:
    return bool(r.status()["seq"] == p.status()["seq"])


JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text)"
CLAIM = "set jobs {owner: $1, run_at: now() + 30000} where run_at <= now() order run_at limit 1 returning id"


@pytest.fixture
def pair(tmp_path: Path):
    p = primary(tmp_path / "p.fenec")
    r = replica(tmp_path / "r.fenec", p)
    yield p, r
    r.stop()
    p.stop()


def test_a_replica_serves_reads_and_refuses_every_write_naming_its_primary(pair: tuple[Server, Server]) -> None:
    p, r = pair
    assert p.query(JOBS)[0] == 200
    code, headers, _ = p.query("put jobs {payload: $1, run_at: now()}", [{"n": 1}])
    assert code == 200
    seq = int(headers["fenec-seq"])
    wait_for("the replica to hold the put", lambda: r.status()["seq"] >= seq)
    code, _, rows = r.query("get jobs")
    assert code == 200 and [row["payload"] for row in rows] == [{"n": 1}]
    refusals = [
        r.query("put jobs {payload: 2, run_at: now()}"),
        r.query(CLAIM, ["w1"]),
        r.query(CLAIM, ["w1"], headers={"fenec-wait": "2000"}),
        r.batch(["get jobs", "put jobs {payload: 3}"]),
        # a held claim on a collection the replica has not received: still the replica's refusal, not a 404
        r.query(CLAIM.replace("set jobs", "set later"), ["w1"], headers={"fenec-wait": "2000"}),
    ]
    for code, headers, body in refusals:
        assert code == 403, body
        assert p.url in body["error"] and "replica" in body["error"]
        assert headers["fenec-primary"] == p.url
    code, _, rows = r.query("get jobs")
    assert [row["owner"] for row in rows] == [None]  # the refused claim took nothing
    assert r.status()["role"] == "replica" and r.status()["primary"] == p.url
    listed = p.status()["replicas"]
    assert len(listed) == 1 and listed[0]["behind"] == 0


def test_the_replication_routes_take_the_replication_token_only(pair: tuple[Server, Server]) -> None:
    p, _ = pair
    for auth in ({}, {"authorization": "Bearer wrong"}):
        code, headers, body = p.request("GET", "/_replication/status", headers=auth)
        assert code == 401 and "token" in body["error"]
        code, _, _ = p.request("GET", "/_replication?since=0", headers=auth)
        assert code == 401


def test_a_replica_killed_and_restarted_asks_only_for_what_it_missed(tmp_path: Path) -> None:
    p = primary(tmp_path / "p.fenec")
    r = replica(tmp_path / "r.fenec", p)
    try:
        p.query(JOBS)
        for i in range(20):
            p.query("put jobs {payload: $1, run_at: now()}", [i])
        wait_for("the replica to catch up", lambda: caught_up(p, r))
        r.kill()
        for i in range(20, 50):
            p.query("put jobs {payload: $1, run_at: now()}", [i])
        r = replica(tmp_path / "r.fenec", p)
        wait_for("the restarted replica to catch up", lambda: caught_up(p, r))
        assert r.status()["images"] == 0  # records only: no image
        code, _, rows = r.query("get jobs")
        assert sorted(row["payload"] for row in rows) == list(range(50))
    finally:
        r.stop()
        p.stop()


def test_a_replica_past_the_buffer_is_reimaged(tmp_path: Path) -> None:
    p = primary(tmp_path / "p.fenec", "--replication-buffer", "1")
    r = replica(tmp_path / "r.fenec", p)
    try:
        p.query(JOBS)
        p.query("put jobs {payload: 'first', run_at: now()}")
        wait_for("the replica to catch up", lambda: caught_up(p, r))
        r.stop()
        big = "x" * 100_000
        for i in range(30):  # 3 MB of records: past the 1 MiB kept
            p.query("put jobs {payload: $1, run_at: now()}", [{"i": i, "pad": big}])
        p.query("del jobs where payload = 'first'")
        assert p.status()["buffer"]["base"] > 2
        r = replica(tmp_path / "r.fenec", p)
        wait_for("the re-imaged replica to catch up", lambda: caught_up(p, r))
        assert r.status()["images"] == 1, (r.status(), p.status(), r.lines)
        code, _, rows = r.query("get jobs")
        assert sorted(row["payload"]["i"] for row in rows) == list(range(30))
        p.query("put jobs {payload: 'after', run_at: now()}")  # records again after the image
        wait_for("the replica to follow after its image", lambda: caught_up(p, r))
        assert len(r.query("get jobs")[2]) == 31
        r.stop()
        r = replica(tmp_path / "r.fenec", p)  # its file is the image now, plus what followed
        assert len(r.query("get jobs")[2]) == 31
    finally:
        r.stop()
        p.stop()


def test_a_frozen_replica_catches_up(pair: tuple[Server, Server]) -> None:
    p, r = pair
    p.query(JOBS)
    os.kill(r.proc.pid, signal.SIGSTOP)
    try:
        for i in range(30):
            p.query("put jobs {payload: $1, run_at: now()}", [i])
        time.sleep(1)
    finally:
        os.kill(r.proc.pid, signal.SIGCONT)
    wait_for("the thawed replica to catch up", lambda: caught_up(p, r))
    assert len(r.query("get jobs")[2]) == 30


def test_a_replicas_file_opens_only_to_follow_or_promote(tmp_path: Path) -> None:
    p = primary(tmp_path / "p.fenec")
    r = replica(tmp_path / "r.fenec", p)
    p.query(JOBS)
    p.query("put jobs {payload: 1, run_at: now()}")
    wait_for("the replica to catch up", lambda: caught_up(p, r))
    history = p.status()["history"]
    r.stop()
    p.stop()
    plain = Server("--file", str(tmp_path / "r.fenec"))
    assert plain.exit() == 1
    assert any("replica's file" in line and "--promote" in line for line in plain.lines), plain.lines
    promoted = Server("--file", str(tmp_path / "r.fenec"), "--promote").ready()
    try:
        code, _, _ = promoted.query("put jobs {payload: 2, run_at: now()}")
        assert code == 200
        assert len(promoted.query("get jobs")[2]) == 2
    finally:
        promoted.stop()
    again = Server("--file", str(tmp_path / "r.fenec"), "--replication-token", TOKEN).ready()
    try:  # no longer a replica's file; its history forked
        assert again.status()["role"] == "primary" and again.status()["history"] != history
    finally:
        again.stop()


def test_promote_makes_a_replica_take_writes(pair: tuple[Server, Server]) -> None:
    p, r = pair
    p.query(JOBS)
    p.query("put jobs {payload: 1, run_at: now()}")
    wait_for("the replica to catch up", lambda: caught_up(p, r))
    code, _, done = r.request("POST", "/_replication/promote", headers={"authorization": f"Bearer {TOKEN}"})
    assert code == 200 and done["promoted"] is True and done["seq"] == p.status()["seq"]
    assert done["history"] != p.status()["history"]
    code, headers, rows = r.query(CLAIM, ["w1"])
    assert code == 200 and len(rows) == 1 and "fenec-primary" not in headers
    assert r.status()["role"] == "primary"


def test_the_dashboards_recent_samples_carry_the_replication_status(pair: tuple[Server, Server]) -> None:
    p, r = pair
    p.query(JOBS)
    wait_for("the replica to catch up", lambda: caught_up(p, r))
    code, _, mine = p.request("GET", "/_metrics/recent")
    assert code == 200 and mine["replication"]["role"] == "primary" and "history" not in mine["replication"]
    assert [x["sent"] for x in mine["replication"]["replicas"]] == [p.status()["seq"]]
    code, _, theirs = r.request("GET", "/_metrics/recent")
    assert code == 200 and theirs["replication"]["role"] == "replica"
    assert theirs["replication"]["primary"] == p.url and theirs["replication"]["connected"] is True


def test_a_keep_alive_connection_drops_fenec_primary_once_its_replica_is_promoted(
        pair: tuple[Server, Server]) -> None:
    p, r = pair
    p.query(JOBS)
    wait_for("the replica to catch up", lambda: caught_up(p, r))
    conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)  # one connection, opened before
    try:
        def ask(path: str, body: bytes | None) -> dict[str, str]:
            conn.request("POST" if body is not None else "GET", path, body=body)
            resp = conn.getresponse()
            resp.read()
            return {k.lower(): v for k, v in resp.getheaders()}

        read = json.dumps({"query": "get jobs"}).encode()
        assert ask("/query", read)["fenec-primary"] == p.url  # the direct path
        assert ask("/_whoami", None)["fenec-primary"] == p.url  # the ASGI door
        code, _, done = r.request("POST", "/_replication/promote", headers={"authorization": f"Bearer {TOKEN}"})
        assert code == 200 and done["promoted"] is True
        assert "fenec-primary" not in ask("/query", read)
        assert "fenec-primary" not in ask("/_whoami", None)
    finally:
        conn.close()


def test_a_replica_given_a_file_of_another_history_is_reimaged(tmp_path: Path) -> None:
    first = primary(tmp_path / "p1.fenec")
    other = primary(tmp_path / "p2.fenec")
    try:
        first.query(JOBS)
        first.query("put jobs {payload: 'of the first', run_at: now()}")
        other.query(JOBS)
        for i in range(3):
            other.query("put jobs {payload: $1, run_at: now()}", [i])
        r = replica(tmp_path / "r.fenec", first)
        try:
            wait_for("the replica to catch up", lambda: caught_up(first, r))
        finally:
            r.stop()
        r = replica(tmp_path / "r.fenec", other)  # the same file, told to follow a primary of another history
        try:
            wait_for("the replica to catch up", lambda: caught_up(other, r) and r.status()["images"] >= 1)
            code, _, rows = r.query("get jobs select payload")
            assert code == 200 and sorted(row["payload"] for row in rows) == [0, 1, 2]
        finally:
            r.stop()
    finally:
        other.stop()
        first.stop()


@pytest.mark.parametrize(("flags", "said"), [
    (["--replica-of", "http://127.0.0.1:1"], "--replication-token"),
    (["--replication-token", TOKEN, "--replica-of", "https://127.0.0.1:1"], "no TLS"),
    (["--replication-token", TOKEN, "--sync", "off"], "--sync off"),
    (["--replication-token", TOKEN, "--replica-of", "http://127.0.0.1:1", "--promote"], "--promote"),
])
def test_replication_flags_are_checked(tmp_path: Path, flags: list[str], said: str) -> None:
    s = Server("--file", str(tmp_path / "x.fenec"), *flags)
    assert s.exit() == 2
    assert any(said in line for line in s.lines), s.lines


def test_fenec_after_reads_your_writes_on_a_replica_or_answers_504(pair: tuple[Server, Server]) -> None:
    p, r = pair
    p.query(JOBS)
    for i in range(20):
        code, headers, _ = p.query("put jobs {payload: $1, run_at: now()}", [i])
    seq = int(headers["fenec-seq"])
    code, _, rows = r.query("get jobs", headers={"fenec-after": str(seq), "fenec-wait": "20000"})
    assert code == 200 and len(rows) == 20  # every put up to the last one's change is read
    code, _, body = r.query("get jobs", headers={"fenec-after": str(seq + 1000), "fenec-wait": "100"})
    assert code == 504 and body["seq"] == seq and str(seq + 1000) in body["error"]
    code, _, body = r.query("get jobs", headers={"fenec-after": "soon"})
    assert code == 400 and "Fenec-After" in body["error"]
    code, _, body = r.query("get jobs", headers={"fenec-after": "1"})
    assert code == 200
    code, _, body = p.query("put jobs {payload: 'x'}", headers={"fenec-after": str(seq)})
    assert code == 200  # a primary holds its own changes: no wait
    began = time.monotonic()
    nothing = "set jobs {owner: $1} where payload = 'none' order run_at limit 1 returning id"
    code, _, rows = p.query(nothing, ["w9"], headers={"fenec-after": str(seq), "fenec-wait": "30000"})
    assert code == 200 and rows == []  # Fenec-Wait was the change's wait: the claim was not held
    assert time.monotonic() - began < 20


def test_lag_is_in_the_status_and_the_metrics(pair: tuple[Server, Server]) -> None:
    p, r = pair
    p.query(JOBS)
    wait_for("the replica to catch up", lambda: caught_up(p, r))

    def metric(s: Server, name: str) -> float:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        conn.request("GET", "/_metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))

    wait_for("the primary to count its replica", lambda: metric(p, "fenec_replication_replicas") == 1)
    assert metric(r, "fenec_replication_behind_changes") == 0
    assert metric(r, "fenec_replication_behind_seconds") == 0
    p.stop()  # the replica loses its primary: its lag grows from its last contact
    wait_for("the lag to show", lambda: metric(r, "fenec_replication_behind_seconds") >= 1.0)
    status = r.status()
    assert status["connected"] is False and status["behind_s"] >= 1.0


def test_sync_replicas_answer_a_write_once_a_replica_holds_it_else_503(tmp_path: Path) -> None:
    p = primary(tmp_path / "p.fenec", "--sync-replicas", "1", "--sync-replicas-wait", "1")
    code, _, body = p.query(JOBS)  # no replica yet: on the primary's disk, not confirmed
    assert code == 503 and "replica" in body["error"] and body["seq"] == 1
    r = replica(tmp_path / "r.fenec", p, "--sync", "always")
    try:
        wait_for("the replica to connect", lambda: p.status()["replicas"])
        for i in range(10):
            code, headers, _ = p.query("put jobs {payload: $1, run_at: now()}", [i])
            assert code == 200
            seq = int(headers["fenec-seq"])
            # answered: the replica said its disk holds it (its memory, right after: the test below)
            wait_for("the replica to apply it", lambda seq=seq: r.status()["seq"] >= seq)
        assert p.status()["synced"] >= seq
        # answered on the transport's direct path, as every write without replicas (no ASGI cycle)
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=30)
        conn.request("GET", "/_metrics")
        metrics = conn.getresponse().read().decode()
        conn.close()
        direct = next(int(float(line.split()[1])) for line in metrics.splitlines()
                      if line.startswith("fenec_http_direct_total "))
        assert direct >= 10
        r.kill()
        code, _, body = p.query("put jobs {payload: 'lone', run_at: now()}")
        assert code == 503 and body["seq"] == seq + 1
    finally:
        r.stop()
        p.stop()


def test_a_replica_killed_after_its_ack_and_before_its_replay_has_the_record_from_its_file(tmp_path: Path) -> None:
    """A sync replica acks a record once its disk holds it, before its memory does: a SIGKILL in
    between loses nothing, as its file is replayed at start (here with its primary gone, so that
    nothing is fetched again)."""
    flag = tmp_path / "hold"
    p = primary(tmp_path / "p.fenec", "--sync-replicas", "1", "--sync-replicas-wait", "5")
    held = Server("--file", str(tmp_path / "r.fenec"), "--replication-token", TOKEN, "--replica-of", p.url,
                  "--sync", "always", prefix=(sys.executable, str(Path(__file__).with_name("replica_held.py")),
                                               str(flag))).ready()
    r = None
    try:
        wait_for("the replica to connect", lambda: p.status()["replicas"])
        assert p.query(JOBS)[0] == 200
        flag.touch()  # the replica's replays wait from now on
        wait_for("the replica's lock to be held", (tmp_path / "hold.held").exists)
        code, headers, _ = p.query("put jobs {payload: 'acked', run_at: now()}")
        assert code == 200  # acked: on the replica's disk
        seq = int(headers["fenec-seq"])
        assert held.status()["seq"] == seq - 1  # and not in its memory
        held.kill()
        p.stop()
        flag.unlink()
        r = replica(tmp_path / "r.fenec", p.url)
        assert r.status()["seq"] == seq
        code, _, rows = r.query("get jobs")
        assert code == 200 and [row["payload"] for row in rows] == ["acked"]
    finally:
        held.kill()
        if r is not None:
            r.stop()
        p.stop()


def test_a_sync_replica_through_the_asgi_door_alone(tmp_path: Path) -> None:
    """With `--access-log` every request takes the ASGI door, the replica's acks included."""
    p = primary(tmp_path / "p.fenec", "--sync-replicas", "1", "--access-log", str(tmp_path / "access.log"))
    r = replica(tmp_path / "r.fenec", p, "--sync", "always")
    try:
        wait_for("the replica to connect", lambda: p.status()["replicas"])
        assert p.query(JOBS)[0] == 200
        for i in range(5):
            code, headers, _ = p.query("put jobs {payload: $1, run_at: now()}", [i])
            assert code == 200
            seq = int(headers["fenec-seq"])
            wait_for("the replica to apply it", lambda seq=seq: r.status()["seq"] >= seq)
        assert "POST /_replication/ack" in (tmp_path / "access.log").read_text()
    finally:
        r.stop()
        p.stop()


def test_a_retry_under_the_same_idempotency_key_is_answered_only_once_a_sync_replica_holds_it(
        tmp_path: Path) -> None:
    p = primary(tmp_path / "p.fenec", "--sync-replicas", "1", "--sync-replicas-wait", "1")
    r = None
    try:
        assert p.query(JOBS)[0] == 503  # no replica: on the primary's disk only
        key = {"idempotency-key": "put-1"}
        code, _, body = p.query("put jobs {payload: 1, run_at: now()}", headers=key)
        assert code == 503 and "replica" in body["error"]
        code, headers, body = p.query("put jobs {payload: 1, run_at: now()}", headers=key)
        assert code == 503, (code, headers, body)  # the replay is not safer than the write it answers for
        r = replica(tmp_path / "r.fenec", p, "--sync", "always")
        wait_for("the replica to connect", lambda: p.status()["replicas"])
        code, headers, body = p.query("put jobs {payload: 1, run_at: now()}", headers=key)
        assert code == 200 and headers.get("idempotent-replayed") == "true" and body == {"affected": 1}
        wait_for("the replica to apply it", lambda: len(r.query("get jobs")[2]) == 1)
    finally:
        if r is not None:
            r.stop()
        p.stop()


def test_a_replica_cut_off_or_frozen_by_the_fault_proxy_catches_up(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance"))
    from fault_layer import Proxy

    p = primary(tmp_path / "p.fenec")
    proxy = Proxy()
    proxy.start(p.port)
    r = replica(tmp_path / "r.fenec", proxy.url)
    try:
        p.query(JOBS)
        wait_for("the replica to follow through the proxy", lambda: caught_up(p, r))
        for fault in (proxy.cut, proxy.freeze, proxy.refuse):
            fault()  # the stream broken, or silent, or no connection taken
            for _ in range(10):
                p.query("put jobs {payload: $1, run_at: now()}", [fault.__name__])
            proxy.pass_()
            wait_for(f"the replica to catch up after a {fault.__name__}", lambda: caught_up(p, r))
        assert proxy.cut_conns >= 1
        assert len(r.query("get jobs")[2]) == 30
        assert r.status()["images"] == 0  # it asked for what it missed, never the whole
    finally:
        r.stop()
        proxy.close()
        p.stop()


def test_a_restarted_primary_feeds_its_replica_on_from_its_file(tmp_path: Path) -> None:
    p = primary(tmp_path / "p.fenec")
    r = replica(tmp_path / "r.fenec", p)
    try:
        p.query(JOBS)
        p.query("put jobs {payload: 1, run_at: now()}")
        wait_for("the replica to catch up", lambda: caught_up(p, r))
        r.stop()
        p.query("put jobs {payload: 2, run_at: now()}")  # the replica misses this one
        port = p.port
        p.stop()
        p = Server("--file", str(tmp_path / "p.fenec"), "--replication-token", TOKEN, "--sync", "always",
                   "--http", f"127.0.0.1:{port}").ready()  # the same address: the replica's --replica-of
        p.query("put jobs {payload: 3, run_at: now()}")
        r = replica(tmp_path / "r.fenec", p)
        wait_for("the replica to catch up with the restarted primary", lambda: caught_up(p, r))
        assert r.status()["images"] == 0  # the records it missed, read back from the primary's file
        assert sorted(row["payload"] for row in r.query("get jobs")[2]) == [1, 2, 3]
    finally:
        r.stop()
        p.stop()
