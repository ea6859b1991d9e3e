"""The client's own HTTP/1.1 transport (`_http11`, `_net`, `_anet`) against a scripted server on
a loopback socket: keep-alive and the pool, answers framed every way HTTP/1.1 allows, a closed idle
connection, timeouts, cancellation, TLS, and the values a header or a JSON body cannot carry."""

from __future__ import annotations

import asyncio
import json
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import fenecdb
import pytest
from fenecdb import AsyncClient, Client
from fenecdb._anet import AsyncPool
from fenecdb._http11 import Reader, Target
from fenecdb._net import Pool
from fenecdb._wire import Shared, Wire

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{"affected":1}'
HOLD = b"hold"  # answer nothing; wait for the client to close the connection
HANG_UP = b"hang up"  # after this answer (OK), close the connection
CUT = b"cut:"  # send what follows, then close the connection
Respond = Callable[[bytes, int], bytes | None]


class Scripted:
    """A loopback server: each request (head and Content-Length body) is answered `respond(request,
    n)` (n counts the requests on its connection from 0); None closes the connection unanswered,
    HOLD answers nothing until the client closes, HANG_UP answers OK and closes."""

    def __init__(self, respond: Respond, *, tls: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.closed = threading.Event()  # a client closed a connection
        self.hung_up = threading.Event()  # the server closed one after answering
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            data = b""
            n = 0
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        self.closed.set()
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(data) < length:
                    data += conn.recv(65536)
                request, data = head + b"\r\n\r\n" + data[:length], data[length:]
                self.requests.append(request)
                answer = self.respond(request, n)
                n += 1
                if answer is None:
                    return
                if answer == HOLD:
                    if not conn.recv(1):
                        self.closed.set()
                    return
                if answer.startswith(CUT):
                    conn.sendall(answer[len(CUT):])
                    return
                conn.sendall(OK if answer == HANG_UP else answer)
                if answer == HANG_UP:
                    conn.close()
                    self.hung_up.set()
                    return
        except OSError:
            self.closed.set()
        finally:
            conn.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    made: list[Scripted] = []

    def make(respond: Respond, **kwargs: object) -> Scripted:
        made.append(Scripted(respond, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for server in made:
        server.close()


def until(condition: Callable[[], object], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come"
        time.sleep(0.01)


def test_requests_share_one_kept_alive_connection(scripted: Callable[..., Scripted]) -> None:
    server = scripted(lambda request, n: OK)
    with Client(server.url) as db:
        for _ in range(5):
            assert db.query("put jobs {a: 1}") == {"affected": 1}
    assert server.connections == 1 and len(server.requests) == 5
    head = server.requests[0].split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert head[0] == "POST /query HTTP/1.1" and head[1] == f"Host: 127.0.0.1:{server.port}"


def test_threads_share_the_pool_and_each_request_gets_its_own_answer(scripted: Callable[..., Scripted]) -> None:
    def echo(request: bytes, n: int) -> bytes:
        body = request.split(b"\r\n\r\n", 1)[1]
        answer = json.dumps([{"sent": json.loads(body)["params"][0]}]).encode()
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer)

    server = scripted(echo)
    db = Client(server.url)
    seen: dict[int, list[object]] = {}

    def work(t: int) -> None:
        seen[t] = [db.query("get jobs where id = $1", [t * 100 + i])[0]["sent"] for i in range(20)]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    db.close()
    assert seen == {t: [t * 100 + i for i in range(20)] for t in range(4)}
    assert 1 <= server.connections <= 4


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
    b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"aff\r\n9;x=1\r\nected":1}\r\n0\r\nX-T: 1\r\n\r\n',
    b'HTTP/1.1 200 OK\r\nContent-Length: 14\r\nConnection: close\r\n\r\n{"affected":1}',
    b'HTTP/1.0 200 OK\r\n\r\n{"affected":1}',
])
def test_every_framing_of_an_answer_is_read(answer: bytes) -> None:
    for size in (1, 7, len(answer)):  # fed whole, or a few bytes at a time
        reader = Reader()
        done = False
        for at in range(0, len(answer), size):
            done = reader.feed(answer[at:at + size])
            if done:
                break
        status, headers, body = reader.answer() if done else reader.end()
        assert (status, json.loads(body)) == (200, {"affected": 1})
        assert reader.keep == (b"close" not in answer and b"HTTP/1.0" not in answer)


