"""End to end: a real `fenec-server` child process on 127.0.0.1, spoken to over sockets.

Every status code and header of http.md that is in the "Now" tier, `/batch` atomicity,
idempotent replay and conflict, and the wire limits. The held-claim scenarios are in
test_http_held.py; the fuzz in test_http_fuzz.py. Helpers here are shared by those files.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).resolve().parent
OPENAPI = HERE.parent / "openapi.json"
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit $2 returning *")
ACK = "del jobs where id = $1 and owner = $2 require 1"


def command() -> list[str]:
    exe = Path(sys.executable).parent / "fenec-server"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("fenec-server")
    return [found] if found else [sys.executable, "-m", "fenecdb_server.cli"]


class Server:
    """A `fenec-server` child on 127.0.0.1:0; the bound address is read from its log line."""

    def __init__(self, *flags: str, env: dict[str, str] | None = None,
                 preexec_fn: Callable[[], None] | None = None) -> None:
        self.flags = flags
        self.proc = subprocess.Popen([*command(), "--http", "127.0.0.1:0", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)
        self.log: list[str] = []
        self.url = ""
        deadline = time.monotonic() + 60  # generous: a loaded machine starts a Python server slowly
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline().decode()
            if not line:
                break
            self.log.append(line.rstrip("\n"))
            m = re.search(r"listening on: (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if not self.url:
            self.proc.kill()
            raise RuntimeError("server did not start: " + "\n".join(self.log) +
                               self.proc.stderr.read().decode())
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.addr = (host, int(port))
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.log.append(raw.decode().rstrip("\n"))

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 40), **kw)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._drain.join(2)


def raw(addr: tuple[str, int], data: bytes, *, timeout: float = 5) -> bytes:
    """Send bytes on a fresh connection and read until the server closes or goes quiet."""
    with socket.create_connection(addr, timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
                if complete(out):
                    break
        except (TimeoutError, OSError):
            pass
        return out


def complete(data: bytes) -> bool:
    """Whether `data` holds a whole answer: its head, and a body as long as its Content-Length."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?i)content-length: *(\d+)", head)
    return bool(m) and len(body) >= int(m.group(1))


def read_from(sock: socket.socket, done: Callable[[bytes], bool] = lambda data: False) -> bytes:
    """What the server writes on `sock` until `done` says it is enough, or the server closes it."""
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk
        if done(out):
            return out


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body_of(response: bytes) -> Any:
    return json.loads(response.partition(b"\r\n\r\n")[2])


@contextmanager
def served(*flags: str, setup: Sequence[str] = ()) -> Iterator[Server]:
    """A server for a module's tests: started with `flags`, the `setup` statements run; once the
    module is done, found still running and stopped cleanly (exit 0)."""
    s = Server(*flags)
    with s.client() as c:
        for text in setup:
            r = c.post("/query", json={"query": text})
            assert r.status_code == 200, r.text
    yield s
    assert s.proc.poll() is None, "the server died"
    assert s.stop() == 0


_fresh = itertools.count()


def fresh_collection(server: Server, create: str, prefix: str) -> Iterator[tuple[httpx.Client, str]]:
    """A collection of one test's own: `create` (`create collection NAME ...`) under the name
    prefix + a number no other test has; yields (client, name)."""
    name = f"{prefix}{next(_fresh)}"
    with server.client() as c:
        assert q(c, create.replace(create.split()[2], name, 1)).status_code == 200
        yield c, name


@pytest.fixture(scope="module")
def server() -> Any:
    with served("--max-connections", "0", setup=[JOBS]) as s:
        yield s


@pytest.fixture
def c(server: Server) -> Any:
    with server.client() as client:
        yield client


def q(c: httpx.Client, query: str, *params: Any, **headers: str) -> httpx.Response:
    return c.post("/query", json={"query": query, "params": list(params)}, headers=headers)


# -- start-up, small routes ------------------------------------------------------------------

