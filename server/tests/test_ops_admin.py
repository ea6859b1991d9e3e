"""`POST /_admin/compact` and `GET /_admin/backup` on a real `fenec-server` while four clients
write: no answered write is lost by a compaction (before and after a restart), and a backup
holds exactly the writes answered with a `Fenec-Seq` at or below its own, and opens as a data
file of its own (a server started on it answers them). Who may call them: the server token only."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_http_e2e import Server

TOKEN = "admin-test-server-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
WRITERS = 4
PER_WRITER = 150


def q(c: httpx.Client, text: str, params: list[Any] | None = None) -> httpx.Response:
    return c.post("/query", json={"query": text, "params": params or []}, headers=AUTH)


class Writers:
    """WRITERS threads putting PER_WRITER rows each, one statement per row; every answered
    write is kept with the change number it was answered."""

    def __init__(self, server: Server, hold_at: int | None = None) -> None:
        self.server = server
        self.hold_at = hold_at  # each writer waits there until `release` is set
        self.release = threading.Event()
        self.answered: dict[int, int] = {}  # k -> Fenec-Seq
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self.started = threading.Event()
        self.threads = [threading.Thread(target=self.write, args=(w,)) for w in range(WRITERS)]

    def write(self, w: int) -> None:
        with self.server.client() as c:
            for i in range(PER_WRITER):
                k = w * 100_000 + i
                r = q(c, "put w {k: $1, pad: $2}", [k, "x" * 200])
                if r.status_code != 200:
                    self.failed.append(f"{r.status_code} {r.text}")
                    continue
                with self.lock:
                    self.answered[k] = int(r.headers["fenec-seq"])
                if i == 20:
                    self.started.set()
                if i == self.hold_at:
                    assert self.release.wait(120)

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        assert self.started.wait(60)
        return self

    def __exit__(self, *exc: Any) -> None:
        for t in self.threads:
            t.join(120)


def keys(c: httpx.Client) -> set[int]:
    r = q(c, "get w select k")
    assert r.status_code == 200
    return {row["k"] for row in r.json()}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "live.fenec"


def seed(c: httpx.Client) -> None:
    assert q(c, "create collection w (k int @unique, pad text)").status_code == 200
    assert q(c, "put w $1", [[{"k": -i, "pad": "y" * 200} for i in range(1, 1001)]]).status_code == 200
    assert q(c, "del w where k < -500").status_code == 200  # dead bytes for the compaction to drop


def test_compaction_under_writes_loses_nothing(path: Path) -> None:
    s = Server("--file", str(path), "--sync", "250", "--auto-compact", "off", env={"FENEC_HTTP_TOKEN": TOKEN})
    try:
        with s.client() as c:
            seed(c)
            before = path.stat().st_size
            runs = []
            with Writers(s) as writers:
                for _ in range(3):
                    r = c.post("/_admin/compact", headers=AUTH)
                    assert r.status_code == 200, r.text
                    runs.append(r.json())
            assert writers.failed == []
            assert len(writers.answered) == WRITERS * PER_WRITER
            for done in runs:
                assert set(done) >= {"bytes_before", "bytes_after", "lock_us", "write_lock_us", "encode_ms", "write_ms", "rests"}
            assert runs[0]["bytes_after"] < before  # the 500 deleted rows are gone from the file
            assert keys(c) == set(writers.answered) | {-i for i in range(1, 501)}
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.stop()
    again = Server("--file", str(path), env={"FENEC_HTTP_TOKEN": TOKEN})
    try:
        with again.client() as c:
            assert keys(c) == set(writers.answered) | {-i for i in range(1, 501)}
    finally:
        assert again.stop() == 0


def test_backup_under_writes_holds_exactly_what_was_answered_before_it(path: Path, tmp_path: Path) -> None:
    s = Server("--file", str(path), "--sync", "250", env={"FENEC_HTTP_TOKEN": TOKEN})
    copy = tmp_path / "backup.fenec"
    try:
        with s.client() as c:
            seed(c)
            # the writers go on while the backup is taken, and stop at their 60th row until it
            # is answered: some of their writes are in it and some are not, whatever the speed
            with Writers(s, hold_at=60) as writers:
                r = c.get("/_admin/backup", headers=AUTH)
                writers.release.set()
                assert r.status_code == 200, r.text
                assert r.headers["content-type"] == "application/octet-stream"
                seq = int(r.headers["fenec-seq"])
                copy.write_bytes(r.content)
            assert writers.failed == []
            assert len(writers.answered) == WRITERS * PER_WRITER
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.stop()
    before = {k for k, at in writers.answered.items() if at <= seq}
    assert 0 < len(before) < len(writers.answered)  # taken while the writers wrote
    restored = Server("--file", str(copy), env={"FENEC_HTTP_TOKEN": TOKEN})
    try:
        with restored.client() as c:
            assert keys(c) == before | {-i for i in range(1, 501)}
            assert q(c, "put w {k: 1000000}").status_code == 200  # a live data file, not a read-only copy
    finally:
        assert restored.stop() == 0


def test_who_may_compact_and_back_up(tmp_path: Path) -> None:
    secret = tmp_path / "jwt.secret"
    secret.write_text("a-secret-of-at-least-thirty-two-bytes-for-hs256\n")
    policy = tmp_path / "policy"
    policy.write_text("*  read,write  for ops\n")
    import subprocess

    from test_http_e2e import command

    jwt = subprocess.run([*command(), "--jwt-secret-file", str(secret), "--mint-token", '{"sub":"o","role":"ops"}'],
                         capture_output=True, text=True, check=True).stdout.strip()
    s = Server("--file", str(tmp_path / "a.fenec"), "--jwt-secret-file", str(secret), "--policy", str(policy),
               "--admin-token", "metrics-only", "--auth-delay", "0", env={"FENEC_HTTP_TOKEN": TOKEN})
    try:
        with s.client() as c:
            for method, route in (("POST", "/_admin/compact"), ("GET", "/_admin/backup")):
                assert c.request(method, route).status_code == 401
                assert c.request(method, route, headers={"authorization": "Bearer metrics-only"}).status_code == 401
                r = c.request(method, route, headers={"authorization": f"Bearer {jwt}"})
                assert r.status_code == 403 and "server token" in r.json()["error"]
                assert c.request(method, route, headers=AUTH).status_code == 200
            assert c.get("/_admin/compact", headers=AUTH).status_code == 404
            # the dashboard's rates are read like /_metrics: the server or the admin token
            assert c.get("/_metrics/recent").status_code == 401
            assert c.get("/_metrics/recent", headers={"authorization": f"Bearer {jwt}"}).status_code == 401
            recent = c.get("/_metrics/recent", headers={"authorization": "Bearer metrics-only"})
            assert recent.status_code == 200 and recent.json()["fields"][:3] == ["t", "enqueued", "claimed"]
            # the page itself holds no data and needs no token; a path beside it is an ordinary 404
            page = c.get("/_dashboard")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert "default-src 'none'" in page.headers["content-security-policy"]
            assert c.get("/_dashboard/app.js").status_code == 200
            missing = c.get("/_dashboard/secret.txt", headers=AUTH)
            assert missing.status_code == 404 and "error" in missing.json()
    finally:
        assert s.stop() == 0


def test_in_memory_backup_works_and_compaction_is_refused(tmp_path: Path) -> None:
    s = Server()
    try:
        with s.client() as c:
            assert c.post("/query", json={"query": "create collection m (n int)"}).status_code == 200
            assert c.post("/query", json={"query": "put m {n: 1}"}).status_code == 200
            r = c.post("/_admin/compact")
            assert r.status_code == 409 and "in-memory" in r.json()["error"]
            r = c.get("/_admin/backup")
            assert r.status_code == 200 and r.headers["fenec-seq"] == "2"
            (tmp_path / "m.fenec").write_bytes(r.content)
    finally:
        assert s.stop() == 0
    from fenecdb_server import Database

    db = Database(str(tmp_path / "m.fenec"))
    assert db.query("get m select n") == [{"n": 1}]
    db.close()
