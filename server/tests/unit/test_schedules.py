"""Schedules (engine/schedules.py), in process on a clock the test moves: a fire per due time and
none twice, counted; missed due times made up once or skipped; pause, resume, fire by hand, drop;
the state across a reopen, a compaction and a cut log; the `schedule` grant."""

from __future__ import annotations

import random
import threading

import pytest
from conftest import SPEC_EPOCH_MS, TestClock, reopen
from fenecdb_server import Database, FenecError
from fenecdb_server.engine import records
from fenecdb_server.engine.schedules import GRACE_MS
from fenecdb_server.policy import Policy
from fenecdb_server.values import parse_time

JOBS = "create collection jobs (payload json, due timestamp, run_at timestamp @sorted, owner text, attempts int)"
TICK = "create schedule tick every 10s put jobs {due: $1, run_at: now(), attempts: 0}"


def fails(fn, status, needle=None):
    with pytest.raises(FenecError) as ei:
        fn()
    assert ei.value.status == status, ei.value
    if needle:
        assert needle in ei.value.message, ei.value.message


def dues(db) -> list[int]:
    return [parse_time(r["due"]) for r in db.query("get jobs select due order id")]


@pytest.fixture
def db(db):  # conftest's, on its clock
    db.query(JOBS)
    return db


def test_a_fire_per_due_time_and_none_twice(db, clock):
    """Two hundred due times, the clock moved by random steps (some within one period, some
    across several, none past the grace) and `fire_due` called once or twice at each stop: one job
    per due time, for exactly those that have come."""
    db.query(TICK)
    start = SPEC_EPOCH_MS
    rnd = random.Random(45)
    while clock() < start + 2_000_000:
        clock.advance(rnd.choice([1, 999, 5_000, 10_000, 10_001, 25_000, 59_000]))
        for _ in range(rnd.choice([1, 1, 2])):
            db.fire_due()
    db.fire_due()
    want = list(range(start + 10_000, clock() + 1, 10_000))
    assert dues(db) == want
    assert db.fire_due() == 0
    assert db.query("show schedules")[0]["fires"] == len(want)