def test_startup_lines_health_root_collections_openapi(server: Server, c: httpx.Client) -> None:
    assert re.fullmatch(r"fenec-server \S+: in memory  \[sync=250 ms, busy-poll=(100 us|off), engine=(compiled|python)\]", server.log[-2]), server.log
    assert re.fullmatch(r"fenec-http \S+ listening on: http://127\.0\.0\.1:\d+  \[no auth\]", server.log[-1])
    r = c.get("/_health")
    assert (r.status_code, r.json()) == (200, {"ok": True})
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    h = c.head("/_health")
    assert h.status_code == 200 and h.content == b"" and h.headers["content-length"] == str(len(r.content))
    root = c.get("/").json()
    assert "jobs" in root["collections"] and isinstance(root["fenecdb"], str)
    cols = {col["name"]: col for col in c.get("/collections").json()}
    fields = {f["name"]: f for f in cols["jobs"]["fields"]}
    assert fields["run_at"]["type"] == "timestamp" and fields["run_at"]["index"] == "sorted"
    doc = c.get("/_openapi.json")
    assert doc.status_code == 200
    assert doc.json() == json.loads(OPENAPI.read_text())
    assert "jobs" not in doc.text  # no collection names in it
    assert set(doc.json()["paths"]) == {"/query", "/batch", "/_health", "/_metrics", "/_whoami", "/", "/collections",
                                        "/_openapi.json"}


def test_answer_shapes_and_headers(c: httpx.Client) -> None:
    q(c, "create collection shapes (n int, tag text)")
    r = q(c, "put shapes [{n: 1, tag: $1}, {n: 2, tag: $1}]", "a")
    assert (r.status_code, r.json()) == (200, {"affected": 2})
    assert int(r.headers["fenec-seq"]) > 0 and r.headers["x-fenecdb-version"]
    seq = int(r.headers["fenec-seq"])
    r = q(c, "get shapes select n order n")
    assert r.json() == [{"n": 1}, {"n": 2}] and "x-fenecdb-version" in r.headers
    assert q(c, "get shapes count").json() == [{"count": 2}]
    r = q(c, "set shapes {tag: $1} where n = 2 returning n, tag", "b")
    assert r.json() == [{"n": 2, "tag": "b"}] and int(r.headers["fenec-seq"]) == seq + 1
    assert q(c, "set shapes {tag: $1} where n = 9", "b").json() == {"affected": 0}
    assert "message" in q(c, "create collection shapes2 (n int)").json()
    # `sql` alias, a non-array params value taken as one parameter, 123456789 and 19.99 exact
    r = c.post("/query", json={"sql": "get shapes select n where n = $1", "params": 2})
    assert r.json() == [{"n": 2}]
    q(c, "create collection nums (i int, f float)")
    q(c, "put nums {i: $1, f: $2}", 123456789, 19.99)
    assert q(c, "get nums select i, f").json() == [{"i": 123456789, "f": 19.99}]


@pytest.mark.parametrize("body,fragment", [
    (b'{"params": []}', "`query` is required"),
    (b'{"query": 5}', "query"),
    (b"[]", "object"),
    (b"{not json", "JSON"),
    (b'{"query": "get jobs\xff"}', "not UTF-8"),
    (b'{"query": "get jobs get jobs"}', ""),
    (b'{"query": "get jobs where"}', ""),
    (b"", ""),
])
def test_body_refusals_are_400(c: httpx.Client, body: bytes, fragment: str) -> None:
    r = c.post("/query", content=body)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    assert fragment in r.json()["error"]


def test_engine_statuses(c: httpx.Client) -> None:
    assert q(c, "get nowhere").status_code == 404
    q(c, "create collection twice (n int)")
    assert q(c, "create collection twice (n int)").status_code == 409
    r = q(c, ACK, 999999, "nobody")
    assert r.status_code == 412 and "requires 1" in r.json()["error"]
    r = q(c, "get jobs where " + "(" * 600 + "run_at" + ")" * 600 + " <= now()")
    assert r.status_code == 400 and "too deep" in r.json()["error"]


# -- /batch -----------------------------------------------------------------------------------

def nd(*lines: Any) -> bytes:
    return b"\n".join(json.dumps(x).encode() if not isinstance(x, bytes) else x for x in lines) + b"\n"


