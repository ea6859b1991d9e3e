"""Hostile clients against a real `fenec-server` (issue 18, items 2-5): connections that never
finish their head or body, held claims filling every slot, statements past the size ceiling,
and a large statement that must not stop the other clients. Every wait is for a condition,
with a generous deadline; nothing compares a duration with a bound."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fenecdb_server.http.connection import REFUSED_READ
from test_http_e2e import JOBS, Server, body_of, command, complete, q, raw, read_from, status_of
from test_http_held import read_answer

DEADLINE = 60.0
TAKE = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
        "where run_at <= now() order run_at limit 1 returning *")


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server writes on `sock` until it closes it (DEADLINE at most)."""
    sock.settimeout(DEADLINE)
    return read_from(sock)


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, "the condition never came"
        time.sleep(0.05)


def held_now(s: Server) -> int:
    """`fenec_held_claims` from a scrape (itself answered past the ceiling)."""
    r = raw(s.addr, b"GET /_metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    for line in r.decode().splitlines():
        if line.startswith("fenec_held_claims "):
            return int(line.split()[1])
    return -1


def test_slow_heads_and_bodies_are_timed_out_and_free_their_slots() -> None:
    """Slowloris: with --max-connections 4, four connections that never finish (two heads, two
    bodies) held every slot for ever; now each is answered 408 and closed."""
    s = Server("--max-connections", "4", "--header-timeout", "1", "--body-timeout", "1.5")
    try:
        silent = socket.create_connection(s.addr)  # connects and says nothing
        half_head = socket.create_connection(s.addr)
        half_head.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Le")
        half_body = socket.create_connection(s.addr)
        half_body.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"query\":")
        drip = socket.create_connection(s.addr)  # a body that keeps coming, a byte at a time
        drip.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        stop = threading.Event()

        def dripping() -> None:
            try:
                while not stop.wait(0.2):
                    drip.sendall(b" ")
            except OSError:
                pass

        dripper = threading.Thread(target=dripping, daemon=True)
        dripper.start()
        answers = {name: read_until_closed(sock) for name, sock in
                   (("silent", silent), ("half head", half_head), ("half body", half_body), ("drip", drip))}
        stop.set()
        dripper.join()
        for name, got in answers.items():
            assert status_of(got) == 408, (name, got)
        assert body_of(answers["silent"]) == {"error": "the request head did not arrive within 1 s"}
        assert body_of(answers["drip"]) == {"error": "the request body did not arrive within 1.5 s"}
        for sock in (silent, half_head, half_body, drip):
            sock.close()
        # the slots are free again: a client is served (the server may still be closing the last)
        deadline = time.monotonic() + DEADLINE
        while True:
            r = raw(s.addr, b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 26\r\n\r\n"
                            b"{\"query\":\"get jobs count\"}")
            if status_of(r) != 503 or time.monotonic() > deadline:
                break
        assert status_of(r) == 404  # no collection: the engine answered
        # a complete request on a connection is not cut by the timeouts while it is served
        with s.client() as c:
            q(c, JOBS)
            claimed = c.post("/query", json={"query": TAKE, "params": ["w"]}, headers={"Fenec-Wait": "3000"})
            assert claimed.status_code == 200 and claimed.json() == []
    finally:
        assert s.stop() == 0


