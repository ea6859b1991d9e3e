"""`Worker.run(handler)` against a live server: the heartbeat, a lost lease, a server restart, stop
from another thread while a claim is held, unstarted jobs given back, failures, dead letters and the
concurrency bound. Every wait is for a condition, with a generous deadline."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fenecdb
import pytest
from capture_transport import Capture, Sent, answer
from fenecdb import Client, Job, Worker
from fenecdb._http11 import Answer
from file_server import FileServer

SCHEMA = "create collection {} (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"


def until(condition: Callable[[], object], seconds: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


def enqueue(db: Client, queue: str, *payloads: dict[str, Any], attempts: int = 0) -> list[int]:
    """Put the jobs, ready now; their ids in order (the newest ids of the queue)."""
    q = db.collection(queue)
    q.insert([{"payload": p, "run_at": fenecdb.expr("now()"), "attempts": attempts} for p in payloads])
    rows = q.select("id").order("id", "desc").limit(len(payloads)).rows()
    return sorted(r["id"] for r in rows)


class Recorder:
    """The `on_event` hook of a test: every event, in order, from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.events.append(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["type"] == kind]

    def count(self, kind: str) -> int:
        return len(self.of(kind))


class Running:
    """`worker.run(handler)` on a thread of its own; `join()` says whether it returned."""

    def __init__(self, worker: Worker, handler: Callable[[Job], object]) -> None:
        self.worker = worker
        self.error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(handler,), daemon=True)
        self.thread.start()

    def _run(self, handler: Callable[[Job], object]) -> None:
        try:
            self.worker.run(handler)
        except BaseException as exc:
            self.error.append(exc)

    def join(self, seconds: float = 60) -> None:
        self.thread.join(seconds)
        assert not self.thread.is_alive(), f"run() did not return within {seconds} s"
        assert not self.error, self.error


@pytest.fixture
def db(server_url: str) -> Iterator[Client]:
    with Client(server_url) as client:
        yield client


def test_the_heartbeat_keeps_a_slow_job(db: Client, queue: str) -> None:
    (job_id,) = enqueue(db, queue, {"n": "slow"})
    events = Recorder()
    worker = Worker(db, queue, batch=1, lease=2, wait=1, on_event=events)
    other = Worker(db, queue, name="other", batch=1, lease=30)
    stolen: list[Job] = []

    def slow(job: Job) -> None:
        started = time.monotonic()
        while time.monotonic() - started < 5:  # two and a half leases
            stolen.extend(other.claim(wait=0))
            time.sleep(0.1)
        assert not job.lost and not job.cancelled.is_set()

    running = Running(worker, slow)
    until(lambda: events.count("done") == 1)
    worker.stop()
    running.join()
    assert stolen == []
    assert [e["id"] for e in events.of("start")] == [job_id]
    assert db.collection(queue).count() == 0


def test_a_lost_lease_is_told_to_the_handler(db: Client, queue: str) -> None:
    (job_id,) = enqueue(db, queue, {"n": "taken"})
    events = Recorder()
    worker = Worker(db, queue, batch=1, lease=3, heartbeat=0.2, wait=1, on_event=events)
    told: list[bool] = []

    def handler(job: Job) -> None:
        db.collection(queue).where("id", job.id).update({"owner": "thief"})  # another claim has it now
        told.append(job.cancelled.wait(60))
        told.append(job.lost)

    running = Running(worker, handler)
    until(lambda: len(told) == 2)
    worker.stop()
    running.join()
    assert told == [True, True]
    assert [e["id"] for e in events.of("lost")] == [job_id]
    assert events.count("done") == events.count("failed") == 0  # not settled after the loss
    row = db.collection(queue).where("id", job_id).first()
    assert row is not None and row["owner"] == "thief"