def test_batch_answers_and_atomicity(c: httpx.Client) -> None:
    q(c, "create collection acct (name text @unique, balance int)")
    q(c, "put acct [{name: 'a', balance: 10}, {name: 'b', balance: 0}]")
    ok = c.post("/batch", content=nd(
        {"query": "set acct {balance: balance - 5} where name = 'a' and balance >= 5 require 1"},
        b"",
        {"query": "set acct {balance: balance + 5} where name = 'b' returning balance"},
        {"query": "get acct select name, balance order name"}))
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"ok": 3, "results": [
        {"affected": 1}, {"rows": [{"balance": 5}]},
        {"rows": [{"name": "a", "balance": 5}, {"name": "b", "balance": 5}]}]}
    assert int(ok.headers["fenec-seq"]) > 0
    # the second statement fails: the first is put back, `at` names the failing one
    bad = c.post("/batch", content=nd(
        {"query": "set acct {balance: balance - 5} where name = 'a' require 1"},
        {"query": "set acct {balance: balance + 5} where name = 'zz' require 1"}))
    assert bad.status_code == 412
    assert bad.json() == {"error": "unmet: `set acct` wrote 0 rows, and requires 1", "completed": 0, "at": 1}
    assert q(c, "get acct select balance where name = 'a'").json() == [{"balance": 5}]
    # a schema statement is put back with the rest
    bad = c.post("/batch", content=nd({"query": "create collection ghost (n int)"},
                                      {"query": "put acct {name: 'a', balance: 1}"}))
    assert bad.status_code == 409 and bad.json()["at"] == 1 and bad.json()["completed"] == 0
    assert q(c, "get ghost").status_code == 404
    # refusals before anything runs
    r = c.post("/batch", content=b"\n \n")
    assert (r.status_code, r.json()) == (400, {"error": "empty batch"})
    r = c.post("/batch", content=nd({"query": "get acct"}, b"", b"{oops"))
    assert r.status_code == 400 and r.json()["error"].startswith("batch line 3: ") and r.json()["at"] == 1
    r = c.post("/batch", content=nd({"query": "get acct"}, {"params": []}))
    assert r.status_code == 400 and r.json()["at"] == 1 and r.json()["completed"] == 0
    r = c.post("/batch", content=nd({"query": "put acct {name: 'c', balance: 1}"}, {"query": "get nowhere"}))
    assert r.status_code == 404 and r.json()["at"] == 1
    assert q(c, "get acct where name = 'c'").json() == []
    # reads only: a snapshot, with its Fenec-Seq
    r = c.post("/batch", content=nd({"query": "get acct count"}))
    assert r.json() == {"ok": 1, "results": [{"rows": [{"count": 2}]}]} and "fenec-seq" in r.headers


# -- Idempotency-Key --------------------------------------------------------------------------

