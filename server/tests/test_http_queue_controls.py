"""Pausing a queue and capping it, over HTTP against a real `fenec-server`: sixteen workers, each on
its own connection, never hold more jobs than the cap (read from the server's rows after every
step); a paused queue answers claims nothing, held ones included, until a resume wakes them in the
order they came; `/_metrics` shows the pause. Conditions are waited for under generous deadlines."""

from __future__ import annotations

import re
import threading
from typing import Any

import httpx
import pytest
from test_http_e2e import CLAIM, JOBS, Server, fresh_collection, q, served
from test_http_held import HeldWorker, request, wait_held

WORKERS = 16


@pytest.fixture(scope="module")
def server() -> Any:
    with served("--max-connections", "0") as s:
        yield s


@pytest.fixture
def jobs(server: Server) -> Any:
    yield from fresh_collection(server, JOBS, "qc")


def claim_text(name: str, limit: int) -> str:
    return CLAIM.replace("jobs", name).replace("$2", str(limit))


def put(c: httpx.Client, name: str, n: int) -> None:
    r = q(c, f"put {name} $1", [{"payload": i, "run_at": "2000-01-01T00:00:00Z", "attempts": 0} for i in range(n)])
    assert r.status_code == 200, r.text


def test_sixteen_workers_over_http_never_hold_more_than_the_cap(server: Server, jobs: Any) -> None:
    c, name = jobs
    put(c, name, 240)
    assert q(c, f"limit queue {name} to 4 leased").status_code == 200
    leased: list[int] = []
    done: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        n = 0
        with server.client() as wc:
            while True:
                n += 1
                owner = f"w{i}:{n}"
                r = q(wc, claim_text(name, 2), owner)
                count = q(wc, f"get {name} where run_at > now() and owner != null count").json()[0]["count"]
                with lock:
                    leased.append(count)
                if r.status_code != 200:
                    errors.append(r.text)
                    return
                for job in r.json():
                    a = q(wc, f"del {name} where id = $1 and owner = $2 require 1", job["id"], owner)
                    if a.status_code != 200:
                        errors.append(a.text)
                with lock:
                    done.extend(job["id"] for job in r.json())
                    if len(done) >= 240:
                        return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive()
    assert errors == []
    assert sorted(done) == list(range(1, 241))
    assert max(leased) <= 4


def paused_gauge(c: httpx.Client, name: str) -> int:
    m = re.search(rf'^fenec_queue_paused{{collection="{name}"}} (\d)$', c.get("/_metrics").text, re.M)
    assert m
    return int(m.group(1))


def test_a_paused_queue_over_http_holds_its_claims_and_resume_wakes_them_in_order(server: Server,
                                                                                  jobs: Any) -> None:
    c, name = jobs
    assert q(c, f"pause queue {name}").json() == {"message": f"queue {name} paused"}
    assert paused_gauge(c, name) == 1
    put(c, name, 3)  # puts land
    assert q(c, claim_text(name, 5), "now").json() == []  # and no claim takes them
    workers = []
    for i in range(3):
        workers.append(HeldWorker(server, request(claim_text(name, 1), f"w{i}")))
        wait_held(c, i + 1)
    put(c, name, 1)  # a write wakes them: still paused, still held
    assert q(c, f"get {name} where owner != null count").json() == [{"count": 0}]
    assert all(w.answer is None for w in workers)
    assert q(c, "show queues").json()[-1] == {"collection": name, "queue": None, "paused": True, "limits": []}
    assert q(c, f"resume queue {name}").status_code == 200
    got = [w.result() for w in workers]
    assert [(s, r[0]["owner"], r[0]["id"]) for s, r in got] == [(200, "w0", 1), (200, "w1", 2), (200, "w2", 3)]
    assert paused_gauge(c, name) == 0
    for w in workers:
        w.close()


def test_queue_statements_over_http_answer_their_statuses(server: Server, jobs: Any) -> None:
    c, name = jobs
    assert q(c, "pause queue nowhere").status_code == 404
    assert q(c, f"limit queue {name} to 0 leased").status_code == 400
    assert q(c, f'pause queue {name} "mail"').status_code == 400  # no `queue` field
    r = q(c, f"limit queue {name} to 5 claimed per 1m")
    assert r.json() == {"message": f"queue {name} limited to 5 claimed per 1m"}
