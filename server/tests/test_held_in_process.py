"""`Database.query(..., wait=ms)`: a claim held in process, with real threads. Each test waits for
conditions under generous deadlines (30 s), never for a time to pass; the deadlines the claims carry
are either far past the test (30 s) or the point of the test."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Caller, held, until
from fenecdb_server import Database, FenecError

JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000} where run_at <= now() and owner = null "
         "order run_at limit 1 returning id, owner")
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture
def db() -> Database:
    d = Database()
    d.query(JOBS)
    return d


def test_a_put_from_another_thread_wakes_the_held_claim(db: Database) -> None:
    worker = Caller(lambda: db.query(CLAIM, ["w1"], wait=30_000))
    until(lambda: held(db) == 1)
    db.query("put jobs {payload: 1, run_at: now()}")
    assert worker.result() == [{"id": 1, "owner": "w1"}]
    assert held(db) == 0


def test_held_claims_are_served_first_come_first_served(db: Database) -> None:
    def claim(owner: str) -> Callable[[], object]:
        return lambda: db.query(CLAIM, [owner], wait=30_000)

    workers = []
    for i in range(3):
        workers.append(Caller(claim(f"w{i}")))
        until(lambda: held(db) == len(workers))
    db.query("put jobs [{payload: 1, run_at: now()}, {payload: 2, run_at: now()}]")
    assert workers[0].result() == [{"id": 1, "owner": "w0"}]
    assert workers[1].result() == [{"id": 2, "owner": "w1"}]
    assert held(db) == 1
    db.close()  # the one left is answered what its last run answered
    assert workers[2].result() == []


def test_a_delayed_job_is_taken_at_its_time_not_before(db: Database) -> None:
    before = db.now()
    db.query("put jobs {payload: 1, run_at: $1}", [before + 200])
    got = db.query(CLAIM, ["w1"], wait=30_000)
    assert got == [{"id": 1, "owner": "w1"}]
    assert db.now() >= before + 200


def test_the_deadline_answers_what_the_last_run_answered(db: Database) -> None:
    assert db.query(CLAIM, ["w1"], wait=1) == []
    with pytest.raises(FenecError) as e:
        db.query("del jobs where owner = 'nobody' require 1", wait=1)
    assert e.value.status == 412  # the `require` miss, raised again at the deadline
    assert held(db) == 0


def test_what_cannot_wait_is_refused_or_run_once(db: Database) -> None:
    with pytest.raises(FenecError) as e:
        db.query("put jobs {payload: 1, run_at: now()}", wait=1000)
    assert e.value.status == 400 and "writes otherwise" in e.value.message
    assert db.query("get jobs", wait=30_000) == []  # a read waits for nothing
    for bad in (-1, 1.5, True):
        with pytest.raises(FenecError) as e:
            db.query(CLAIM, ["w"], wait=bad)  # type: ignore[arg-type]
        assert e.value.status == 400
    with pytest.raises(FenecError) as e:
        db.query("set nowhere {owner: 'w'}", wait=1000)
    assert e.value.status == 404


def test_a_claim_that_takes_at_once_does_not_wait(db: Database) -> None:
    db.query("put jobs {payload: 1, run_at: now()}")
    assert db.query(CLAIM, ["w1"], wait=30_000) == [{"id": 1, "owner": "w1"}]
    assert held(db) == 0


def test_the_readme_in_process_examples_run() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Use it in process")
    section = text[start: text.index("\n## ", start + 1)]
    blocks = section.split("```python\n")[1:]
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block.split("```")[0], str(README), "exec"), {})


def test_a_closed_database_holds_nothing(db: Database) -> None:
    assert db.query(CLAIM, ["w"], wait=1) == []  # the lines' thread started
    db.close()
    with pytest.raises(FenecError) as e:
        db.query(CLAIM, ["w"], wait=30_000)
    assert e.value.status == 503
    waiting = db._in_process
    assert waiting is not None and waiting.driver._thread is not None
    assert not waiting.driver._thread.is_alive()  # close ended it


def test_the_threads_driver_runs_hops_then_due_timers_in_order_and_never_a_cancelled_one() -> None:
    from fenecdb_server.held.on_threads import ThreadDriver

    now = 0.0  # its clock stands still: only timers already due may fire
    driver: ThreadDriver[None] = ThreadDriver(lambda w: None, None, clock=lambda: now)  # type: ignore[arg-type,return-value]
    seen: list[str] = []
    last = threading.Event()
    driver.call_at(-2.0, lambda: seen.append("due 2 s ago"))
    driver.call_at(-1.0, lambda: seen.append("cancelled")).cancel()
    driver.call_at(1000.0, lambda: seen.append("not due"))
    driver.soon(lambda: seen.append("hop"))  # starts its thread
    def finally_due() -> None:
        seen.append("due 0.5 s ago")
        last.set()

    driver.call_at(-0.5, finally_due)
    assert last.wait(30)
    driver.stop()
    assert seen == ["hop", "due 2 s ago", "due 0.5 s ago"]
    assert driver._thread is not None and not driver._thread.is_alive()
