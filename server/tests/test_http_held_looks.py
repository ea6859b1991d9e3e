"""Held claims that match nothing do not freeze writes (held/lines.py rule 2b), against a real
`fenec-server`: with many claims held over many ready jobs none of them wants, a producer's puts
and `/_health` are answered and cost the held lines no look. Counted, not timed: the deadlines
are generous, and the assertion is on the server's own counters."""

from __future__ import annotations

import re
import socket
import time

import httpx
from test_http_e2e import Server, q
from test_http_held import request, wait_held

JOBS = "create collection jobs (queue text, run_at timestamp @sorted, owner text, attempts int)"
# the worker policy's claim with its attempts bound: every ready job of queue `a` read to find
# that none has these attempts
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where queue = 'a' and attempts = $2 and run_at <= now() order run_at limit 10 returning id, owner")
HELD = 60  # inside the default 100 connections, with room for the producer and /_health
READY = 3000


def counter(c: httpx.Client, name: str) -> int:
    m = re.search(rf"^{name} (\d+)$", c.get("/_metrics").text, re.M)
    assert m, name
    return int(m.group(1))


def test_puts_and_health_answer_beside_many_held_claims_that_match_nothing() -> None:
    s = Server()
    socks: list[socket.socket] = []
    try:
        with s.client() as c:
            q(c, JOBS)
            for _ in range(READY // 1000):
                q(c, "put jobs [" + ", ".join(["{queue: 'a', run_at: now(), attempts: 0}"] * 1000) + "]")
            for i in range(HELD):
                sk = socket.create_connection(s.addr, timeout=60)
                sk.sendall(request(CLAIM, f"w{i}", 1000 + i, wait=30000))
                socks.append(sk)
            wait_held(c, HELD, timeout=60)
            looks, checks = counter(c, "fenec_held_looks_total"), counter(c, "fenec_held_checks_total")
            for _ in range(5):
                assert q(c, "put jobs {queue: 'b', run_at: now(), attempts: 0}").status_code == 200
                assert c.get("/_health").status_code == 200
            # a row of queue `b` concerns none of the lines: no look read the ready jobs again,
            # no line checked the row (on the code before, each put cost every line one look)
            assert counter(c, "fenec_held_looks_total") == looks
            assert counter(c, "fenec_held_checks_total") == checks
            assert counter(c, "fenec_held_claims") == HELD
            # the job one claim wants wakes that claim alone: one check, one look, its run
            runs = counter(c, "fenec_held_runs_total")
            q(c, "put jobs {queue: 'a', run_at: now(), attempts: 1017}")
            deadline = time.monotonic() + 30
            while counter(c, "fenec_held_claims") != HELD - 1:
                assert time.monotonic() < deadline, "the claim the job carries the value of was not woken"
                time.sleep(0.01)
            assert q(c, "get jobs select owner where attempts = 1018").json() == [{"owner": "w17"}]
            assert counter(c, "fenec_held_runs_total") == runs + 1
            assert counter(c, "fenec_held_looks_total") == looks + 1
    finally:
        for sk in socks:
            sk.close()
        s.stop()
