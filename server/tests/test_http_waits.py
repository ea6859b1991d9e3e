"""Held claims (held/, through the HTTP app) against a small fake engine, in process: the fairness contract's rules
that need a controlled clock and exact counts of looks and runs."""

from __future__ import annotations

import asyncio
import itertools
import selectors
from typing import Any

import httpx
import pytest
from fenecdb_server.errors import FenecError
from fenecdb_server.http.app import App, Config


class Hold:
    def __init__(self, db: FakeDB, key: Any, held: bool) -> None:
        self.db = db
        self.line_key = key
        self.held = held
        self.collections = frozenset({"jobs"})

    def would_take(self) -> bool:
        self.db.looks += 1
        return any(j["run_at"] is not None and j["run_at"] <= self.db.now() for j in self.db.jobs.values())

    def next_moment(self) -> int | None:
        now = self.db.now()
        ahead = [j["run_at"] for j in self.db.jobs.values() if j["run_at"] is not None and j["run_at"] > now]
        return min(ahead) if ahead else None

    def bid_profile(self) -> None:
        return None

    plain = False

    def wakes(self) -> None:
        return None  # every write wakes it: this fake's looks are what the tests count

    def takes(self, collection: str, rid: int) -> bool:
        return True

    def moment_of(self, collection: str, rid: int) -> int | None:
        return None

    def came_due(self, since: int) -> None:
        return None


class Result:
    def __init__(self, answers: list[Any], seq: int, wrote: bool, taken: int) -> None:
        self.answers = answers
        self.seq = seq
        self.wrote = wrote
        self.taken = taken
        self.replayed = None


class FakeDB:
    """Statements: `put <delay_ms>`, `claim` (params [owner, n]), `get`, `bad`."""

    log = None  # in memory: no data file to sync

    def __init__(self) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.ids = itertools.count(1)
        self.seq = 0
        self.listeners: list[Any] = []
        self.offset = 0
        self.looks = 0
        self.runs = 0

    def now(self) -> int:
        import time

        return int(time.time() * 1000) + self.offset

    def until(self, moment: int) -> float:
        return (moment - self.now()) / 1000

    def listen(self, cb: Any) -> None:
        self.listeners.append(cb)

    def unlisten(self, cb: Any) -> None:
        self.listeners.remove(cb)

    def look(self, fn: Any) -> Any:
        return fn()

    def cached(self, text: str) -> bool:  # every text is short here: none is sent off the loop
        return True

    def observe(self, note: Any) -> int:
        return self.seq

    def unobserve(self, note: Any) -> None:
        pass

    def prepare_hold(self, statements: list[tuple[str, Any]]) -> Hold:
        texts = [t for t, _ in statements]
        if any(t.startswith("put") for t in texts):
            raise FenecError("query", "a held claim writes otherwise: put")
        return Hold(self, texts[0], any(t in ("claim", "claimB") for t in texts))

    def execute(self, statements: list[tuple[str, Any]], *, block: bool = False, idempotency: Any = None,
                render: Any = None, scope: Any = None, max_rows: int = 0, max_writes: int = 0,
                nowait: bool = False, pieces: int = 0) -> Result:
        # the ceilings, `nowait` and `pieces` (the engine's) never bind here: the fake's answers are a few rows
        answers: list[Any] = []
        wrote = False
        taken = 0
        for text, params in statements:
            if text.startswith("put"):
                delay = int(text.split()[1]) if " " in text else 0
                for _ in range(params[0] if params else 1):
                    i = next(self.ids)
                    self.jobs[i] = {"id": i, "run_at": self.now() + delay, "owner": None}
                wrote = True
                answers.append({"affected": params[0] if params else 1})
            elif text in ("claim", "claimB"):
                self.runs += 1
                owner, n = params
                rows = []
                for j in sorted(self.jobs.values(), key=lambda j: (j["run_at"] or 0, j["id"])):
                    if len(rows) == n:
                        break
                    if j["run_at"] is not None and j["run_at"] <= self.now():
                        j["owner"] = owner
                        j["run_at"] = self.now() + 30000
                        rows.append({"id": j["id"], "owner": owner})
                taken += len(rows)
                wrote = wrote or bool(rows)
                answers.append(rows)
            elif text == "get":
                rows = [dict(j) for j in self.jobs.values()]
                answers.append(rows)
            else:
                raise FenecError("query", f"position 1: unknown statement {text!r}", at=0 if block else None)
        if wrote:
            self.seq += 1
            for cb in self.listeners:
                cb(frozenset({"jobs"}), self.seq)
        return Result(answers, self.seq, wrote, taken)


