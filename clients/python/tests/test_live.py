"""The client against a real fenec-server on loopback: answers, every refusal the queue meets,
held claims beyond the client's own timeout, cancellation, idempotent retries, batches."""

from __future__ import annotations

import asyncio
import time

import fenecdb
import pytest
from fenecdb import (
    AsyncClient,
    BadRequestError,
    Client,
    DuplicateError,
    KeyReusedError,
    NotFoundError,
    UnmetError,
    expr,
    inc,
    raw,
)


def claim(q: fenecdb.Query | fenecdb.AsyncQuery, owner: str, batch: int = 1):  # type: ignore[no-untyped-def]
    return q.where(raw("run_at <= now()")).order("run_at").limit(batch), \
        {"owner": owner, "run_at": expr("now() + ?", 30000), "attempts": inc(1)}


def test_the_seed_statements_answer_as_the_page_says(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        jobs = db.collection(queue)
        assert jobs.insert({"payload": {"to": "ada@example.com"}, "run_at": expr("now()"), "attempts": 0}) == 1
        assert db.seq > 0
        chain, patch = claim(jobs, "w1:1", 2)
        (row,) = chain.update(patch, returning=["id", "payload.to", "attempts"])
        assert row == {"id": row["id"], "payload.to": "ada@example.com", "attempts": 1}
        assert jobs.where("id", row["id"]).where("owner", "w1:1").update(
            {"run_at": expr("now() + ?", 30000)}, require=1) == 1
        with pytest.raises(UnmetError) as e:
            jobs.where("id", row["id"]).where("owner", "w2:1").delete(require=1)
        assert e.value.status == 412
        assert jobs.where("id", row["id"]).where("owner", "w1:1").delete(require=1) == 1
        assert jobs.count() == 0


def test_server_refusals_arrive_as_their_classes(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        with pytest.raises(NotFoundError):
            db.collection("no_such_queue_here").rows()
        with pytest.raises(BadRequestError):
            db.query("get")
        with pytest.raises(DuplicateError):
            db.query(f"create collection {queue} (x int)")
        with pytest.raises(UnmetError):
            db.collection(queue).where("attempts", 0).require(1).rows()
        with pytest.raises(BadRequestError):  # a put cannot be held
            db.query(f"put {queue} {{attempts: 0}}", wait=1)


def test_a_held_claim_outlives_the_clients_own_timeout(server_url: str, queue: str) -> None:
    with Client(server_url, timeout=0.5) as db:
        chain, patch = claim(db.collection(queue), "w1:1")
        started = time.monotonic()
        assert chain.update(patch, returning=True, wait=1.2) == []
        assert 1.1 < time.monotonic() - started < 10


def test_a_held_claim_wakes_for_a_job_enqueued_meanwhile(server_url: str, queue: str) -> None:
    async def main() -> tuple[list[dict[str, object]], float]:
        async with AsyncClient(server_url) as waiter, AsyncClient(server_url) as producer:
            chain, patch = claim(waiter.collection(queue), "w1:1")
            started = time.monotonic()
            task = asyncio.ensure_future(chain.update(patch, returning=True, wait=30))
            await asyncio.sleep(0.3)
            await producer.collection(queue).insert({"payload": {"n": 1}, "run_at": expr("now()"), "attempts": 0})
            return await task, time.monotonic() - started

    rows, took = asyncio.run(main())
    assert len(rows) == 1 and rows[0]["payload"] == {"n": 1} and 0.25 < took < 15  # by the job, not the 30 s deadline


def test_a_cancelled_claim_gives_the_job_to_the_next_worker(server_url: str, queue: str) -> None:
    async def main() -> list[dict[str, object]]:
        async with AsyncClient(server_url) as first, AsyncClient(server_url) as second:
            chain, patch = claim(first.collection(queue), "gone:1")
            task = asyncio.ensure_future(chain.update(patch, returning=True, wait=10))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await second.collection(queue).insert({"payload": {"n": 2}, "run_at": expr("now()"), "attempts": 0})
            chain2, patch2 = claim(second.collection(queue), "next:1")
            return list(await chain2.update(patch2, returning=True, wait=2))

    rows = asyncio.run(main())
    assert [(r["owner"], r["attempts"]) for r in rows] == [("next:1", 1)]


def test_a_claim_retried_under_its_key_is_answered_the_same_jobs(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        jobs = db.collection(queue)
        jobs.insert([{"payload": {"n": i}, "run_at": expr("now()"), "attempts": 0} for i in range(2)])
        keyed = db.with_idempotency_key(f"claim-{queue}")
        chain, patch = claim(keyed.collection(queue), "w1:1")
        first = chain.update(patch, returning=True)
        assert keyed.replayed is False
        again = chain.update(patch, returning=True)
        assert again == first and keyed.replayed is True and db.replayed is True
        assert jobs.where("owner", None).count() == 1
        chain, other = claim(keyed.collection(queue), "w1:2")
        with pytest.raises(KeyReusedError) as e:
            chain.update(other, returning=True)
        assert e.value.status == 422


def test_a_batch_answers_each_statement_in_its_form(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        jobs = db.collection(queue)
        answer = db.batch([
            jobs.to_insert({"payload": {"n": 1}, "run_at": expr("now()"), "attempts": 0}),
            jobs.where("attempts", 0).to_update({"error": "x"}, returning=["attempts"]),
            (f"get {queue} count", None),
        ])
        assert answer == {"ok": 3, "results": [{"affected": 1}, {"rows": [{"attempts": 0}]},
                                               {"rows": [{"count": 1}]}]}


def test_a_failed_batch_lands_nothing(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        jobs = db.collection(queue)
        with pytest.raises(UnmetError) as e:
            db.batch([jobs.to_insert({"attempts": 0}), jobs.where("id", -1).to_delete(require=1)])
        assert (e.value.at, e.value.completed) == (1, 0)
        assert str(e.value).startswith("unmet: ")
        assert jobs.count() == 0
