"""`AsyncWorker.run(handler)`: the same behaviour as the blocking worker, on tasks — a live server for
the loop, a mock transport for a heartbeat whose connection fails."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from capture_transport import Capture, Sent, answer
from fenecdb import AsyncClient, AsyncJob, AsyncWorker, Client, Worker
from fenecdb._http11 import Answer
from test_worker_run import Recorder, enqueue


async def until(condition: Callable[[], object], seconds: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        await asyncio.sleep(0.02)



def sleeper(cancelled: list[Any]) -> Callable[[AsyncJob], Awaitable[None]]:
    """A handler that sleeps a minute; the id of each job whose sleep is cancelled goes to `cancelled`."""
    async def handler(job: AsyncJob) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(job.id)
            raise
    return handler

def test_run_acks_fails_and_bounds_concurrency(server_url: str, queue: str) -> None:
    with Client(server_url) as sync:
        ids = enqueue(sync, queue, *({"n": n} for n in range(8)), {"n": "bad"})
    events = Recorder()
    most = [0, 0]

    async def handler(job: AsyncJob) -> None:
        most[0] += 1
        most[1] = max(most[1], most[0])
        try:
            await until(lambda: most[1] >= 3 or events.count("start") == 9)
            if job.payload["n"] == "bad":
                raise RuntimeError("no such mailbox")
        finally:
            most[0] -= 1

    async def main() -> None:
        async with AsyncClient(server_url) as db:
            worker = AsyncWorker(db, queue, batch=9, concurrency=3, lease=30, wait=1, backoff=lambda attempts: 2.0 * attempts * attempts,
                                 on_event=events)
            task = asyncio.ensure_future(worker.run(handler))
            await until(lambda: events.count("done") + events.count("failed") == 9)
            worker.stop()
            await asyncio.wait_for(task, 60)

    asyncio.run(main())
    assert most[1] == 3
    assert sorted(e["id"] for e in events.of("done")) == ids[:8]
    assert [(e["id"], e["error"], e["delay_ms"]) for e in events.of("failed")] == [(ids[8], "no such mailbox", 2000)]
    assert events.of("stopped")


def test_a_lost_lease_cancels_the_handler(server_url: str, queue: str) -> None:
    with Client(server_url) as sync:
        (job_id,) = enqueue(sync, queue, {"n": "taken"})
    events = Recorder()
    seen: list[str] = []

    async def main() -> None:
        async with AsyncClient(server_url) as db:
            async def handler(job: AsyncJob) -> None:
                await db.collection(queue).where("id", job.id).update({"owner": "thief"})
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    seen.append(f"cancelled lost={job.lost}")
                    raise

            worker = AsyncWorker(db, queue, batch=1, lease=3, heartbeat=0.2, wait=1, on_event=events)
            task = asyncio.ensure_future(worker.run(handler))
            await until(lambda: events.count("lost") == 1)
            worker.stop()
            await asyncio.wait_for(task, 60)

    asyncio.run(main())
    assert seen == ["cancelled lost=True"]
    assert [e["id"] for e in events.of("lost")] == [job_id] and events.count("done") == 0


def test_stop_from_another_thread_cancels_a_held_claim(server_url: str, queue: str) -> None:
    events = Recorder()

    async def main() -> float:
        async with AsyncClient(server_url) as db:
            worker = AsyncWorker(db, queue, batch=1, lease=5, wait=30, on_event=events)
            task = asyncio.ensure_future(worker.run(lambda job: asyncio.sleep(0)))
            await asyncio.sleep(0.3)
            asked = time.monotonic()
            threading.Thread(target=worker.stop).start()
            await asyncio.wait_for(task, 10)
            return time.monotonic() - asked

    assert asyncio.run(main()) < 10  # a cancel, not the end of the 30 s hold
    assert events.of("stopped") and events.count("claimed") == 0


def test_stop_gives_back_the_unstarted_and_drains_the_running(server_url: str, queue: str) -> None:
    with Client(server_url) as sync:
        ids = enqueue(sync, queue, *({"n": n} for n in range(4)))
    events = Recorder()

    async def main() -> None:
        go_on = asyncio.Event()
        async with AsyncClient(server_url) as db:
            worker = AsyncWorker(db, queue, batch=4, concurrency=2, lease=30, wait=1, on_event=events)
            task = asyncio.ensure_future(worker.run(lambda job: go_on.wait()))
            await until(lambda: events.count("start") == 2)
            worker.stop()
            await until(lambda: events.count("released") == 2)
            assert events.count("done") == 0
            go_on.set()
            await asyncio.wait_for(task, 60)

    asyncio.run(main())
    assert sorted(e["id"] for e in events.of("released")) == ids[2:]
    assert sorted(e["id"] for e in events.of("done")) == ids[:2]
    with Client(server_url) as sync:
        rows = sync.collection(queue).order("id").rows()
    assert [(r["id"], r["owner"], r["attempts"]) for r in rows] == [(ids[2], None, 0), (ids[3], None, 0)]


def test_a_dead_heartbeat_raises_nothing_after_the_jobs_are_acked() -> None:
    """The old AsyncWorker raised the heartbeat's ConnectionError out of the loop after every ack."""
    claims = [0]

    def reply(request: Sent) -> Answer:
        text = request.content.decode()
        if '"set jobs {owner' in text:
            claims[0] += 1
            rows = [{"id": 1, "payload": {}, "attempts": 1}] if claims[0] == 1 else []
            return answer(200, json=rows)
        if '"set jobs {run_at' in text:
            raise ConnectionError("the heartbeat's connection is gone")
        return answer(200, json={"affected": 1})

    async def main() -> list[Any]:
        db = Capture(reply).async_client()
        worker = AsyncWorker(db, "jobs", batch=1, lease=0.3, wait=0)
        acked = []
        async for job in worker:
            await asyncio.sleep(0.5)  # past a beat (0.1 s): the extend fails on the network
            acked.append(await job.ack())
            worker.stop()
        return acked

    assert asyncio.run(main()) == [True]