pytestmark = [pytest.mark.anyio, pytest.mark.sources]  # an App over a fake engine: the sources' App (conftest)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> FakeDB:
    return FakeDB()


def client(app: App) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


def claim(owner: str, n: int = 1) -> dict[str, Any]:
    return {"query": "claim", "params": [owner, n]}


async def one_held(app: App, c: httpx.AsyncClient) -> asyncio.Task[httpx.Response]:
    """Worker `w`'s claim, sent with a 30 s wait (far past anything a test waits for, so an
    answer at its deadline is told from a wake on any machine); returned once the app holds it."""
    waiter = asyncio.create_task(c.post("/query", json=claim("w"), headers={"Fenec-Wait": "30000"}))
    await until(lambda: bool(app.lines and app.lines.held))
    return waiter


async def until(cond: Any, timeout: float = 30.0) -> None:
    """Wait for `cond()` with a generous deadline (a condition, never a rate)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in 30 s"
        await asyncio.sleep(0.005)


async def test_put_wakes_held_claim_and_fifo(fake: FakeDB) -> None:
    app = App(fake, Config(version="t"))
    async with client(app) as c:
        waiters = [asyncio.create_task(c.post("/query", json=claim(f"w{i}"), headers={"Fenec-Wait": "30000"}))
                   for i in range(3)]
        await until(lambda: bool(app.lines and app.lines.held == 3))
        assert app.lines is not None
        runs_before = fake.runs
        r = await c.post("/query", json={"query": "put", "params": [2]})
        assert r.status_code == 200
        await until(lambda: sum(t.done() for t in waiters) == 2)
        done = {t for t in waiters if t.done()}
        pending = {t for t in waiters if not t.done()}
        # two jobs: the two longest-waiting workers get them, in order; the third stays held
        assert len(done) == 2
        got = {t.result().json()[0]["owner"]: t.result().json()[0]["id"] for t in done}
        assert got == {"w0": 1, "w1": 2}
        # one look for the write and one after each hand-off; runs only when a row was there
        assert fake.runs - runs_before == 2
        assert app.lines.held == 1
        app.shutdown()
        rest = await asyncio.wait_for(pending.pop(), 30)
        assert rest.status_code == 200 and rest.json() == []


async def test_delayed_job_wakes_at_its_time_not_before(fake: FakeDB) -> None:
    app = App(fake, Config(version="t"))
    async with client(app) as c:
        await c.post("/query", json={"query": "put 300", "params": [1]})
        due = fake.jobs[1]["run_at"]
        r = await c.post("/query", json=claim("w"), headers={"Fenec-Wait": "30000"})
        answered = fake.now()
        assert r.json() == [{"id": 1, "owner": "w"}]
        assert answered >= due
        assert answered - due < 10_000  # woken at its time, far before the 30 s deadline


async def test_deadline_answers_last_run(fake: FakeDB) -> None:
    app = App(fake, Config(version="t"))
    async with client(app) as c:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        r = await c.post("/query", json=claim("w"), headers={"Fenec-Wait": "200"})
        assert r.status_code == 200 and r.json() == []
        assert 0.19 <= loop.time() - t0 < 10.0  # at its end (a missed end would hold on)
        assert app.lines is not None and app.lines.held == 0 and not app.lines.lines


async def test_look_throttle_one_look_per_ms(fake: FakeDB) -> None:
    app = App(fake, Config(version="t"))
    async with client(app) as c:
        waiter = await one_held(app, c)
        looks = fake.looks
        # 20 writes of delayed jobs in one turn of the loop, so inside one look gap on any
        # machine: far fewer than 20 looks
        for _ in range(20):
            fake.execute([("put 60000", [1])])
        await until(lambda: fake.looks - looks >= 1)
        for _ in range(20):  # let any further look the gap's end brings run
            await asyncio.sleep(0.002)
        assert fake.looks - looks <= 2
        assert fake.looks - looks >= 1
        app.shutdown()
        assert (await waiter).json() == []


async def test_put_with_wait_refused_and_reads_not_held(fake: FakeDB) -> None:
    app = App(fake, Config(version="t"))
    async with client(app) as c:
        r = await c.post("/query", json={"query": "put", "params": [1]}, headers={"Fenec-Wait": "1000"})
        assert r.status_code == 400 and "writes otherwise" in r.json()["error"]
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        r = await c.post("/query", json={"query": "get"}, headers={"Fenec-Wait": "30000"})
        assert r.status_code == 200 and loop.time() - t0 < 10  # at once, not held to its 30 s
        for bad in ("soon", "-1", "1.5", ""):
            r = await c.post("/query", json=claim("w"), headers={"Fenec-Wait": bad})
            assert r.status_code == 400 and r.json() == {"error": "Fenec-Wait is milliseconds"}


def test_committed_openapi_document_is_the_served_one() -> None:
    from pathlib import Path

    from fenecdb_server.http import openapi

    committed = Path(__file__).resolve().parent.parent / "openapi.json"
    assert committed.read_text() == openapi.text()


async def test_across_lines_the_request_held_longest_runs_first(fake: FakeDB) -> None:
    """Fairness rule 7: two lines that would take the same row; the older head gets it."""
    app = App(fake, Config(version="t"))
    async with client(app) as c:
        order = [("claimB", "b0"), ("claim", "a0"), ("claimB", "b1"), ("claim", "a1")]
        tasks = []
        for i, (text, owner) in enumerate(order):
            tasks.append(asyncio.create_task(
                c.post("/query", json={"query": text, "params": [owner, 1]}, headers={"Fenec-Wait": "30000"})))
            await until(lambda i=i: bool(app.lines and app.lines.held == i + 1))
        assert app.lines is not None and len(app.lines.lines) == 2
        for expected in ("b0", "a0", "b1", "a1"):
            await c.post("/query", json={"query": "put", "params": [1]})
            done, _ = await asyncio.wait(tasks, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            task = done.pop()
            tasks.remove(task)
            assert task.result().json()[0]["owner"] == expected


class EarlyTimers(asyncio.SelectorEventLoop):
    """A loop whose timers fire while its clock still reads 0.9 ms before their time, as
    uvloop's whole-millisecond clock can (`15187.13` at a timer set for `15187.130000000001`).
    It waits in `select`, whose timeout is not rounded up to a whole millisecond as epoll's is
    (a rounded wait would bring the timer back to its time, or past it)."""

    def __init__(self) -> None:
        super().__init__(selectors.SelectSelector())

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        return super().call_at(when - 0.0009, callback, *args, context=context)


def test_a_write_inside_the_look_gap_wakes_the_line_even_when_its_timer_fires_early() -> None:
    """Fairness rule 3 on a coarse clock: the write that lands inside a line's 1 ms look gap is
    answered by the look at the gap's end. The gap's timer is the end, whatever the clock reads
    then; comparing the clock with the gap's end once left the worker asleep beside a ready job
    until its deadline."""
    fake = FakeDB()

    async def scenario() -> None:
        app = App(fake, Config(version="t"))
        async with client(app) as c:
            waiter = await one_held(app, c)
            looks = fake.looks
            fake.execute([("put 60000", [1])])  # a delayed job: the line looks, finds nothing
            for _ in range(5):
                await asyncio.sleep(0)
            assert fake.looks == looks + 1
            fake.execute([("put", [1])])  # a ready job, inside the look gap
            t0 = asyncio.get_running_loop().time()
            r = await asyncio.wait_for(waiter, 40)
            assert r.json() == [{"id": 2, "owner": "w"}]
            assert asyncio.get_running_loop().time() - t0 < 10  # at the gap's end, not the 30 s deadline

    with asyncio.Runner(loop_factory=EarlyTimers) as runner:
        runner.run(scenario())


async def test_a_write_from_another_thread_wakes_a_held_claim(fake: FakeDB) -> None:
    """A write made off the loop (a large statement in a worker thread, the sweeper, a caller in
    process) announces itself from that thread: the wake hops onto the loop and the claim is run."""
    app = App(fake, Config(version="t"))
    async with client(app) as c:
        waiter = await one_held(app, c)
        await asyncio.to_thread(fake.execute, [("put", [1])])
        got = await asyncio.wait_for(waiter, 30)
        assert got.status_code == 200 and got.json() == [{"id": 1, "owner": "w"}]
        assert app.lines is not None and app.lines.held == 0
