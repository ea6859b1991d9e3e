"""The wake path of a held claim, counted: the turns of the event loop (`call_soon`) and the tasks
between a write and the held claim's answer. Counts, not times: the same on any machine."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fenecdb_server import Database
from fenecdb_server.http.app import App, Config

CLAIM = {"query": "set jobs {owner: $1, run_at: now() + 30000} where run_at <= now() order run_at limit 1 "
                  "returning id", "params": ["w"]}


async def _wakes(n: int) -> list[tuple[int, int]]:
    db = Database()
    db.query("create collection jobs (run_at timestamp @sorted, owner text)")
    app = App(db, Config(version="t"))
    loop = asyncio.get_running_loop()
    counts = {"soon": 0, "tasks": 0}
    counting = [False]
    call_soon, create_task = loop.call_soon, loop.create_task

    def soon(*a: Any, **k: Any) -> Any:
        counts["soon"] += counting[0]
        return call_soon(*a, **k)

    def task(*a: Any, **k: Any) -> Any:
        counts["tasks"] += counting[0]
        return create_task(*a, **k)

    vars(loop).update(call_soon=soon, create_task=task)  # this loop's own, for this test
    out = []
    try:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            for _ in range(n):
                request = asyncio.ensure_future(c.post("/query", json=CLAIM, headers={"Fenec-Wait": "30000"}))
                while not (app.lines and app.lines.held):
                    await asyncio.sleep(0.001)
                for _ in range(10):  # what holding the request's claim left to do is done first
                    await asyncio.sleep(0)
                counts.update(soon=0, tasks=0)
                counting[0] = True
                db.query("put jobs {run_at: now()}")  # the wake alone: the put is made in process
                answer = await asyncio.wait_for(request, 30)
                counting[0] = False
                assert answer.json(), answer.text
                out.append((counts["soon"], counts["tasks"]))
    finally:
        del vars(loop)["call_soon"], vars(loop)["create_task"]
    return out


def test_a_put_wakes_a_held_claim_in_ten_turns_and_no_task() -> None:
    # Counted so on the code before held/: 11 turns and 1 task (the line's pump). The run is now
    # made in the last settling turn, on the loop, with no task of its own.
    for turns, tasks in asyncio.run(_wakes(5)):
        assert tasks == 0
        assert turns <= 10
