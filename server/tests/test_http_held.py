"""Held claims (`Fenec-Wait`, http.md §8) and many workers, against a real `fenec-server`."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from test_http_e2e import (
    ACK,
    CLAIM,
    JOBS,
    Server,
    body_of,
    complete,
    fresh_collection,
    nd,
    q,
    read_from,
    served,
    status_of,
)


@pytest.fixture(scope="module")
def server() -> Any:
    with served("--max-connections", "0") as s:
        yield s


@pytest.fixture
def jobs(server: Server) -> Any:
    """A fresh queue collection per test: (client, name)."""
    yield from fresh_collection(server, JOBS, "q")


def held_count(c: httpx.Client, headers: dict[str, str] | None = None) -> int:
    m = re.search(r"^fenec_held_claims (\d+)$", c.get("/_metrics", headers=headers).text, re.M)
    assert m
    return int(m.group(1))


def wait_held(c: httpx.Client, n: int, timeout: float = 30, headers: dict[str, str] | None = None) -> None:
    """Until the server holds `n` claims (`headers` to read its metrics with, when it wants a token)."""
    deadline = time.monotonic() + timeout
    while held_count(c, headers) < n:
        assert time.monotonic() < deadline, f"never {n} held"
        time.sleep(0.01)


def claim_text(name: str, lease_ms: int = 30000, limit: int = 1) -> str:
    return CLAIM.replace("jobs", name).replace("30000", str(lease_ms)).replace("$2", str(limit))


def request(text: str, *params: Any, wait: int = 10000, key: str | None = None) -> bytes:
    body = json.dumps({"query": text, "params": list(params)}).encode()
    extra = f"Idempotency-Key: {key}\r\n".encode() if key else b""
    return (b"POST /query HTTP/1.1\r\nHost: t\r\nFenec-Wait: %d\r\nContent-Length: %d\r\n%s\r\n%s"
            % (wait, len(body), extra, body))


def read_answer(s: socket.socket) -> bytes:
    """One answer off `s`: up to the end of its body (or as much as came before the server closed)."""
    return read_from(s, complete)


class HeldWorker:
    """A worker whose claim is held, on its own connection; the answer is read in a thread."""

    def __init__(self, server: Server, payload: bytes) -> None:
        self.sock = socket.create_connection(server.addr, timeout=40)
        self.sock.sendall(payload)
        self.answer: bytes | None = None
        self.at = 0.0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            self.answer = read_answer(self.sock)
        except OSError:
            self.answer = b""
        self.at = time.time()

    def result(self, timeout: float = 60) -> Any:
        self.thread.join(timeout)
        assert self.answer, "no answer"
        return status_of(self.answer), body_of(self.answer)

    def close(self) -> None:
        # shutdown first: a close alone leaves the reader thread's recv holding the socket open
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def test_the_woken_worker_is_answered_before_the_put_that_woke_it(server: Server, jobs: Any) -> None:
    c, name = jobs
    worker = socket.create_connection(server.addr, timeout=40)
    worker.sendall(request(claim_text(name), "w1"))
    wait_held(c, 1)
    body = json.dumps({"query": f"put {name} {{payload: 1, run_at: now(), attempts: 0}}"}).encode()
    with socket.create_connection(server.addr, timeout=40) as producer:
        producer.sendall(b"POST /query HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert status_of(read_answer(producer)) == 200
        # written before the put's answer, so already in the worker's socket when the producer has its own
        worker.setblocking(False)
        first = worker.recv(65536)
        worker.settimeout(40)
    answer = first if complete(first) else first + read_from(worker, lambda more: complete(first + more))
    assert status_of(answer) == 200 and [r["owner"] for r in body_of(answer)] == ["w1"]
    worker.close()


def test_woken_by_a_put(server: Server, jobs: Any) -> None:
    c, name = jobs
    w = HeldWorker(server, request(claim_text(name), "w1"))
    wait_held(c, 1)
    t0 = time.time()
    q(c, f"put {name} {{payload: 1, run_at: now(), attempts: 0}}")
    status, rows = w.result()
    assert status == 200 and [r["owner"] for r in rows] == ["w1"]
    assert w.at - t0 < 5  # by the put, long before its 10 s deadline


def test_woken_by_a_delayed_jobs_time_never_before(server: Server, jobs: Any) -> None:
    c, name = jobs
    due = int(time.time() * 1000) + 600
    q(c, f"put {name} {{payload: 1, run_at: $1, attempts: 0}}", due)
    w = HeldWorker(server, request(claim_text(name), "w1"))
    status, rows = w.result()
    assert status == 200 and len(rows) == 1
    assert w.at * 1000 >= due
    assert w.at * 1000 - due < 5000  # woken at its time, long before its 10 s deadline


def test_woken_by_a_lapsed_lease(server: Server, jobs: Any) -> None:
    c, name = jobs
    q(c, f"put {name} {{payload: 1, run_at: now(), attempts: 0}}")
    first = q(c, claim_text(name, lease_ms=400), "dead-worker").json()
    assert len(first) == 1
    lapse = time.time() + 0.4
    w = HeldWorker(server, request(claim_text(name), "w2"))
    status, rows = w.result()
    assert status == 200 and rows[0]["id"] == first[0]["id"] and rows[0]["attempts"] == 2
    assert w.at >= lapse - 0.01


def test_fifo_across_waiting_workers_and_hand_off(server: Server, jobs: Any) -> None:
    c, name = jobs
    workers = []
    for i in range(4):
        workers.append(HeldWorker(server, request(claim_text(name), f"w{i}")))
        wait_held(c, i + 1)
    # a burst of three jobs: the oldest job to the longest-waiting worker, in arrival order
    q(c, f"put {name} [{{payload: 1, run_at: now() - 3, attempts: 0}}, {{payload: 2, run_at: now() - 2, "
         f"attempts: 0}}, {{payload: 3, run_at: now() - 1, attempts: 0}}]")
    got = [w.result() for w in workers[:3]]
    assert [(s, r[0]["owner"], r[0]["payload"]) for s, r in got] == [(200, "w0", 1), (200, "w1", 2), (200, "w2", 3)]
    assert workers[3].answer is None
    q(c, f"put {name} {{payload: 4, run_at: now(), attempts: 0}}")
    assert workers[3].result()[1][0]["payload"] == 4


def test_disconnected_waiter_is_skipped(server: Server, jobs: Any) -> None:
    c, name = jobs
    gone = HeldWorker(server, request(claim_text(name), "gone"))
    wait_held(c, 1)
    stays = HeldWorker(server, request(claim_text(name), "stays"))
    wait_held(c, 2)
    gone.close()
    time.sleep(0.1)
    q(c, f"put {name} {{payload: 1, run_at: now(), attempts: 0}}")
    assert stays.result()[1][0]["owner"] == "stays"
    assert q(c, f"get {name} where owner = 'gone'").json() == []


def test_deadline_answers_what_the_claim_answers_empty(server: Server, jobs: Any) -> None:
    c, name = jobs
    t0 = time.monotonic()
    r = c.post("/query", json={"query": claim_text(name), "params": ["w"]}, headers={"Fenec-Wait": "300"})
    assert (r.status_code, r.json()) == (200, [])
    assert 0.29 <= time.monotonic() - t0 < 10  # at its end (a missed end would hold on)
    r = c.post("/query", json={"query": claim_text(name).replace(" returning *", " require 1"), "params": ["w"]},
               headers={"Fenec-Wait": "200"})
    assert r.status_code == 412 and "requires 1" in r.json()["error"]
    r = c.post("/query", json={"query": f"set {name} {{owner: 'w'}} where run_at <= now() limit 1"},
               headers={"Fenec-Wait": "100"})
    assert r.json() == {"affected": 0}
    # a held /batch beside a read answers its last batch answer
    r = c.post("/batch", content=nd({"query": claim_text(name), "params": ["w"]}, {"query": f"get {name} count"}),
               headers={"Fenec-Wait": "100"})
    assert r.json() == {"ok": 2, "results": [{"rows": []}, {"rows": [{"count": 0}]}]}


def test_what_cannot_be_held(server: Server, jobs: Any) -> None:
    c, name = jobs
    r = c.post("/query", json={"query": f"put {name} {{payload: 1}}"}, headers={"Fenec-Wait": "1000"})
    assert r.status_code == 400 and "writes otherwise" in r.json()["error"]
    r = c.post("/query", json={"query": f"set {name} {{owner: 'x'}} where run_at = now()"},
               headers={"Fenec-Wait": "1000"})
    assert r.status_code == 400 and "time only" in r.json()["error"]
    t0 = time.monotonic()
    r = c.post("/query", json={"query": f"get {name}"}, headers={"Fenec-Wait": "30000"})
    assert (r.status_code, r.json()) == (200, []) and time.monotonic() - t0 < 10  # at once, not held 30 s
    for bad in ("soon", "-1", "1.5"):
        r = c.post("/query", json={"query": f"get {name}"}, headers={"Fenec-Wait": bad})
        assert (r.status_code, r.json()) == (400, {"error": "Fenec-Wait is milliseconds"})


def test_held_claim_keeps_its_key_only_once_it_took(server: Server, jobs: Any) -> None:
    c, name = jobs
    body = json.dumps({"query": claim_text(name), "params": ["w1"]}).encode()  # the bytes request() sends
    r = c.post("/query", content=body, headers={"Fenec-Wait": "100", "Idempotency-Key": f"h-{name}"})
    assert r.json() == []
    w = HeldWorker(server, request(claim_text(name), "w1", key=f"h-{name}"))
    wait_held(c, 1)
    q(c, f"put {name} {{payload: 1, run_at: now(), attempts: 0}}")
    status, rows = w.result()
    assert status == 200 and len(rows) == 1
    again = c.post("/query", content=body, headers={"Idempotency-Key": f"h-{name}"})
    assert again.headers.get("idempotent-replayed") == "true" and again.json() == rows


def test_eight_workers_2000_jobs_each_acked_once(server: Server, jobs: Any) -> None:
    c, name = jobs
    for start in range(0, 2000, 500):
        items = ", ".join(f"{{payload: {i}, run_at: now(), attempts: 0}}" for i in range(start, start + 500))
        assert q(c, f"put {name} [{items}]").json() == {"affected": 500}
    claim = claim_text(name, limit=10)
    ack = ACK.replace("jobs", name)

    def worker(k: int) -> list[int]:
        taken: list[int] = []
        with httpx.Client(base_url=server.url, timeout=30) as w:
            while True:
                rows = w.post("/query", json={"query": claim, "params": [f"w{k}"]},
                              headers={"Fenec-Wait": "150"}).json()
                if not rows:
                    return taken
                r = w.post("/batch", content=nd(*({"query": ack, "params": [row["id"], f"w{k}"]} for row in rows)))
                assert r.status_code == 200, r.text
                assert r.json()["ok"] == len(rows)
                taken.extend(row["payload"] for row in rows)

    with ThreadPoolExecutor(8) as pool:
        per_worker = list(pool.map(worker, range(8)))
    everything = [p for got in per_worker for p in got]
    assert len(everything) == len(set(everything)) == 2000
    assert sorted(everything) == list(range(2000))
    assert q(c, f"get {name} count").json() == [{"count": 0}]


def test_sigterm_answers_50_held_claims_at_once() -> None:
    s = Server()
    try:
        with s.client() as c:
            q(c, JOBS)
            workers = [HeldWorker(s, request(claim_text("jobs"), f"w{i}", wait=30000)) for i in range(50)]
            wait_held(c, 50)
        t0 = time.monotonic()
        assert s.stop(signal.SIGTERM) == 0
        answers = [w.result(30) for w in workers]
        assert all(a == (200, []) for a in answers)
        assert time.monotonic() - t0 < 15  # at once, not at their 30 s deadline
    finally:
        if s.proc.poll() is None:
            s.stop(signal.SIGKILL)


def test_1000_idle_held_claims_cost_next_to_no_cpu() -> None:
    s = Server("--max-connections", "0")
    socks = []
    try:
        with s.client() as c:
            q(c, JOBS)
            q(c, "put jobs {payload: 0, run_at: now() + 3600000, attempts: 0}")  # due in an hour: no wake
            payloads = [request(claim_text("jobs"), f"w{i}", wait=30000) for i in range(1000)]
            for p in payloads:
                sk = socket.create_connection(s.addr, timeout=40)
                sk.sendall(p)
                socks.append(sk)
            wait_held(c, 1000, timeout=30)
        cpu0 = s.cpu_seconds()
        time.sleep(5)
        idle = s.cpu_seconds() - cpu0
        print(f"1000 held claims, 5 s idle: server CPU {idle * 1000:.0f} ms")
        assert idle < 0.25
        with s.client() as c:
            q(c, "put jobs {payload: 1, run_at: now(), attempts: 0}")
            # the put is answered before a line runs its claim: stopping at once could answer
            # every claim [] (the job stays ready, nothing lost), so wait until one took it
            deadline = time.monotonic() + 10
            while q(c, "get jobs select owner where payload = 1").json() == [{"owner": None}]:
                assert time.monotonic() < deadline, "no held claim took the job"
                time.sleep(0.01)
        # exactly one of them took the job; the rest are answered [] at shutdown
        assert s.stop() == 0
        answers = []
        for sk in socks:
            sk.settimeout(5)
            answers.append(body_of(read_answer(sk)))
        assert [a[0]["payload"] for a in answers if a] == [1]
    finally:
        for sk in socks:
            sk.close()
        if s.proc.poll() is None:
            s.stop(signal.SIGKILL)
