"""Schedules and unique jobs against a real `fenec-server` process (issue 45).

* A schedule fires once per due time across SIGKILLs: a 1 s schedule whose put writes its due time,
  the server killed with SIGKILL at random moments (so in the middle of some due time: its fire
  and its record written, or neither) and restarted over the same file; at the end every due time
  from the first to the last is there exactly once: none twice, none missing (each restart comes
  within the minute's grace, so what fell due while it was down is made up one by one).
* Unique jobs over HTTP: 16 clients put the same keys at once, in each mode, and leave exactly one
  pending job a key.

Counted, never timed: every wait is for a condition, with a generous deadline.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

SERVER = Path(sys.executable).parent / "fenec-server"
DEADLINE_S = 60.0


class Server:
    """A child `fenec-server` over `path`, on a free loopback port."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [str(SERVER), "--file", str(path), "--sync", "always", "--http", "127.0.0.1:0", "--auto-compact", "off"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.address: tuple[str, int] | None = None
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                if "listening on: http://" in line and self.address is None:
                    host, port = line.split("listening on: http://", 1)[1].split()[0].rsplit(":", 1)
                    self.address = (host.strip("[]"), int(port))
                    ready.set()
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(DEADLINE_S):
            self.proc.kill()
            raise AssertionError("fenec-server did not start")

    def query(self, text: str, params: list | None = None) -> object:
        assert self.address is not None
        conn = http.client.HTTPConnection(*self.address, timeout=DEADLINE_S)
        try:
            conn.request("POST", "/query", json.dumps({"query": text, "params": params or []}),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            assert resp.status == 200, (resp.status, body)
            return body
        finally:
            conn.close()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE_S)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def rows(answer: object) -> list[dict]:
    assert isinstance(answer, list), answer  # /query answers a read's rows as a list
    return answer


def wait_for_count(server: Server, at_least: int) -> int:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        n = rows(server.query("get ticks count"))[0]["count"]
        if n >= at_least or time.monotonic() > deadline:
            assert n >= at_least, f"only {n} fires, waiting for {at_least}"
            return n
        time.sleep(0.05)


@pytest.mark.skipif(not SERVER.exists(), reason="no fenec-server beside this python")
def test_a_schedule_fires_once_per_due_time_across_sigkills(tmp_path):
    path = tmp_path / "sched.fenec"
    rnd = random.Random(os.getpid())
    server = Server(path)
    try:
        server.query("create collection ticks (due timestamp, run_at timestamp @sorted, owner text, attempts int)")
        server.query("create schedule tick every 1s put ticks {due: $1, run_at: now(), attempts: 0}")
        n = wait_for_count(server, 2)
        for _ in range(3):
            n = wait_for_count(server, n + 1)
            time.sleep(rnd.random())  # somewhere inside a period: the next fire may be under way
            server.kill()
            server = Server(path)
            n = wait_for_count(server, n + 2)
        dues = sorted(r["due"] for r in rows(server.query("get ticks select due")))
        shown = rows(server.query("show schedules"))[0]
    finally:
        server.stop()
    from fenecdb_server.values import parse_time

    ms = [parse_time(d) for d in dues]
    assert len(ms) == len(set(ms)), "a due time fired twice"
    assert [b - a for a, b in zip(ms, ms[1:], strict=False)] == [1000] * (len(ms) - 1), "a due time missing"
    assert shown["fires"] >= len(ms) and shown["name"] == "tick"


@pytest.mark.skipif(not SERVER.exists(), reason="no fenec-server beside this python")
def test_16_producers_over_http_leave_one_pending_job_a_key(tmp_path):
    modes = {
        "skip": "if absent",
        "replace": "if absent else set {payload: new.payload}",
        "debounce": "if absent else set {run_at: new.run_at}",
    }
    keys = [f"k{i}" for i in range(10)]
    server = Server(tmp_path / "unique.fenec")
    try:
        for mode in modes:
            server.query(f"create collection {mode} (key text @unique(pending), payload int, run_at timestamp @sorted, "
                         "owner text, attempts int)")
        errors: list[BaseException] = []
        start = threading.Barrier(16)

        def producer(n: int) -> None:
            rnd = random.Random(n)
            try:
                start.wait(DEADLINE_S)
                for mode, tail in modes.items():
                    order = keys * 2
                    rnd.shuffle(order)
                    for k in order:
                        server.query(f"put {mode} {{key: $1, payload: $2, run_at: now() + $3, attempts: 0}} {tail}",
                                     [k, n, rnd.choice([0, 5000])])
            except BaseException as e:  # noqa: BLE001 - handed to the test
                errors.append(e)

        threads = [threading.Thread(target=producer, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:1]
        for mode in modes:
            pending = sorted(r["key"] for r in rows(server.query(f"get {mode} select key where run_at is not null")))
            assert pending == keys, mode
    finally:
        server.stop()