@pytest.mark.parametrize(("answer", "error"), [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.1"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n", "bad Content-Length"),  # a superscript two
    (b"HTTP/1.1 2\xb20 OK\r\n\r\n", "not HTTP/1.1"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}}", "more than its answer's Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "other than chunked"),
])
def test_a_bad_answer_is_a_connection_error(answer: bytes, error: str) -> None:
    with pytest.raises(ConnectionError, match=error):
        Reader().feed(answer)


def test_an_answer_cut_short_is_a_connection_error_and_its_connection_is_dropped(
        scripted: Callable[..., Scripted]) -> None:
    server = scripted(lambda request, n: CUT + OK[:-3])
    with Client(server.url, timeout=10) as db:
        with pytest.raises(ConnectionError, match="before its answer was complete"):
            db.query("put jobs {a: 1}")
        assert db._pool is not None and db._pool._idle == []

    async def main() -> None:
        async with AsyncClient(server.url, timeout=10) as db:
            with pytest.raises(ConnectionError, match="before its answer was complete"):
                await db.query("put jobs {a: 1}")
            assert db._pool is not None and db._pool._idle == []

    asyncio.run(main())


def test_a_server_that_drops_the_line_is_a_connection_error(scripted: Callable[..., Scripted]) -> None:
    server = scripted(lambda request, n: None)
    with Client(server.url, timeout=10) as db, pytest.raises(ConnectionError, match="before its answer"):
        db.query("put jobs {a: 1}")


def test_an_idle_connection_the_server_closed_is_replaced(scripted: Callable[..., Scripted]) -> None:
    """As the server's --idle-timeout does: the connection ends while it waits in the pool."""
    server = scripted(lambda request, n: HANG_UP)  # no `Connection: close`: the client keeps it
    with Client(server.url) as db:
        assert db.query("put jobs {a: 1}") == {"affected": 1}
        assert server.hung_up.wait(30)
        until(lambda: select.select([db._pool._idle[0].sock], [], [], 0)[0])  # type: ignore[union-attr]
        assert db.query("put jobs {a: 2}") == {"affected": 1}  # sent on a new connection, not lost
    assert server.connections == 2 and len(server.requests) == 2


def test_a_cancelled_async_request_closes_its_connection(scripted: Callable[..., Scripted]) -> None:
    server = scripted(lambda request, n: HOLD)

    async def main() -> None:
        async with AsyncClient(server.url) as db:
            task = asyncio.ensure_future(db.query("set jobs {owner: 1} where run_at <= now() limit 1 returning *",
                                                  wait=30))
            await asyncio.sleep(0)
            until_sent = time.monotonic() + 30
            while not server.requests:
                assert time.monotonic() < until_sent
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert db._pool is not None and db._pool._idle == []

    asyncio.run(asyncio.wait_for(main(), 60))
    assert server.closed.wait(30) and server.connections == 1


def test_async_requests_keep_their_connection_alive(scripted: Callable[..., Scripted]) -> None:
    server = scripted(lambda request, n: OK)

    async def main() -> list[object]:
        async with AsyncClient(server.url) as db:
            return [await db.query("put jobs {a: 1}") for _ in range(5)]

    assert asyncio.run(main()) == [{"affected": 1}] * 5
    assert server.connections == 1