def test_health_ping_and_metrics_answer_when_held_claims_fill_every_slot() -> None:
    s = Server("--max-connections", "4")
    clients = [s.client() for _ in range(4)]
    try:
        q(clients[0], JOBS)
        pool = ThreadPoolExecutor(4)
        held = []

        def hold(c: httpx.Client, worker: str) -> httpx.Response:
            while True:  # a scrape's connection may not be closed yet at the server: Retry-After
                r = c.post("/query", json={"query": TAKE, "params": [worker]}, headers={"Fenec-Wait": "30000"})
                if r.status_code != 503:
                    return r
                time.sleep(0.05)

        for i, c in enumerate(clients):  # one at a time, each seen held before the next comes
            held.append(pool.submit(hold, c, f"w{i}"))
            wait_for(lambda n=i + 1: held_now(s) == n)
        r = raw(s.addr, b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 26\r\n\r\n"
                        b"{\"query\":\"get jobs count\"}")
        assert status_of(r) == 503 and body_of(r) == {"error": "too many connections"}
        assert not any(h.done() for h in held)
        r = raw(s.addr, b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(r) == 200 and body_of(r) == {"ok": True}
        r = raw(s.addr, b"GET /_metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(r) == 200 and b"fenec_" in r
        ping = subprocess.run([*command(), "--ping", "--http", f"{s.addr[0]}:{s.addr[1]}"], timeout=DEADLINE)
        assert ping.returncode == 0
        # the reserve answers only those two: anything else past the ceiling is still 503
        r = raw(s.addr, b"GET /collections HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(r) == 503
        # the workers are still held: the reserve took nothing from them
        assert not any(h.done() for h in held)
    finally:
        for c in clients:
            c.close()
        assert s.stop() == 0


def test_statement_text_past_the_ceiling_is_413() -> None:
    s = Server("--max-statement-bytes", "1000")
    try:
        with s.client() as c:
            q(c, JOBS)
            long = "get jobs where owner = '" + "é" * 600 + "'"
            assert len(long) == 625 and len(long.encode()) == 1225  # bytes are counted, not characters
            r = c.post("/query", json={"query": long})
            assert r.status_code == 413
            assert r.json() == {"error": "the statement text is 1225 bytes, the ceiling is 1000 "
                                         "(--max-statement-bytes): send values as params"}
            r = c.post("/query", json={"query": "get jobs where owner = $1", "params": ["é" * 100_000]})
            assert r.status_code == 200  # values as params do not count
            # a batch counts its distinct texts together; a text repeated counts once
            line = json.dumps({"query": "get jobs where owner = '" + "x" * 400 + "'"})
            r = c.post("/batch", content="\n".join([line] * 50).encode())
            assert r.status_code == 200 and r.json()["ok"] == 50
            lines = [json.dumps({"query": f"get jobs where owner = '{i}" + "x" * 400 + "'"}) for i in range(3)]
            r = c.post("/batch", content="\n".join(lines).encode())
            assert r.status_code == 413 and "the ceiling is 1000" in r.json()["error"]
            assert c.get("/_health").status_code == 200
    finally:
        assert s.stop() == 0


def test_a_large_statement_does_not_stop_other_clients() -> None:
    """A 300 KB `in` list takes seconds to parse and plan. It ran on the event loop: nothing else
    was answered until it was done (the old code answered 0 or 1 request while it was pending,
    those that came before its parse began). Now health checks and claims go on while it is
    parsed in a worker thread: many of their answers arrive while it is still pending."""
    s = Server("--max-statement-bytes", "0")
    try:
        with s.client() as c:
            q(c, JOBS)
        body = json.dumps({"query": "get jobs where attempts in [" + ",".join(["1"] * 150_000) + "] count"}).encode()
        done = threading.Event()
        answered: dict[str, int] = {"health": 0, "claim": 0}

        def poll(kind: str) -> None:
            with s.client() as c:
                while not done.is_set():
                    if kind == "health":
                        r = c.get("/_health")
                    else:
                        r = c.post("/query", json={"query": TAKE, "params": ["w"]})
                    if r.status_code == 200 and not done.is_set():
                        answered[kind] += 1

        with socket.create_connection(s.addr) as big, ThreadPoolExecutor(2) as pool:
            big.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            pollers = [pool.submit(poll, k) for k in answered]  # only once the server has it all
            big.settimeout(300)
            got = read_answer(big)
            done.set()
            for p in pollers:
                p.result(timeout=DEADLINE)
        assert status_of(got) == 200 and body_of(got) == [{"count": 0}]
        assert answered["health"] >= 10 and answered["claim"] >= 10, answered
    finally:
        assert s.stop() == 0


def test_a_request_target_over_64_kib_is_414_in_json() -> None:
    """Issue 40, item 8: a request line over 64 KiB was answered 400 `malformed request: User
    callback error` (httptools reads no longer URL); now 414, whether it comes whole or in parts."""
    s = Server()
    try:
        target = b"a" * (70 << 10)
        for request in (b"GET /" + target + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"POST /query?" + target + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"):
            r = raw(s.addr, request, timeout=DEADLINE)
            assert status_of(r) == 414, r[:200]
            assert body_of(r) == {"error": "the request target is over 65535 bytes"}
        with socket.create_connection(s.addr) as sock:  # in parts: refused once its bytes pass the ceiling
            sock.sendall(b"GET /")
            for _ in range(70):
                try:
                    sock.sendall(b"a" * 1024)
                except OSError:
                    break  # refused and closed while it was still sending
            r = read_until_closed(sock)
        assert status_of(r) == 414 and "65535" in body_of(r)["error"]
        # a long target within the ceilings is read: an ordinary 404
        r = raw(s.addr, b"GET /" + b"a" * (60 << 10) + b" HTTP/1.1\r\nHost: x\r\n\r\n", timeout=DEADLINE)
        assert status_of(r) == 404
    finally:
        assert s.stop() == 0


def refused(sock: socket.socket) -> None:
    """Until the server's answer is there to read on `sock` (DEADLINE at most)."""
    assert select.select([sock], [], [], DEADLINE)[0], "no answer came"


def test_a_client_still_sending_its_refused_head_reads_the_refusal() -> None:
    """A head refused as it arrives (414 for its target, 431 for its header lines) closed the
    connection at once, with the client's bytes unread: the socket was reset, and a client still
    sending its head got a broken pipe or a reset instead of the answer. Now the server shuts its
    writing side and reads on, dropping what comes: every piece is taken, then the answer is read
    whole, then the end of the connection."""
    s = Server()
    try:
        for start, status in ((b"GET /", 414), (b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: ", 431)):
            with socket.create_connection(s.addr, timeout=DEADLINE) as sock:
                sock.sendall(start)
                for _ in range(70):  # past the 64 KiB ceiling, a piece at a time
                    sock.sendall(b"a" * 1024)
                refused(sock)
                for _ in range(32):  # the rest of its head, sent after the refusal came
                    sock.sendall(b"a" * 1024)
                got = read_from(sock)  # to the end the server sent: no reset on the way
            assert status_of(got) == status and complete(got), got[:200]
            assert body_of(got)["error"]
        with s.client() as c:  # the server goes on serving
            assert c.get("/_health").status_code == 200
    finally:
        assert s.stop() == 0


def test_a_refused_client_that_never_stops_sending_is_cut() -> None:
    """The reading after a refusal is bounded: a client that goes on sending after its 414 is cut
    once the server has dropped REFUSED_READ bytes (or after REFUSED_LINGER s, were it slower)."""
    s = Server()
    try:
        with socket.create_connection(s.addr, timeout=DEADLINE) as sock:
            sock.sendall(b"GET /" + b"a" * (70 << 10))
            refused(sock)
            got = read_from(sock, complete)
            assert status_of(got) == 414
            piece = b"a" * (64 << 10)
            sent = 0
            with pytest.raises((BrokenPipeError, ConnectionResetError)):
                while True:
                    sock.sendall(piece)  # a stalled server would raise TimeoutError instead
                    sent += len(piece)
                    # the bound plus what the two sockets' buffers hold, with a wide margin
                    assert sent < REFUSED_READ + (64 << 20), "the client was never cut"
        with s.client() as c:
            assert c.get("/_health").status_code == 200
    finally:
        assert s.stop() == 0


def test_out_of_file_descriptors_is_503_logged_once_and_serving_goes_on() -> None:
    """A server at its descriptor limit (`ulimit -n` 96 here) used to reset every new connection
    (libuv accepts and closes it, its request unread) and log nothing. Now a connection that
    would leave fewer than a reserve of descriptors is answered 503 and closed, the server logs
    it (one line for many), the connections it has are served, and once some close a new one is."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))

    health = b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n"

    def ask(sock: socket.socket) -> bytes:
        sock.sendall(health)
        return read_from(sock, lambda got: b"\r\n\r\n" in got and got.rstrip().endswith(b"}"))

    s = Server("--max-connections", "1000", preexec_fn=limited)
    kept: list[socket.socket] = []
    try:
        refused = b""
        while not refused:
            assert len(kept) < 96, "every connection was served: the limit was never met"
            sock = socket.create_connection(s.addr, timeout=DEADLINE)
            try:
                got = ask(sock)
            except ConnectionResetError:
                got = b"reset"
            assert got.startswith(b"HTTP/1.1 "), f"connection {len(kept) + 1}: {got[:60]!r}"
            if status_of(got) == 503:
                refused = got
                sock.close()
            else:
                assert status_of(got) == 200
                kept.append(sock)
        assert body_of(refused) == {"error": "the server is out of file descriptors"}
        assert b"retry-after: 1" in refused.lower()
        more = 0
        for _ in range(10):  # more newcomers: each answered 503, and no line logged for each
            with socket.create_connection(s.addr, timeout=DEADLINE) as sock:
                got = ask(sock)
                assert status_of(got) == 503, got[:60]
                more += 1
        wait_for(lambda: any("out of file descriptors" in line for line in s.log))
        logged = sum("out of file descriptors" in line for line in s.log)
        assert logged < 1 + more
        assert status_of(ask(kept[0])) == 200  # a connection it had is served
        for sock in kept[-10:]:
            sock.close()
        del kept[-10:]

        def served_anew() -> bool:
            with socket.create_connection(s.addr, timeout=DEADLINE) as sock:
                return status_of(ask(sock)) == 200

        wait_for(served_anew)
    finally:
        for sock in kept:
            sock.close()
        assert s.stop() == 0