def test_stop_from_another_thread_ends_the_iterator_form_at_once(server_url: str, queue: str) -> None:
    with Client(server_url) as db:
        worker = Worker(db, queue, batch=1, lease=5, wait=30)
        threading.Timer(0.3, worker.stop).start()
        started = time.monotonic()
        assert list(worker) == []
        assert time.monotonic() - started < 10  # the held claim given up, not waited out (30 s)


def test_cancelling_run_cancels_the_handlers_and_gives_their_jobs_back(server_url: str, queue: str) -> None:
    with Client(server_url) as sync:
        ids = enqueue(sync, queue, {"n": 1}, {"n": 2})
    events = Recorder()
    cancelled: list[Any] = []
    handler = sleeper(cancelled)

    async def main() -> None:
        async with AsyncClient(server_url) as db:
            worker = AsyncWorker(db, queue, batch=2, lease=30, wait=1, on_event=events)
            task = asyncio.ensure_future(worker.run(handler))
            await until(lambda: events.count("start") == 1)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert task.cancelled()

    asyncio.run(main())
    assert cancelled == [ids[0]]
    with Client(server_url) as sync:
        rows = sync.collection(queue).order("id").rows()
    assert [(r["id"], r["owner"], r["attempts"]) for r in rows] == [(ids[0], None, 0), (ids[1], None, 0)]


def test_the_drain_runs_out_into_a_hard_stop_and_a_hard_stop_is_at_once(server_url: str, queue: str) -> None:
    with Client(server_url) as sync:
        ids = enqueue(sync, queue, {"n": 1}, {"n": 2})
    events = Recorder()
    cancelled: list[Any] = []
    handler = sleeper(cancelled)

    async def main() -> None:
        async with AsyncClient(server_url) as db:
            for hard in (False, True):
                worker = AsyncWorker(db, queue, batch=1, lease=30, wait=1, drain_timeout=0.3, on_event=events)
                task = asyncio.ensure_future(worker.run(handler))
                starts = 1 + hard
                await until(lambda: len(events.of("start")) == starts)  # noqa: B023 - awaited here
                worker.stop(hard=hard)
                await asyncio.wait_for(task, 30)

    asyncio.run(main())
    assert cancelled == ids and [e["id"] for e in events.of("released")] == ids
    assert events.count("done") == events.count("failed") == 0


def test_an_async_claim_is_retried_under_the_same_key_and_a_slow_job_kept() -> None:
    answers: list[Any] = [ConnectionError("refused"), answer(503, json={"error": "starting"})]
    seen: list[Sent] = []

    def reply(request: Sent) -> Answer:
        seen.append(request)
        text = request.content.decode()
        if '"set jobs {owner' in text:
            if answers:
                given = answers.pop(0)
                if isinstance(given, Exception):
                    raise given
                return given  # type: ignore[no-any-return]
            return answer(200, json=[{"id": 1, "payload": {}, "attempts": 1}])
        return answer(200, json={"affected": 1})

    async def main() -> None:
        db = Capture(reply).async_client()
        worker = AsyncWorker(db, "jobs", name="a7", batch=1, lease=0.3, wait=1)

        async def slow(job: AsyncJob) -> None:
            await until(lambda: sum('"set jobs {run_at' in r.content.decode() for r in seen) >= 3)
            worker.stop()

        await worker.run(slow)

    asyncio.run(main())
    claims = [r for r in seen if '"set jobs {owner' in r.content.decode()]
    assert len(claims) == 3 and len({r.headers["Idempotency-Key"] for r in claims}) == 1
    extends = [r.headers["Idempotency-Key"] for r in seen if '"set jobs {run_at' in r.content.decode()]
    assert len(set(extends)) == len(extends) >= 3  # each beat its own key
    assert [r for r in seen if r.content.startswith(b'{"query":"del jobs')]  # acked after the beats