def test_a_held_claim_of_a_stopping_worker_is_given_up_at_once(scripted: Callable[..., Scripted]) -> None:
    """The blocking worker's stop() shuts the claim's own socket down: the server sees it gone."""
    server = scripted(lambda request, n: HOLD)
    with Client(server.url) as db:
        worker = fenecdb.Worker(db, "jobs", batch=1, wait=30, heartbeat=0)
        runner = threading.Thread(target=worker.run, args=(lambda job: None,))
        started = time.monotonic()
        runner.start()
        until(lambda: server.requests)
        worker.stop()
        runner.join(20)
        assert not runner.is_alive() and time.monotonic() - started < 20
    assert server.closed.wait(30)  # the server saw the claim's connection go


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: the server's context, and a client's that trusts it."""
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests need the openssl command (Debian's openssl package)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


def test_https_goes_over_tls_and_checks_the_certificate(scripted: Callable[..., Scripted],
                                                         tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ctx, client_ctx = tls
    server = scripted(lambda request, n: OK, tls=server_ctx)
    wire = Wire(None, 10.0, None, Shared())
    pool = Pool(Target(server.url), client_ctx)
    try:
        for _ in range(2):
            status, _, body = pool.send(wire.query("put jobs {a: 1}", None))
            assert (status, json.loads(body)) == (200, {"affected": 1})
    finally:
        pool.close()
    assert server.connections == 1

    async def main() -> bytes:
        apool = AsyncPool(Target(server.url), client_ctx)
        try:
            return (await apool.send(wire.query("put jobs {a: 1}", None)))[2]
        finally:
            await apool.aclose()

    assert json.loads(asyncio.run(main())) == {"affected": 1}
    # the default context does not trust a self-signed certificate
    with Client(server.url) as db, pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        db.query("put jobs {a: 1}")


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="http://host"):
        Client("ftp://127.0.0.1:21")
    assert Target("https://db.example.com/fenec/").encode(
        Wire(None, None, None, Shared()).query("get t", None)).startswith(
        b"POST /fenec/query HTTP/1.1\r\nHost: db.example.com\r\n")
    assert b"Host: [::1]:9000\r\n" in Target("http://[::1]:9000").encode(
        Wire(None, None, None, Shared()).query("get t", None))


@pytest.mark.parametrize("bad", ["a\r\nX-Evil: 1", "a\nb", "a\x00b"])
def test_a_header_value_cannot_hold_a_line_break(bad: str) -> None:
    with pytest.raises(ValueError, match="line break"):
        Client("http://127.0.0.1:1", token=bad)
    with pytest.raises(ValueError, match="line break"):
        Client("http://127.0.0.1:1").with_idempotency_key(bad)


def test_json_the_standard_library_refuses_or_writes_is_kept() -> None:
    wire = Wire(None, None, None, Shared())
    for bad in (float("nan"), float("inf"), [1, {"x": float("-inf")}]):
        with pytest.raises(ValueError, match="Out of range float values"):
            wire.query("put t {a: $1}", [bad])
    big = 2**70  # past orjson's 64 bits: written as json writes it
    assert json.loads(wire.query("put t {a: $1}", [big]).body)["params"] == [big]
    assert wire.query("put t {a: $1}", [None]).body == b'{"query":"put t {a: $1}","params":[null]}'
    assert wire.answer(wire.query("get t", None), 200, {}, b'[{"a":%d}]' % big) == [{"a": big}]
    odd = wire.query("put t {a: 1}", None)
    assert wire.answer(odd, 200, {"fenec-seq": "\xb2"}, b'{"affected":1}') == {"affected": 1}  # not a seq
    assert wire.shared.seq == 0


def test_an_async_connection_times_each_request_by_its_own_timeout(scripted: Callable[..., Scripted]) -> None:
    """The timer is kept across a connection's requests: a later request's own timeout rules."""
    slow = scripted(lambda request, n: OK if n == 0 else (time.sleep(0.8), OK)[1])
    held = scripted(lambda request, n: OK if n == 0 else HOLD)
    short, none, long = (Wire(None, t, None, Shared()) for t in (0.3, None, 30.0))

    async def main() -> None:
        pool = AsyncPool(Target(slow.url))
        try:  # a timeout of 0.3 s, then none: the second answer, 0.8 s late, is awaited
            assert (await pool.send(short.query("put t {a: 1}", None)))[0] == 200
            assert (await pool.send(none.query("put t {a: 1}", None)))[0] == 200
        finally:
            await pool.aclose()
        pool = AsyncPool(Target(held.url))
        try:  # 30 s, then 0.3 s: the second times out after its own 0.3 s
            assert (await pool.send(long.query("put t {a: 1}", None)))[0] == 200
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await pool.send(short.query("put t {a: 1}", None))
            assert time.monotonic() - started < 15
        finally:
            await pool.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))
    assert slow.connections == 1 and held.connections == 1