def test_run_goes_on_through_a_server_restart(tmp_path: Path) -> None:
    server = FileServer(tmp_path / "jobs.fenec")
    try:
        with Client(server.url, timeout=5) as db:
            db.query(SCHEMA.format("jobs"))
            db.collection("jobs").insert([{"payload": {"n": n}, "run_at": fenecdb.expr("now()"), "attempts": 0}
                                          for n in range(60)])
            events = Recorder()
            worker = Worker(db, "jobs", batch=4, concurrency=2, lease=10, wait=2, timeout=5, on_event=events)
            running = Running(worker, lambda job: time.sleep(0.01))
            until(lambda: events.count("done") >= 20)
            server.stop()
            until(lambda: events.count("retry") >= 1, what="a retry while the server is down")
            server.start()
            until(lambda: events.count("done") >= 40)
            server.stop()
            server.start()
            until(lambda: db.collection("jobs").count() == 0, what="every job acked")
            worker.stop()
            running.join()
        done = collections.Counter(e["id"] for e in events.of("done"))
        assert len(done) == 60 and set(done.values()) == {1}
        assert events.of("stopped")
    finally:
        server.stop()


def test_stop_from_another_thread_gives_up_a_held_claim_at_once(db: Client, queue: str) -> None:
    events = Recorder()
    worker = Worker(db, queue, batch=1, lease=5, wait=30, on_event=events)
    running = Running(worker, lambda job: None)
    until(lambda: worker._sender is not None)
    time.sleep(0.3)  # the claim is held at the server by now (and were it not yet, stop must still be quick)
    asked = time.monotonic()
    threading.Thread(target=worker.stop).start()
    running.join(10)
    assert time.monotonic() - asked < 10  # a cancel, not the end of the 30 s hold
    assert events.of("stopped") and events.count("claimed") == 0
    enqueue(db, queue, {"n": "after"})  # the abandoned claim took nothing: the next one gets the job
    (job,) = Worker(db, queue, batch=1, lease=5).claim(wait=5)
    assert job.payload == {"n": "after"} and job.attempts == 1


def test_stop_gives_the_unstarted_jobs_back_at_once(db: Client, queue: str) -> None:
    ids = enqueue(db, queue, *({"n": n} for n in range(5)))
    events = Recorder()
    worker = Worker(db, queue, batch=5, lease=30, wait=1, on_event=events)
    go_on = threading.Event()
    running = Running(worker, lambda job: go_on.wait(60))
    until(lambda: events.count("start") == 1)
    worker.stop()
    until(lambda: events.count("released") == 4, what="the four unstarted jobs given back")
    assert events.count("done") == 0  # given back while the first still runs
    rows = db.collection(queue).where("id", "in", ids[1:]).rows()
    assert [(r["owner"], r["attempts"]) for r in rows] == [(None, 0)] * 4  # ready again, the claim undone
    assert db.collection(queue).where(fenecdb.raw("run_at <= now()")).count() == 4
    go_on.set()
    running.join()
    assert [e["id"] for e in events.of("done")] == [ids[0]]


def test_the_drain_ends_in_a_hard_stop_that_gives_the_job_back(db: Client, queue: str) -> None:
    (job_id,) = enqueue(db, queue, {"n": "stuck"})
    events = Recorder()
    worker = Worker(db, queue, batch=1, lease=30, wait=1, drain_timeout=0.5, on_event=events)
    seen: list[bool] = []
    running = Running(worker, lambda job: seen.append(job.cancelled.wait(60)))
    until(lambda: events.count("start") == 1)
    worker.stop()
    running.join()
    until(lambda: seen == [True], what="the handler told to stop")
    assert [e["id"] for e in events.of("released")] == [job_id] and events.count("done") == 0
    row = db.collection(queue).where("id", job_id).first()
    assert row is not None and row["owner"] is None and row["attempts"] == 0


def test_a_hard_stop_cancels_at_once(db: Client, queue: str) -> None:
    (job_id,) = enqueue(db, queue, {"n": "long"})
    events = Recorder()
    worker = Worker(db, queue, batch=1, lease=30, wait=1, drain_timeout=60, on_event=events)
    running = Running(worker, lambda job: job.cancelled.wait(60))
    until(lambda: events.count("start") == 1)
    worker.stop(hard=True)
    running.join(10)
    assert [e["id"] for e in events.of("released")] == [job_id]


