"""`--access-log PATH|-`: one line per request (time, peer, method, path, status, ms, bytes) on a
real `fenec-server`, and never a parameter value, a query string, a token or a body."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from test_http_e2e import Server

TOKEN = "access-log-server-token"
LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) (\S+) (\S+) (\d{3}|-) (\d+\.\d{3})ms (\d+)B")


def lines(path: Path, n: int) -> list[str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = path.read_text().splitlines() if path.exists() else []
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{n} lines expected in the access log, found {got}")


def test_one_line_per_request_and_no_values(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    s = Server("--access-log", str(log), "--auth-delay", "0", env={"FENEC_HTTP_TOKEN": TOKEN})
    auth = {"authorization": f"Bearer {TOKEN}"}
    try:
        with s.client() as c:
            sent = []
            r = c.post("/query", json={"query": "create collection jobs (payload json, run_at timestamp @sorted, "
                                                "owner text, attempts int)"}, headers=auth)
            sent.append(("POST", "/query", r))
            r = c.post("/query?who=SECRET-IN-QUERY-STRING",
                       json={"query": "put jobs {payload: $1, run_at: now(), attempts: 0}",
                             "params": [{"card": "SECRET-PARAM-VALUE"}]}, headers=auth)
            sent.append(("POST", "/query", r))
            r = c.post("/query", json={"query": "get jobs where payload.card = 'SECRET-IN-TEXT'"},
                       headers={"authorization": "Bearer SECRET-WRONG-TOKEN"})
            sent.append(("POST", "/query", r))
            r = c.post("/batch", content=b'{"query":"get jobs count"}\n', headers=auth)
            sent.append(("POST", "/batch", r))
            r = c.get("/_health")
            sent.append(("GET", "/_health", r))
            r = c.get("/no where/\u00e9%25", headers=auth)  # the path as decoded, escaped again
            sent.append(("GET", "/no%20where/%C3%A9%25", r))
            assert [x[2].status_code for x in sent] == [200, 200, 401, 200, 200, 404]
            got = lines(log, len(sent))
    finally:
        assert s.stop() == 0
    text = log.read_text()
    assert "SECRET" not in text
    assert len(got) == len(sent)
    for line, (method, path, r) in zip(got, sent, strict=True):
        m = LINE.fullmatch(line)
        assert m, line
        assert (m[2], m[3], m[4], int(m[5])) == ("127.0.0.1", method, path, r.status_code)
        assert int(m[7]) == len(r.content)


def test_to_stdout_and_off_by_default(tmp_path: Path) -> None:
    s = Server("--access-log", "-")
    try:
        with s.client() as c:
            assert c.get("/_health").status_code == 200
        assert s.stop() == 0
        assert s.proc.stdout is not None
        out = s.proc.stdout.read().decode()
    finally:
        if s.proc.poll() is None:
            s.stop()
    assert LINE.fullmatch(out.strip()), out
    quiet = Server()
    try:
        with quiet.client() as c:
            assert c.get("/_health").status_code == 200
        assert quiet.stop() == 0
        assert quiet.proc.stdout is not None
        assert quiet.proc.stdout.read() == b""
    finally:
        if quiet.proc.poll() is None:
            quiet.stop()


def test_a_log_that_cannot_be_opened_stops_the_start(tmp_path: Path) -> None:
    import subprocess

    from test_http_e2e import command

    r = subprocess.run([*command(), "--http", "127.0.0.1:0", "--access-log", str(tmp_path / "no" / "such" / "x")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "could not open the access log" in r.stderr


def test_a_held_claim_is_logged_when_answered_or_given_up(tmp_path: Path) -> None:
    import httpx

    log = tmp_path / "access.log"
    s = Server("--access-log", str(log))
    claim = {"query": "set jobs {owner: 'w', run_at: now() + 30000, attempts: attempts + 1} "
                      "where run_at <= now() order run_at limit 1 returning id"}
    try:
        with s.client() as c:
            assert c.post("/query", json={"query": "create collection jobs (run_at timestamp @sorted, owner text, "
                                                   "attempts int)"}).status_code == 200
            r = c.post("/query", json=claim, headers={"fenec-wait": "300"})  # held, then answered []
            assert r.status_code == 200 and r.json() == []
        with s.client(timeout=1.0) as c, pytest.raises(httpx.ReadTimeout):
            c.post("/query", json=claim, headers={"fenec-wait": "30000"})  # the client gives up
        got = lines(log, 3)
    finally:
        assert s.stop() == 0
    held, gone = LINE.fullmatch(got[1]), LINE.fullmatch(got[2])
    assert held and gone, got
    assert held[5] == "200" and float(held[6]) >= 300 and held[7] == "2"
    assert gone[5] == "-" and gone[7] == "0"  # its time: until the server saw the client go, however late
