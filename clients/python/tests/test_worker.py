"""The worker helper: each step one statement of the seed page, and the loop against a live server
(claims, acks, a lapsed lease, the heartbeat, back-off to a dead letter, a clean stop on signal)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import fenecdb
from fenecdb import AsyncClient, AsyncWorker, Client, Job, Worker


def test_each_step_is_one_statement_of_the_page() -> None:
    db = Client("http://fenec.test")
    worker = Worker(db, "jobs", name="w9", batch=10, lease=30, dead_after=5)
    assert worker.to_claim("w9:17") == (
        "set jobs {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} "
        "where run_at <= now() order run_at asc limit 10 returning *", ["w9:17", 30000, 1])
    job = Job({"id": 41, "payload": {"to": "ada@example.com"}, "attempts": 2}, "w9:17", worker)
    assert job.to_ack() == ("del jobs where id = $1 and owner = $2 require 1", [41, "w9:17"])
    assert job.to_extend() == ("set jobs {run_at: now() + $1} where id = $2 and owner = $3 require 1",
                               [30000, 41, "w9:17"])
    assert job.to_fail("smtp timeout") == (  # attempts² seconds by default: 4 s at attempts 2
        "set jobs {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 end} "
        "where id = $5 and owner = $6 require 1", [None, "smtp timeout", 5, 4000, 41, "w9:17"])
    assert (job.id, job.payload, job.attempts) == (41, {"to": "ada@example.com"}, 2)
    assert worker.plan.to_dead(job) == (
        "set jobs {owner: $1, error: $2, run_at: $3} where id = $4 and owner = $5 require 1",
        [None, "attempts exhausted", None, 41, "w9:17"])
    assert worker.plan.to_release(job) == (
        "set jobs {owner: $1, run_at: now(), attempts: coalesce(attempts, 0) + $2} where id = $3 and owner = $4",
        [None, -1, 41, "w9:17"])
    hooked = Worker(db, "jobs", name="w9", max_attempts=3, backoff=lambda attempts: 0.5 * attempts,
                    keep_done=True)
    job = Job({"id": 41, "attempts": 2}, "w9:17", hooked)
    assert hooked.plan.failure(job, "smtp timeout") == ((
        "set jobs {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 end} "
        "where id = $5 and owner = $6 require 1", [None, "smtp timeout", 3, 1000, 41, "w9:17"]), 1.0)
    assert job.to_ack() == ("set jobs {owner: $1, run_at: $2, done_at: now()} where id = $3 and owner = $4 require 1",
                            [None, None, 41, "w9:17"])


def enqueue(db: Client, queue: str, *names: str) -> None:
    db.collection(queue).insert([{"payload": {"n": n}, "run_at": fenecdb.expr("now()"), "attempts": 0}
                                 for n in names])


def test_the_loop_claims_batches_and_acks_every_job(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        enqueue(db, queue, "a", "b", "c")
        worker = Worker(db, queue, batch=2, lease=5, wait=0.3)
        seen = []
        for job in worker:
            seen.append((job.payload["n"], job.attempts, job.owner))
            assert job.ack() is True
            assert job.ack() is False  # settled once
            if len(seen) == 3:
                worker.stop()
        assert [s[:2] for s in seen] == [("a", 1), ("b", 1), ("c", 1)]
        assert seen[0][2] == seen[1][2] != seen[2][2]  # one owner token per claim
        assert db.collection(queue).count() == 0


def test_a_job_whose_lease_lapsed_is_no_longer_ours(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        enqueue(db, queue, "a")
        slow = Worker(db, queue, name="slow", batch=1, lease=0.2, heartbeat=0)
        (job,) = slow.claim(wait=0)
        time.sleep(0.35)
        (again,) = Worker(db, queue, name="fast", batch=1, lease=5).claim(wait=0)
        assert again.id == job.id and again.attempts == 2
        assert job.extend() is False and job.lost
        assert job.ack() is False
        assert again.ack() is True


def test_the_heartbeat_keeps_a_slow_job_ours(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        enqueue(db, queue, "slow")
        worker = Worker(db, queue, batch=1, lease=1.0, wait=0.2)
        other = Worker(db, queue, name="other", batch=1, lease=5)
        for job in worker:
            time.sleep(2.5)  # 2.5 leases
            assert other.claim(wait=0) == []
            assert job.ack() is True
            worker.stop()


def test_a_failure_backs_off_then_dead_letters(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        enqueue(db, queue, "x")
        worker = Worker(db, queue, batch=1, lease=5, dead_after=2, backoff=lambda attempts: 0.1 * attempts * attempts)
        (job,) = worker.claim(wait=0)
        assert job.fail("boom") is True
        row = db.collection(queue).select("owner", "error", "run_at").first()
        assert row is not None and row["owner"] is None and row["error"] == "boom" and row["run_at"] is not None
        assert worker.claim(wait=0) == []
        (job,) = worker.claim(wait=2)
        assert job.attempts == 2
        assert job.fail("boom again") is True
        assert db.collection(queue).where("run_at", None).count() == 1  # a dead letter
        assert worker.claim(wait=0.3) == []


def test_a_signal_stops_a_held_claim_cleanly(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        worker = Worker(db, queue, batch=1, lease=5, wait=20)
        before = signal.getsignal(signal.SIGTERM)
        timer = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGTERM))
        started = time.monotonic()
        with worker.handle_signals():
            timer.start()
            taken = list(worker)
        timer.join()
        assert taken == [] and worker.stopped
        assert time.monotonic() - started < 10  # at the signal, not the 20 s deadline
        assert signal.getsignal(signal.SIGTERM) == before
        enqueue(db, queue, "after")  # the abandoned claim took nothing: the next one gets the job
        (job,) = Worker(db, queue, batch=1, lease=5).claim(wait=2)
        assert job.payload == {"n": "after"} and job.attempts == 1


def test_the_async_worker_stops_a_held_claim_at_once(server_url: str, queue: str) -> None:
    async def main() -> tuple[list[str], float]:
        async with AsyncClient(server_url) as db:
            await db.collection(queue).insert({"payload": {"n": "a"}, "run_at": fenecdb.expr("now()"),
                                               "attempts": 0})
            worker = AsyncWorker(db, queue, batch=5, lease=5, wait=20)
            got: list[str] = []
            started = 0.0
            async for job in worker:
                got.append(job.payload["n"])
                assert await job.ack() is True
                asyncio.get_running_loop().call_later(0.3, worker.stop)
                started = time.monotonic()
            return got, time.monotonic() - started

    got, stopping = asyncio.run(main())
    assert got == ["a"] and stopping < 2


def test_bad_options_are_refused_with_the_option_named() -> None:
    import pytest

    db = Client("http://fenec.test")
    for kwargs, words in [({"batch": 0}, "batch"), ({"concurrency": 1.5}, "concurrency"), ({"lease": 0}, "lease"),
                          ({"heartbeat": 30}, "heartbeat"), ({"wait": -1}, "wait"), ({"max_attempts": 0}, "max_attempts"),
                          ({"backoff": 1.0}, "backoff"), ({"retry_min": 0}, "retry_min"),
                          ({"retry_min": 2, "retry_max": 1}, "retry_max"), ({"heartbeat": -1}, "heartbeat")]:
        with pytest.raises(ValueError, match=words):
            Worker(db, "jobs", **kwargs)  # type: ignore[arg-type]
    assert Worker(db, "jobs", batch=2, concurrency=8).options.runners == 2  # never more than a batch
