"""The proxy of fault_layer.py, mode by mode, before a plain TCP server that answers each request.

The upstream answers every chunk it reads with `answer:<chunk>`, and records what it read, so a test
sees both what reached the server and what came back through the proxy.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from fault_layer import Proxy


class Upstream:
    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                self.seen.append(data)
                try:
                    conn.sendall(b"answer:" + data)
                except OSError:
                    return


@pytest.fixture
def proxy() -> Iterator[tuple[Proxy, Upstream]]:
    up = Upstream()
    p = Proxy()
    p.start(up.port)
    try:
        yield p, up
    finally:
        p.close()
        up.sock.close()


def ask(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """One request on a new connection; b"" when the connection ends without an answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        try:
            return s.recv(4096)
        except ConnectionResetError:
            return b""


def test_pass_forwards_both_ways(proxy: tuple[Proxy, Upstream]) -> None:
    p, up = proxy
    assert ask(p.port, b"get") == b"answer:get"
    assert up.seen == [b"get"]


def test_drop_runs_the_request_and_loses_its_answer(proxy: tuple[Proxy, Upstream]) -> None:
    p, up = proxy
    p.drop_answers(1, "CLAIM")
    assert ask(p.port, b"ack 1") == b"answer:ack 1"     # not matching: passes
    assert ask(p.port, b"a claim") == b""               # matching: ran, answer lost
    assert up.seen == [b"ack 1", b"a claim"]
    assert p.dropped == 1
    assert ask(p.port, b"a claim") == b"answer:a claim"  # only the next N


def test_cut_resets_open_connections_and_lets_new_ones_pass(proxy: tuple[Proxy, Upstream]) -> None:
    p, _ = proxy
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        s.sendall(b"one")
        assert s.recv(4096) == b"answer:one"
        p.cut()
        with pytest.raises(OSError):
            s.sendall(b"two")
            if not s.recv(4096):
                raise ConnectionResetError("closed")
    assert p.cut_conns == 1
    assert ask(p.port, b"three") == b"answer:three"


def test_refuse_closes_the_port_and_pass_opens_the_same_one(proxy: tuple[Proxy, Upstream]) -> None:
    p, _ = proxy
    port = p.port
    p.refuse()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10)
    p.pass_()
    assert p.port == port
    assert ask(port, b"back") == b"answer:back"


def test_freeze_accepts_and_never_answers_until_healed(proxy: tuple[Proxy, Upstream]) -> None:
    p, up = proxy
    p.freeze()
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        s.sendall(b"frozen")
        s.settimeout(0.5)  # an answer that never comes: a slower machine only makes it later
        with pytest.raises(socket.timeout):
            s.recv(4096)
        assert b"frozen" not in b"".join(up.seen)
        p.pass_()
        s.settimeout(10)
        try:
            assert s.recv(4096) == b""   # healing resets what was frozen
        except ConnectionResetError:
            pass
    assert ask(p.port, b"healed") == b"answer:healed"


def test_pass_follows_the_server_to_a_new_port(proxy: tuple[Proxy, Upstream]) -> None:
    p, _ = proxy
    other = Upstream()
    try:
        p.pass_(other.port)
        assert ask(p.port, b"moved") == b"answer:moved"
        assert other.seen == [b"moved"]
    finally:
        other.sock.close()


def test_busy_answers_503_to_the_next_new_connections_and_runs_nothing(proxy: tuple[Proxy, Upstream]) -> None:
    p, up = proxy
    p.busy(2)
    request = b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    for _ in range(2):
        answer = ask(p.port, request)
        assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b'{"error":"too many connections"}')
    assert up.seen == [] and p.busied == 2
    assert ask(p.port, b"third") == b"answer:third"
