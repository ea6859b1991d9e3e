"""The Python SDK's replica cases (replica-scenarios.json; conformance/README.md, "Replicas"): the real
`Client` and `Worker` against the primary at FENEC_PRIMARY_URL and its replica at FENEC_REPLICA_URL,
which `run.py` started. Answers (passed, failed), one line per case; without those variables it plays
nothing and prints nothing."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fenecdb


class Failed(Exception):
    """A case failed: what was expected, and what came."""


class Case:
    def __init__(self, spec: dict[str, Any], data: dict[str, Any], primary: str, replica: str) -> None:
        self.spec = spec
        self.data = data
        self.primary = primary
        self.replica = replica
        self.q = spec["collection"]
        self.deadline_s = data["deadline_ms"] / 1000

    def until(self, what: str, done: Callable[[], bool]) -> None:
        end = time.monotonic() + self.deadline_s
        while not done():
            if time.monotonic() > end:
                raise Failed(f"not within {self.deadline_s:.0f} s: {what}")
            time.sleep(0.05)

    def fresh(self, db: fenecdb.Client) -> None:
        with contextlib.suppress(fenecdb.NotFoundError):  # each SDK's runner starts from a fresh queue
            db.query(f"drop collection {self.q}")
        db.query(self.data["schema"].replace("{q}", self.q))

    def count(self, url: str) -> int:
        """The collection's rows on one server, asked directly."""
        with fenecdb.Client(url) as direct:
            return direct.collection(self.q).count()

    def held_on_replica(self) -> int:
        return self.held(self.replica)

    def held(self, url: str) -> int:
        """A server's held-claim gauge (replica-scenarios.json's `held_gauge`), from its /_metrics."""
        with urllib.request.urlopen(url + "/_metrics", timeout=10) as answer:
            text = answer.read().decode()
        gauge = self.data["held_gauge"]
        for line in text.splitlines():
            if line.startswith(gauge + " "):
                return int(float(line.split()[1]))
        raise Failed(f"{url}/_metrics has no {gauge}")


def read_after(url: str, text: str, after: int) -> list[Any]:
    """`text` on `url` with `Fenec-After: after`, over plain HTTP (what the server answers, not the SDK)."""
    req = urllib.request.Request(url + "/query", data=json.dumps({"query": text, "params": []}).encode(),
                                 method="POST", headers={"Content-Type": "application/json",
                                                         "Fenec-After": str(after)})
    with urllib.request.urlopen(req, timeout=30) as answer:
        return list(json.loads(answer.read()))


def writes_through_a_replica(case: Case) -> str:
    n = case.spec["jobs"]
    with fenecdb.Client([case.replica]) as db:
        case.fresh(db)
        producer = fenecdb.Worker(db, case.q)
        for i in range(n):
            if producer.enqueue({"n": i}) != 1:
                raise Failed(f"enqueue {i}: 1 / something else")
        on_p = case.count(case.primary)
        on_r = len(read_after(case.replica, f"get {case.q}", db.seq))
        if (on_p, on_r) != (n, n):
            raise Failed(f"rows on P and on R (Fenec-After {db.seq}): {n}, {n} / {on_p}, {on_r}")
        if db.url != case.primary:
            raise Failed(f"the client's primary: {case.primary} / {db.url}")
    return f"{n} jobs, on P and on R"


def a_worker_given_a_replica(case: Case) -> str:
    spec = case.spec
    w = spec["worker"]
    events: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_event(event: dict[str, Any]) -> None:
        with lock:
            events.append(event)

    done: list[Any] = []
    with fenecdb.Client([case.replica]) as db, fenecdb.Client(case.primary) as direct:
        worker = fenecdb.Worker(db, case.q, concurrency=w["concurrency"], batch=w["batch"], wait=w["wait_ms"] / 1000,
                                lease=w["lease_ms"] / 1000, on_event=on_event)
        runner = threading.Thread(target=worker.run, args=(lambda job: done.append(job.id),), daemon=True)
        runner.start()
        checks = 0
        try:
            def settled() -> bool:
                nonlocal checks
                if case.held_on_replica() != 0:
                    raise Failed(f"R's {case.data['held_gauge']}: 0 / above 0 (a claim held on the replica)")
                checks += 1
                return len(done) >= spec["jobs"] and direct.collection(case.q).count() == 0

            case.until(f"the worker took the {spec['jobs']} jobs (P holds 0 rows)", settled)
            # held on the empty queue: the worker's claim waits on P (its gauge), none on R
            case.until("the worker's claim held on P", lambda: case.held(case.primary) > 0)
            if case.held_on_replica() != 0:
                raise Failed(f"R's {case.data['held_gauge']} while the worker is held: 0 / above 0")
            for i in range(spec["later"]):
                direct.query(f"put {case.q} {{payload: $1, run_at: now(), attempts: 0}}", [{"later": i}])
            case.until("the job put on P while the worker was held is processed",
                       lambda: settled() and len(done) >= spec["jobs"] + spec["later"])
        finally:
            worker.stop()
            runner.join(30)
        primary = [e.get("url") for e in events if e["type"] == "primary"]
        if case.primary not in primary:
            raise Failed(f"a `primary` event naming {case.primary} / {primary}")
    return f"{len(done)} jobs, R's held gauge 0 at {checks} checks"


def reads_where_told(case: Case) -> str:
    rounds = case.spec["rounds"]
    with fenecdb.Client([case.primary, case.replica], read_from="replica") as db:
        case.fresh(db)
        q = db.collection(case.q)
        for i in range(rounds):
            q.insert({"id": 1, "payload": {"round": i}, "run_at": fenecdb.expr("now()")})
            rows = q.where("id", 1).rows()
            got = [r["payload"] for r in rows]
            if got != [{"round": i}]:
                raise Failed(f"round {i}: the row just written / {got}")
    return f"{rounds} rounds"


CASES: dict[str, Callable[[Case], str]] = {
    "replica: writes given only a replica reach the primary": writes_through_a_replica,
    "replica: a worker given only a replica works the primary": a_worker_given_a_replica,
    "replica: reads where told read their own writes": reads_where_told,
}


def run_file(path: Path | None, only: str | None, out: Callable[[str], None] = print) -> tuple[int, int]:
    primary = (os.environ.get("FENEC_PRIMARY_URL") or "").rstrip("/")
    replica = (os.environ.get("FENEC_REPLICA_URL") or "").rstrip("/")
    if path is None or not primary or not replica:
        return 0, 0
    data = json.loads(path.read_text(encoding="utf-8"))
    passed = failed = 0
    for spec in data["cases"]:
        name = spec["name"]
        if only and only not in name:
            continue
        play = CASES.get(name)
        try:
            if play is None:
                raise Failed(f"a case this runner knows / {name!r}")
            summary = play(Case(spec, data, primary, replica))
        except Failed as exc:
            failed += 1
            out(f"FAIL {name}: {exc}")
        except (fenecdb.FenecError, OSError) as exc:
            failed += 1
            out(f"FAIL {name}: no error / {type(exc).__name__}: {exc}")
        else:
            passed += 1
            out(f"ok {name}: {summary}")
    return passed, failed


def replicas_path() -> Path | None:
    given = os.environ.get("FENEC_REPLICA_SCENARIOS")
    return Path(given).resolve() if given else None