def test_idempotency_replay_conflict_and_failed_writes(c: httpx.Client) -> None:
    q(c, "create collection idem (n int)")
    body = {"query": "put idem {n: $1}", "params": [1]}
    first = c.post("/query", json=body, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    again = c.post("/query", json=body, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 200 and again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert q(c, "get idem count").json() == [{"count": 1}]
    other = c.post("/query", json={"query": "put idem {n: $1}", "params": [2]}, headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 422
    assert other.json() == {"error": "this Idempotency-Key came with another request: a key is for one"}
    # a failed write keeps no key: the retry runs again
    miss = {"query": "del idem where n = 42 require 1"}
    assert c.post("/query", json=miss, headers={"Idempotency-Key": "k-2"}).status_code == 412
    q(c, "put idem {n: 42}")
    assert c.post("/query", json=miss, headers={"Idempotency-Key": "k-2"}).json() == {"affected": 1}
    # a /batch replays its whole answer
    b = nd({"query": "put idem {n: 7}"}, {"query": "get idem count"})
    one = c.post("/batch", content=b, headers={"Idempotency-Key": "k-3"})
    two = c.post("/batch", content=b, headers={"Idempotency-Key": "k-3"})
    assert one.status_code == two.status_code == 200 and one.content == two.content
    assert two.headers["idempotent-replayed"] == "true"
    for bad in ("", "x" * 256):
        r = c.post("/query", json=body, headers={"Idempotency-Key": bad})
        assert (r.status_code, r.json()) == (400, {"error": "an Idempotency-Key is 1 to 255 bytes"})


# -- the wire ---------------------------------------------------------------------------------

def test_wire_statuses(server: Server) -> None:
    a = server.addr
    r = raw(a, b"POST /query HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert status_of(r) == 411 and "error" in body_of(r)
    r = raw(a, b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 70000000\r\n\r\n{")
    assert status_of(r) == 413
    assert body_of(r) == {"error": "the body is 70000000 bytes, the ceiling is 67108864"}
    r = raw(a, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    assert status_of(r) == 431 and "error" in body_of(r)
    r = raw(a, b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"b" * 100) for i in range(700))
            + b"\r\n")
    assert status_of(r) == 431
    r = raw(a, b"POST /query HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\nContent-Length: 2\r\n\r\n{}")
    assert status_of(r) == 431 and "error" in body_of(r)  # a head the direct path would read but for its size
    r = raw(a, b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    assert status_of(r) == 400 and "error" in body_of(r)
    r = raw(a, b"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(r) == 501 and "error" in body_of(r)
    r = raw(a, b"GET / HTTQ/1.1\r\n\r\n")
    assert status_of(r) == 400 and "error" in body_of(r)
    r = raw(a, b"GET /jobs?run_at=lte.now HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(r) == 404 and body_of(r) == {"error": "no route: GET /jobs"}
    r = raw(a, b"OPTIONS /query HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(r) == 204 and b"access-control" not in r.lower()
    r = raw(a, b"POST /query HTTP/1.0\r\nContent-Length: 26\r\n\r\n{\"query\":\"get jobs count\"}")
    assert status_of(r) == 200 and body_of(r) == [{"count": 0}]


def test_token_cors_connections_idle() -> None:
    s = Server("--http-token", "s3cret", "--http-cors", "https://app.example", "--max-connections", "3",
               "--idle-timeout", "1", "--http-read-only")
    try:
        assert s.log[-1].endswith("  [token, read only]")
        with s.client() as c:
            assert c.get("/_health").status_code == 200
            for path, method in (("/query", "POST"), ("/batch", "POST"), ("/", "GET"), ("/collections", "GET"),
                                 ("/_metrics", "GET")):
                r = c.request(method, path, content=b'{"query":"get x"}',
                              headers={"Authorization": "Bearer wrong"})
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
                assert r.json() == {"error": "invalid or missing token"}
            r = c.request("OPTIONS", "/query", headers={"Origin": "https://app.example"})
            assert r.status_code == 204 and r.content == b""
            assert r.headers["access-control-allow-origin"] == "https://app.example"
            assert "fenec-wait" in r.headers["access-control-allow-headers"]
            assert r.headers["access-control-max-age"] == "600"
            auth = {"Authorization": "Bearer s3cret"}
            r = c.post("/query", json={"query": JOBS}, headers=auth)
            assert (r.status_code, r.json()) == (403, {"error": "the server is in read-only mode"})
            r = c.post("/query", json={"query": "get jobs"}, headers={**auth, "Fenec-Wait": "1000"})
            assert r.status_code == 404  # reads still run: the collection does not exist
            assert c.get("/_metrics", headers=auth).status_code == 200
            assert r.headers["access-control-expose-headers"].startswith("fenec-seq")
        # past --max-connections: 503 with Retry-After, then closed; the health check still answers.
        # Each connection is inside a request (its head begun), so none may be closed for a newcomer
        # (an idle one that presented no token would be: test_http_backpressure.py)
        held = [socket.create_connection(s.addr) for _ in range(3)]
        for h in held:
            h.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\n")
        time.sleep(1.0)  # for the server to read the heads begun (nothing it answers shows it)
        r = raw(s.addr, b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert status_of(r) == 503 and b"retry-after: 1" in r.lower()
        assert body_of(r) == {"error": "too many connections"}
        r = raw(s.addr, b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(r) == 200 and b"connection: close" in r.lower()
        for h in held:
            h.close()
        time.sleep(0.3)
        # a silent keep-alive connection is closed after --idle-timeout
        with socket.create_connection(s.addr, timeout=5) as k:
            k.sendall(b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n")
            first = k.recv(4096)
            assert status_of(first) == 200
            t0 = time.monotonic()
            rest = k.recv(4096)
            while rest:
                rest = k.recv(4096)
            assert 0.8 < time.monotonic() - t0 < 10  # closed after its 1 s, not held open
    finally:
        assert s.stop() == 0


def test_metrics(server: Server, c: httpx.Client) -> None:
    q(c, "put jobs [{payload: {}, run_at: now(), attempts: 0}, {payload: {}, run_at: now() + 60000, attempts: 0}]")
    text = c.get("/_metrics")
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain; version=0.0.4")
    body = text.text
    for name in ("fenec_statements_total", "fenec_statement_duration_seconds_bucket", "fenec_held_claims",
                 "fenec_held_looks_total", "fenec_held_runs_total", "fenec_change_sequence",
                 "fenec_documents{collection=\"jobs\"}", "fenec_build_info"):
        # the whole name at a line's start: `fenec_held_claims` is also the start of `fenec_held_claims_taken_total`
        assert re.search(rf"^{re.escape(name)}[ {{]", body, re.M), name
    assert re.search(r'fenec_statements_total\{transport="http",kind="write"\} [1-9]', body)
    for gauge, value in (("ready", 1), ("leased", 0), ("delayed", 1), ("dead", 0)):
        assert f'fenec_queue_{gauge}{{collection="jobs"}} {value}\n' in body, gauge
    assert re.search(r'fenec_queue_oldest_ready_seconds\{collection="jobs"\} \d', body)
    head = c.head("/_metrics")
    assert head.status_code == 200 and head.content == b""
    q(c, "del jobs")


# -- the command line -------------------------------------------------------------------------

def run_cli(*args: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command(), *args], capture_output=True, text=True, timeout=timeout)


def test_cli_flags_and_exit_statuses(server: Server) -> None:
    h = run_cli("--help")
    assert h.returncode == 0 and "--max-connections" in h.stdout and "[100]" in h.stdout
    bad = run_cli("--frobnicate")
    assert bad.returncode == 2 and "--frobnicate" in bad.stderr and "usage" in bad.stderr
    assert run_cli("--sync", "sometimes").returncode == 2
    assert "--sync expects off, always or <ms>" in run_cli("--sync", "sometimes").stderr
    assert run_cli("--file").returncode == 2
    for flag in ("--dir", "--cdc", "--replica-of", "--jwt-secret", "--policy", "--max-memory"):
        r = run_cli(flag, "x")
        assert r.returncode == 2 and flag in r.stderr, (flag, r.stderr)
    assert run_cli("--auto-compact", "2").returncode == 2
    r = run_cli("--http", "0.0.0.0:0")
    assert r.returncode == 1 and "--http-token" in r.stderr
    assert run_cli("--ping", "--http", f"127.0.0.1:{server.addr[1]}").returncode == 0
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    r = run_cli("--ping", "--http", f"127.0.0.1:{port}")
    assert r.returncode == 1 and "ping failed" in r.stderr


def busy_metrics(c: httpx.Client) -> tuple[float, int]:
    text = c.get("/_metrics").text
    window = re.search(r"^fenec_busy_poll_window_seconds (\S+)$", text, flags=re.M)
    expired = re.search(r"^fenec_busy_poll_expired_total (\d+)$", text, flags=re.M)
    assert window and expired, text
    return float(window[1]), int(expired[1])


def test_the_busy_poll_window_ends_after_an_answer_and_is_counted() -> None:
    s = Server("--busy-poll", "100")  # explicit: kept even where the server may use only one CPU
    try:
        assert re.fullmatch(r"fenec-server \S+: in memory  \[sync=250 ms, busy-poll=100 us, engine=(compiled|python)\]", s.log[-2])
        with s.client() as c:
            assert busy_metrics(c) == (0.0001, 0)  # no answer on the direct path yet: never polled
            assert q(c, "create collection t (a int)").status_code == 200
            for _ in range(2):
                assert q(c, "get t count").status_code == 200
            deadline = time.monotonic() + 30
            while busy_metrics(c)[1] < 1:  # the window after the last answer runs out: the loop sleeps
                assert time.monotonic() < deadline, "no polling window ever ran out"
                time.sleep(0.01)
            assert busy_metrics(c)[1] <= 3  # at most one window an answer
    finally:
        assert s.stop() == 0
    s = Server("--busy-poll", "0")
    try:
        assert re.search(r"\[sync=250 ms, busy-poll=off, engine=(compiled|python)\]$", s.log[-2])
        with s.client() as c:
            assert q(c, "create collection t (a int)").status_code == 200
            assert busy_metrics(c) == (0.0, 0)
    finally:
        assert s.stop() == 0


def test_file_database_sigterm_logs(tmp_path: Path) -> None:
    path = tmp_path / "d.fenec"
    s = Server("--file", str(path), "--sync", "always")
    try:
        assert f"opened: {path}" in s.log
        assert re.fullmatch(rf"fenec-server \S+: {re.escape(str(path))}  \[sync=every write, busy-poll=(100 us|off), engine=(compiled|python)\]", s.log[-2])
        with s.client() as c:
            q(c, JOBS)
            assert q(c, "put jobs {payload: 1, run_at: now(), attempts: 0}").json() == {"affected": 1}
    finally:
        assert s.stop() == 0
    assert "shutting down: no pending writes" in s.log  # --sync always: every write was synced before its answer
    s = Server("--file", str(path), "--slow-ms", "0")
    try:
        with s.client() as c:
            assert q(c, "get jobs count").json() == [{"count": 1}]
            q(c, "get jobs where owner = $1", "secret-owner")
    finally:
        assert s.stop(signal.SIGHUP) == 0
    slow = [line for line in s.log if line.startswith("slow statement: ")]
    assert any(re.match(r'slow statement: [\d.]+ ms, http read: POST /query \{"query": "get jobs count"\}', x)
               for x in slow), slow
    assert not any("secret-owner" in x for x in s.log)