def test_firers_at_once_fire_each_due_time_once(db, clock):
    db.query(TICK)
    clock.advance(GRACE_MS)  # six due times on time at once
    counts = []
    threads = [threading.Thread(target=lambda: counts.append(db.fire_due())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 6
    assert dues(db) == [SPEC_EPOCH_MS + 10_000 * k for k in range(1, 7)]


@pytest.mark.parametrize("policy, made_up", [("", 1), (" missed once", 1), (" missed skip", 0)])
def test_missed_due_times_made_up_once_or_skipped(db, clock, policy, made_up):
    db.query(f"create schedule tick every 10s{policy} put jobs {{due: $1, run_at: now(), attempts: 0}}")
    clock.advance(3_600_000)  # down for an hour: 360 due times, the last seven within the grace
    n = db.fire_due()
    on_time = [SPEC_EPOCH_MS + 3_600_000 - GRACE_MS + 10_000 * k for k in range(7)]
    assert n == made_up + 7
    assert dues(db) == [SPEC_EPOCH_MS + 10_000] * made_up + on_time
    row = db.query("show schedules")[0]
    assert row["missed"] == ("skip" if "skip" in policy else "once")
    assert parse_time(row["next_due"]) == SPEC_EPOCH_MS + 3_600_000 + 10_000


def test_pause_resume_fire_by_hand_drop(db, clock):
    db.query(TICK)
    assert db.query("pause schedule tick") == {"message": "schedule `tick` paused"}
    clock.advance(100_000)
    assert db.fire_due() == 0 and dues(db) == []
    assert db.query("show schedules")[0]["paused"] is True
    assert db.query("fire schedule tick") == {"message": "schedule `tick` fired", "affected": 1}
    assert dues(db) == [clock()]
    assert db.query("resume schedule tick") == {"message": "schedule `tick` resumed"}
    assert db.fire_due() == 0  # what fell due while paused is not made up
    row = db.query("show schedules")[0]
    assert row["paused"] is False and parse_time(row["next_due"]) == SPEC_EPOCH_MS + 110_000
    clock.advance(10_000)
    assert db.fire_due() == 1
    assert db.query("drop schedule tick") == {"message": "schedule `tick` dropped"}
    clock.advance(100_000)
    assert db.fire_due() == 0 and db.query("show schedules") == []
    fails(lambda: db.query("drop schedule tick"), 404)
    assert db.query("drop schedule if exists tick") == {"message": "schedule `tick` does not exist"}


def test_cron_in_a_zone_across_a_dst_change():
    """02:30 every day in New York: on 2026-03-08 that time does not exist, and the fire comes at
    03:00 local, once; the due times are the zone's, not UTC's."""
    clock = TestClock(parse_time("2026-03-06T12:00:00Z"))
    db = Database(clock=clock)
    db.query(JOBS)
    db.query('create schedule nightly cron "30 2 * * *" in "America/New_York" '
             "put jobs {due: $1, run_at: now(), attempts: 0}")
    assert db.query("show schedules")[0]["zone"] == "America/New_York"
    for _ in range(4 * 24 * 6):
        clock.advance(600_000)
        db.fire_due()
    assert [r["due"] for r in db.query("get jobs select due order id")] == [
        "2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]


def test_a_put_that_fails_is_recorded_and_the_schedule_goes_on(db, clock):
    db.query("create collection keyed (k text @unique, run_at timestamp)")
    db.query('create schedule once every 10s put keyed {k: "same", run_at: $1}')
    clock.advance(20_000)
    assert db.fire_due() == 2
    row = db.query("show schedules")[0]
    assert row["fires"] == 2 and "@unique" in row["error"]
    assert parse_time(row["last_fired"]) == SPEC_EPOCH_MS + 10_000
    assert parse_time(row["next_due"]) == SPEC_EPOCH_MS + 30_000
    fails(lambda: db.query("fire schedule once"), 409)  # by hand, the refusal is answered


def test_refusals(db):
    fails(lambda: db.query('create schedule s cron "61 * * * *" put jobs {attempts: 0}'), 400, "cron")
    fails(lambda: db.query('create schedule s cron "0 9 * * *" in "Mars/Base" put jobs {attempts: 0}'), 400, "zone")
    fails(lambda: db.query("create schedule s every 500ms put jobs {attempts: 0}"), 400, "once a second")
    fails(lambda: db.query("create schedule s every 1mo put jobs {attempts: 0}"), 400, "cron")
    fails(lambda: db.query("create schedule s every 1m put nosuch {attempts: 0}"), 404)
    fails(lambda: db.query("create schedule s every 1m put jobs {nosuch: 0}"), 404)
    fails(lambda: db.query("create schedule s every 1m put jobs {due: $2}"), 400, "$1")
    fails(lambda: db.query("pause schedule s"), 404)
    assert db.query("show schedules") == []
    db.query(TICK)
    fails(lambda: db.query(TICK), 409)
    assert db.query(TICK.replace("schedule tick", "schedule if not exists tick")) == {
        "message": "schedule `tick` exists"}


def test_a_block_that_fails_keeps_no_schedule(db):
    fails(lambda: db.batch([(TICK, None), ("get nosuch", None)]), 404)
    assert db.query("show schedules") == []


def test_the_off_switch_fires_nothing(db, clock):
    db.query(TICK)
    db.schedules.stop_firing()
    clock.advance(100_000)
    assert db.fire_due() == 0
    db.schedules.start_firing()
    assert db.fire_due() == 1 + 7  # 10 s to 30 s made up once, 40 s to 100 s on time


def test_state_kept_across_reopen_compaction_and_in_each_fire_record(tmp_path):
    path = str(tmp_path / "s.fenec")
    clock = TestClock()
    db = Database(path, clock=clock, sync="off")
    db.query(JOBS)
    db.query(TICK)
    clock.advance(30_000)
    assert db.fire_due() == 3
    db.query("pause schedule tick")
    db.close()
    fires = 0
    for payload in reopen(path)[1]:  # every fire is one record: its job and the state saying so
        ops = records.loads(payload)["o"]
        states = [op[2] for op in ops if op[0] == "h"]
        if states and states[-1]["fires"] > fires:
            fires = states[-1]["fires"]
            assert [op[0] for op in ops] == ["p", "h"], ops
        else:
            assert all(op[0] != "p" for op in ops) or not states, ops
    assert fires == 3
    db = Database(path, clock=clock, sync="off")
    row = db.query("show schedules")[0]
    assert row["paused"] is True and row["fires"] == 3
    db.query("resume schedule tick")
    db.compact()
    db.close()
    db = Database(path, clock=clock, sync="off")
    clock.advance(10_000)
    assert db.fire_due() == 1
    assert dues(db) == [SPEC_EPOCH_MS + 10_000 * k for k in (1, 2, 3, 4)]
    db.close()


def test_a_fire_cut_from_the_log_fires_again_once(tmp_path):
    """The file cut where the second fire's record begins (a crash before it was whole): neither
    its job nor its state is there, and that due time fires again, once."""
    import os

    path = str(tmp_path / "s.fenec")
    clock = TestClock()
    db = Database(path, clock=clock, sync="off")
    db.query(JOBS)
    db.query(TICK)
    clock.advance(10_000)
    assert db.fire_due() == 1
    cut = db.log._end  # where the next record begins
    clock.advance(10_000)
    assert db.fire_due() == 1
    db.close()
    os.truncate(path, cut + 5)  # a torn record: its head and nothing else
    db = Database(path, clock=clock, sync="off")
    assert dues(db) == [SPEC_EPOCH_MS + 10_000]
    assert db.fire_due() == 1
    assert dues(db) == [SPEC_EPOCH_MS + 10_000, SPEC_EPOCH_MS + 20_000]
    db.close()


def test_the_schedule_grant(db):
    policy = Policy.parse("jobs read, insert, update, delete for worker\njobs schedule for ops\n")
    worker = policy.scope_for({"sub": "w", "role": "worker"})
    ops = policy.scope_for({"sub": "o", "role": "ops"})
    for text in (TICK, "pause schedule tick"):
        with pytest.raises(FenecError) as ei:
            db.execute([(text, None)], scope=worker)
        assert ei.value.status == 403, ei.value
    assert db.execute([(TICK, None)], scope=ops).answers[0] == {"message": "schedule `tick` created"}
    for verb in ("pause", "resume", "fire"):
        db.execute([(f"{verb} schedule tick", None)], scope=ops)
    with pytest.raises(FenecError) as ei:
        db.execute([("drop schedule tick", None)], scope=worker)
    assert ei.value.status == 403
    assert [r["name"] for r in db.execute([("show schedules", None)], scope=worker).answers[0]] == ["tick"]
    db.execute([("drop schedule tick", None)], scope=ops)


def test_an_in_process_database_fires_from_its_own_thread():
    """On the wall clock, a database fires while it is open: a 1 s schedule's first fire comes
    without any call (waited for with a generous deadline, never timed)."""
    import time

    db = Database()
    db.query(JOBS)
    db.query("create schedule s every 1s put jobs {due: $1, run_at: now(), attempts: 0}")
    deadline = time.monotonic() + 30
    while not db.query("get jobs count")[0]["count"] and time.monotonic() < deadline:
        time.sleep(0.05)
    got = db.query("get jobs select due order id")
    db.close()
    assert got, "no fire within 30 s"
    assert len({r["due"] for r in got}) == len(got)


def test_a_put_of_documents_in_a_parameter_or_reading_claims_is_refused(db):
    fails(lambda: db.query("create schedule s every 1m put jobs $1"), 400, "$1")
    policy = Policy.parse("jobs schedule for ops\n")
    ops = policy.scope_for({"sub": "o", "role": "ops", "q": "x"})
    with pytest.raises(FenecError) as ei:
        db.execute([("create schedule s every 1m put jobs {payload: $jwt.q, attempts: 0}", None)], scope=ops)
    assert ei.value.status == 400