def test_a_handler_exception_fails_the_job_with_backoff_and_the_worker_goes_on(db: Client, queue: str) -> None:
    bad, exits, good = enqueue(db, queue, {"n": "bad"}, {"n": "exit"}, {"n": "good"})
    events = Recorder()
    worker = Worker(db, queue, batch=1, lease=30, wait=1, backoff=lambda attempts: 100.0 * attempts,
                    on_event=events)

    def handler(job: Job) -> None:
        if job.payload["n"] == "bad":
            raise ValueError("smtp timeout")
        if job.payload["n"] == "exit":
            raise SystemExit(3)

    running = Running(worker, handler)
    until(lambda: events.count("done") == 1)
    worker.stop()
    running.join()
    assert [(e["id"], e["error"], e["delay_ms"]) for e in events.of("failed")] == [
        (bad, "smtp timeout", 100000), (exits, "3", 100000)]
    q = db.collection(queue)
    row = q.where("id", bad).first()
    assert row is not None and row["owner"] is None and row["error"] == "smtp timeout"
    assert q.where("id", bad).where(fenecdb.raw("run_at > now() + 90000")).count() == 1  # backed off ~100 s
    assert q.where("id", good).count() == 0


def test_dead_letters_past_the_limit(db: Client, queue: str) -> None:
    worn, last = enqueue(db, queue, {"n": "worn"}, {"n": "last"}, attempts=5)
    db.collection(queue).where("id", last).update({"attempts": 4})
    events = Recorder()
    worker = Worker(db, queue, batch=5, lease=30, wait=1, max_attempts=5, on_event=events)
    ran: list[Any] = []

    def handler(job: Job) -> None:
        ran.append(job.id)
        raise RuntimeError("still broken")

    running = Running(worker, handler)
    until(lambda: events.count("dead") == 2)
    worker.stop()
    running.join()
    assert ran == [last]  # the one claimed past the limit never ran
    dead = {e["id"]: e["error"] for e in events.of("dead")}
    assert dead == {worn: "attempts exhausted", last: "still broken"}
    rows = db.collection(queue).where("run_at", None).order("id").rows()
    assert [(r["id"], r["error"], r["owner"]) for r in rows] == [
        (worn, "attempts exhausted", None), (last, "still broken", None)]


def test_concurrency_bounds_the_jobs_run_at_once(db: Client, queue: str) -> None:
    enqueue(db, queue, *({"n": n} for n in range(10)))
    events = Recorder()
    worker = Worker(db, queue, batch=10, concurrency=3, lease=30, wait=1, on_event=events)
    lock = threading.Lock()
    now = [0, 0]  # running, most at once
    gate = threading.Event()

    def handler(job: Job) -> None:
        with lock:
            now[0] += 1
            now[1] = max(now[1], now[0])
        gate.wait(60)
        with lock:
            now[0] -= 1

    running = Running(worker, handler)
    until(lambda: events.count("start") == 3)
    assert events.count("start") == 3  # the fourth waits for a free runner
    gate.set()
    until(lambda: events.count("done") == 10)
    worker.stop()
    running.join()
    assert now[1] == 3


def test_a_claim_is_retried_under_the_same_key() -> None:
    answers: collections.deque[Any] = collections.deque([
        ConnectionError("refused"),
        answer(503, json={"error": "starting"}),
        answer(200, json=[{"id": 1, "payload": {}, "attempts": 1}]),
    ])

    def reply(request: Sent) -> Answer:
        if b'"set jobs {owner' in request.content and answers:
            given = answers.popleft()
            if isinstance(given, Exception):
                raise given
            return given  # type: ignore[no-any-return]
        return answer(200, json={"affected": 1})

    capture = Capture(reply)
    events = Recorder()
    worker = Worker(capture.client(), "jobs", name="w7", batch=1, wait=1, retry_min=0.001, retry_max=0.01, on_event=events)
    worker.run(lambda job: worker.stop())
    claims = [r for r in capture.requests if b'"set jobs {owner' in r.content]
    assert len(claims) == 3 and {r.content for r in claims} == {claims[0].content}
    owner = claims[0].headers["Idempotency-Key"].removeprefix("claim:")
    assert owner.startswith("w7:") and {r.headers["Idempotency-Key"] for r in claims} == {f"claim:{owner}"}
    assert [e["call"] for e in events.of("retry")] == ["claim", "claim"]
    acks = [r for r in capture.requests if r.content.startswith(b'{"query":"del jobs')]
    assert [r.headers["Idempotency-Key"] for r in acks] == [f"ack:{owner}:1"]


def test_an_extend_that_crosses_its_jobs_ack_is_no_lost_lease() -> None:
    """The heartbeat sends job 1's extend while its handler runs; the handler returns and the ack
    reaches the server first, so the extend finds the row gone (412). The ack is answered after the
    worker has read that 412 (job 2's extend, the heartbeat's next call, shows it): the job was
    acked, never lost. Each step waits on the one before, never on a sleep."""
    extend_sent, ack_sent, next_extend_sent = threading.Event(), threading.Event(), threading.Event()

    def reply(request: Sent) -> Answer:
        text = json.loads(request.content)
        query, params = text["query"], text.get("params", [])
        if query.startswith("set jobs {owner"):  # the claim: two jobs; none after
            rows = [{"id": 1, "payload": {}, "attempts": 1}, {"id": 2, "payload": {}, "attempts": 1}]
            return answer(200, json=rows if not extend_sent.is_set() else [])
        if query.startswith("set jobs {run_at") and params[1] == 1 and not extend_sent.is_set():
            extend_sent.set()
            assert ack_sent.wait(30), "the handler did not return"
            return answer(412, json={"error": "require 1: 0 rows matched"})
        if query.startswith("set jobs {run_at") and params[1] == 2 and ack_sent.is_set():
            next_extend_sent.set()
        if query.startswith("del jobs") and params[0] == 1:
            ack_sent.set()
            assert next_extend_sent.wait(30), "the heartbeat did not go on to job 2"
        return answer(200, json={"affected": 1})

    events = Recorder()
    worker = Worker(Capture(reply).client(), "jobs", batch=2, concurrency=1, lease=30, heartbeat=0.01, wait=1,
                    on_event=events)

    def handle(job: Job) -> None:
        if job.id == 1:
            assert extend_sent.wait(30), "the heartbeat sent no extend"
        else:
            worker.stop()

    running = Running(worker, handle)
    running.join()
    assert [e["id"] for e in events.of("done")] == [1, 2]
    assert events.of("lost") == []


def test_a_worker_restarted_under_its_name_is_not_replayed_its_last_claim(db: Client, queue: str) -> None:
    first, second = enqueue(db, queue, {"n": 1}, {"n": 2})
    (job,) = Worker(db, queue, name="same", batch=1).claim(wait=0)
    assert job.id == first and job.ack()
    time.sleep(0.01)  # a restart: some time passes
    (job,) = Worker(db, queue, name="same", batch=1).claim(wait=0)  # not the replayed answer of the first
    assert job.id == second and job.ack()


def test_an_interrupt_out_of_run_leaves_nothing_leased(db: Client, queue: str) -> None:
    ids = enqueue(db, queue, {"n": 1}, {"n": 2})

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "claimed":
            raise KeyboardInterrupt  # as a Ctrl-C outside handle_signals() would, in run()'s own thread

    worker = Worker(db, queue, batch=2, lease=30, wait=1, on_event=on_event)
    with pytest.raises(KeyboardInterrupt):
        worker.run(lambda job: None)
    rows = db.collection(queue).order("id").rows()
    assert [(r["id"], r["owner"], r["attempts"]) for r in rows] == [(ids[0], None, 0), (ids[1], None, 0)]


@pytest.mark.parametrize(("timeout", "held", "other"), [(None, 11.0, 10.0), (2.0, 3.0, 2.0)])
def test_each_call_has_a_timeout_and_a_held_claim_its_wait_on_top(timeout: float | None, held: float,
                                                                   other: float) -> None:
    def reply(request: Sent) -> Answer:
        if b'"set jobs {owner' in request.content:
            return answer(200, json=[{"id": 1, "payload": {}, "attempts": 1}])
        return answer(200, json={"affected": 1})

    capture = Capture(reply)
    kwargs = {} if timeout is None else {"timeout": timeout}
    worker = Worker(capture.client(), "jobs", batch=1, wait=1, **kwargs)
    worker.run(lambda job: worker.stop())
    claim, ack = capture.requests
    assert claim.headers["Fenec-Wait"] == "1000" and claim.timeout == held
    assert ack.timeout == other
