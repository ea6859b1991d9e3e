"""The checks of faults.py on made-up events and rows: each one fails what it is there to catch.

No server and no worker here: a `Driver` is built but never started, and a `Run` is filled by hand.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fault_workers import Event, WorkerProcess
from faults import DEADLINE_S, READY_S, Driver, Job, Run


@pytest.fixture
def driver(tmp_path: Path) -> Driver:
    return Driver("test", tmp_path, tmp_path)


def make_run(group: dict[str, Any], events: list[Event], keep_done: bool = False) -> tuple[Run, Job]:
    job = Job("g-0", group, id=7)
    run = Run({"name": "t", "jobs": [group], "keep_done": keep_done}, "q", [job])
    for seq, e in enumerate(events):
        run.events.add(e.pop("w", 0), seq, e)
    return run, job


def ev(kind: str, t: float, owner: str = "w:1", job_id: int = 7, **more: Any) -> Event:
    return {"event": kind, "t": t, "owner": owner, "id": job_id, **more}


def by_id(run: Run) -> dict[int, list[Event]]:
    out: dict[int, list[Event]] = {}
    for e in run.events.snapshot():
        out.setdefault(e["id"], []).append(e)
    return out


def test_two_owners_running_one_job_at_once_fail(driver: Driver) -> None:
    run, _ = make_run({"group": "g", "expect": "done"},
                      [ev("start", 100, "a:1"), ev("start", 150, "b:1", w=1), ev("end", 200, "a:1"),
                       ev("end", 250, "b:1", w=1)])
    driver.check_overlap(run, by_id(run))
    assert len(run.failures) == 1 and "at once" in run.failures[0]


def test_one_owner_after_another_passes_and_an_unended_run_counts_as_running(driver: Driver) -> None:
    run, _ = make_run({"group": "g", "expect": "done"},
                      [ev("start", 100, "a:1"), ev("end", 200, "a:1"), ev("start", 300, "b:1", w=1),
                       ev("end", 400, "b:1", w=1)])
    driver.check_overlap(run, by_id(run))
    assert run.failures == []
    run, _ = make_run({"group": "g", "expect": "done"}, [ev("start", 100, "a:1"), ev("start", 5000, "b:1", w=1)])
    driver.check_overlap(run, by_id(run))
    assert len(run.failures) == 1


def test_running_at_once_is_counted_from_one_workers_line_order(driver: Driver) -> None:
    events = [ev("start", 1, job_id=1), ev("start", 2, job_id=2), ev("start", 3, job_id=3), ev("end", 4, job_id=1)]
    run, _ = make_run({"group": "g", "expect": "done"}, events)
    run.scenario["expect"] = {"max_running": 2, "min_peak_running": 2}
    driver.check_expect(run, run.events.snapshot())
    assert run.failures == ["a worker ran 3 jobs at once, more than 2"]
    run, _ = make_run({"group": "g", "expect": "done"}, [ev("start", 1), ev("end", 2), ev("start", 3), ev("end", 4)])
    run.scenario["expect"] = {"min_peak_running": 2}
    driver.check_expect(run, run.events.snapshot())
    assert len(run.failures) == 1 and "expected 2" in run.failures[0]


def test_a_done_job_is_acked_once_and_gone(driver: Driver) -> None:
    group = {"group": "g", "expect": "done", "starts": 1, "start_attempts": 1}
    run, job = make_run(group, [ev("start", 1, attempts=1), ev("end", 2), ev("done", 3)])
    driver.check_job(run, job, None, False, run.events.snapshot())
    assert run.failures == []
    row = {"id": 7, "owner": "w:1", "run_at": "2026-01-01T00:00:00.000Z", "attempts": 2, "error": None}
    run, job = make_run(group, [ev("start", 1, attempts=2), ev("start", 5, attempts=2), ev("done", 3), ev("done", 6)])
    driver.check_job(run, job, row, False, run.events.snapshot())
    assert len(run.failures) == 4  # started twice, at attempts 2, two `done`s, row still there


def test_kept_done_and_dead_letters_are_told_apart_by_done_at(driver: Driver) -> None:
    kept = {"id": 7, "owner": None, "run_at": None, "attempts": 1, "error": None, "done_at": "2026-01-01T00:00:00Z"}
    run, job = make_run({"group": "g", "expect": "done"}, [ev("done", 1)], keep_done=True)
    driver.check_job(run, job, kept, False, run.events.snapshot())
    assert run.failures == []
    run, job = make_run({"group": "g", "expect": "dead", "attempts": 1}, [ev("dead", 1)])
    driver.check_job(run, job, kept, False, run.events.snapshot())
    assert len(run.failures) == 2  # done_at set, and no error


def test_a_dead_letter_keeps_its_error_and_attempts(driver: Driver) -> None:
    dead = {"id": 7, "owner": None, "run_at": None, "attempts": 3, "error": "smtp timeout"}
    group = {"group": "g", "expect": "dead", "attempts": 3, "error": "smtp timeout", "starts": 3}
    starts = [ev("start", t) for t in (1, 2, 3)]
    run, job = make_run(group, [*starts, ev("dead", 4)])
    driver.check_job(run, job, dead, False, run.events.snapshot())
    assert run.failures == []
    run, job = make_run(group, starts)
    driver.check_job(run, job, {**dead, "error": "boom", "attempts": 2}, False, run.events.snapshot())
    assert len(run.failures) == 3  # wrong error, wrong attempts, no `dead` event


def test_a_job_given_back_is_ready_and_ownerless(driver: Driver) -> None:
    back = {"id": 7, "owner": None, "run_at": "2026-01-01T00:00:00.000Z", "attempts": 0, "error": None}
    group = {"group": "g", "expect": "released", "attempts": 0, "starts": 0}
    run, job = make_run(group, [])
    driver.check_job(run, job, back, True, [])
    assert run.failures == []
    for row, ready in (({**back, "owner": "w:1"}, True), (back, False), ({**back, "attempts": 1}, True)):
        run, job = make_run(group, [])
        driver.check_job(run, job, row, ready, [])
        assert len(run.failures) == 1, (row, ready)


def test_workers_that_all_exit_at_start_fail_the_scenario_at_once_with_their_stderr(tmp_path: Path) -> None:
    """A worker that dies before `ready` (a class missing from a half-built tree) fails its scenario as
    soon as every worker has exited, with what they wrote on stderr, not after READY_S or DEADLINE_S."""
    folder = tmp_path / "clients" / "test"
    folder.mkdir(parents=True)
    (folder / "fault-worker.sh").write_text("echo 'NoClassDefFoundError: fenecdb/Worker' >&2\nexit 1\n")
    driver = Driver("test", tmp_path, tmp_path)
    run = Run({"name": "t", "jobs": []}, "q", [])
    run.workers = [WorkerProcess(i, driver.script, {"FENEC_WORKER": f"w{i}"}, run.events, tmp_path) for i in (0, 1)]
    started = time.monotonic()
    assert not driver.await_ready(run)
    assert not driver.step(run, {"until": "event", "event": "done", "count": 1})
    # both waits end once the processes are gone: far inside even one of their deadlines
    assert time.monotonic() - started < min(READY_S, DEADLINE_S) / 2
    assert len(run.failures) == 2
    for failure in run.failures:
        assert failure.startswith("every worker exited before")
        assert failure.count("NoClassDefFoundError: fenecdb/Worker") == 2 and "exit 1" in failure


def test_a_worker_that_printed_ready_and_exited_still_counts_as_ready(tmp_path: Path) -> None:
    folder = tmp_path / "clients" / "test"
    folder.mkdir(parents=True)
    (folder / "fault-worker.sh").write_text('echo \'{"event": "ready", "t": 1}\'\n')
    driver = Driver("test", tmp_path, tmp_path)
    run = Run({"name": "t", "jobs": []}, "q", [])
    run.workers = [WorkerProcess(0, driver.script, {"FENEC_WORKER": "w0"}, run.events, tmp_path)]
    assert driver.await_ready(run) and run.failures == []


SIGINT_WORKER = """
import json, signal, time
ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
print(json.dumps({"event": "ready", "t": 1, "ignored": ignored}), flush=True)
time.sleep(120)
"""
SIGINT_DRIVER = """
import signal, sys
from pathlib import Path
from fault_workers import Events, WorkerProcess, deliver_sigint, wait_for
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job without job control starts it
if sys.argv[2] == "deliver":
    deliver_sigint()
tmp, events = Path(sys.argv[1]), Events()
worker = WorkerProcess(0, tmp / "fault-worker.sh", {"FENEC_WORKER": "w0"}, events, tmp)
assert wait_for(lambda: events.count("ready") == 1, 60)
ignored = events.snapshot()[0]["ignored"]
if not ignored:
    worker.signal(signal.SIGINT)
print(ignored, worker.wait(60) if not ignored else None)
worker.kill()
"""


@pytest.mark.parametrize("deliver", [True, False])
def test_a_worker_gets_sigint_though_the_driver_inherited_it_ignored(tmp_path: Path, deliver: bool) -> None:
    """A driver started with SIGINT ignored: after `deliver_sigint` its workers do not inherit that, and the
    hard stop's SIGINT ends them; without it they do (the second case: what a JVM worker never overrides)."""
    (tmp_path / "fault-worker.sh").write_text(f"exec {sys.executable} -c '{SIGINT_WORKER}'\n")
    here = Path(__file__).resolve().parent
    out = subprocess.run([sys.executable, "-c", SIGINT_DRIVER, str(tmp_path), "deliver" if deliver else "not"],
                         cwd=here, env={**os.environ, "PYTHONPATH": str(here)}, capture_output=True, text=True,
                         timeout=180, check=True)
    assert out.stdout.split() == (["False", str(-signal.SIGINT)] if deliver else ["True", "None"]), out


class FakeWorker:
    """What the checks read of a worker process: its index and name."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = f"w{index}"


def failover_run(events: list[Event], produced: list[int]) -> Run:
    from fault_layer import ServerProcess
    run, _ = make_run({"group": "g", "expect": "done"}, events)
    for port in (1001, 1002):
        server = ServerProcess(Path("fenec-server"), Path("x.fenec"))
        server.port = port
        run.pair.append(server)
    run.workers = [FakeWorker(0)]  # type: ignore[list-item]
    run.produced = produced
    run.new_primary = run.pair[1].url
    run.last_fault_ms = 250
    run.stopping_ms = 10_000
    return run


def test_the_failover_checks_pass_a_clean_failover(driver: Driver) -> None:
    run = failover_run([ev("start", 100), ev("done", 200), ev("primary", 300, url="http://127.0.0.1:1002"),
                        ev("start", 400, job_id=8), ev("done", 500, job_id=8)], produced=[8])
    driver.check_failover(run, {}, by_id(run))
    assert run.failures == []


def test_the_failover_checks_catch_a_lost_job_a_rerun_after_ack_and_no_primary_event(driver: Driver) -> None:
    run = failover_run([ev("start", 100), ev("done", 200), ev("start", 300, "w:2"),
                        ev("primary", 300, url="http://127.0.0.1:1001")], produced=[8, 9])
    driver.check_failover(run, {9: {"id": 9}}, by_id(run))
    text = "\n".join(run.failures)
    assert "id 8 (its put answered) was never done" in text
    assert "id 9 (its put answered) is still there" in text
    assert "job id 7 started again after its ack" in text
    assert "its last `primary` event after the fault does not name the new primary http://127.0.0.1:1002" in text


def test_the_failover_checks_want_the_primary_told_after_the_fault_and_run_never_ended(driver: Driver) -> None:
    """A `primary` naming the new primary before the fault is not following it, nor is one followed by
    another; a `stopped` before the driver stopped the worker is a `run` that ended on its own."""
    run = failover_run([ev("primary", 200, url="http://127.0.0.1:1002"), ev("stopped", 9_000)], produced=[])
    driver.check_failover(run, {}, by_id(run))
    assert len(run.failures) == 2
    assert "after the fault" in run.failures[0] and "ended (`stopped`) before" in run.failures[1]
    run = failover_run([ev("primary", 300, url="http://127.0.0.1:1002"), ev("primary", 400, url="http://127.0.0.1:1003"),
                        ev("stopped", 10_000)], produced=[])
    driver.check_failover(run, {}, by_id(run))
    assert len(run.failures) == 1 and "1003" in run.failures[0]  # it ended on another than the new primary
    run = failover_run([ev("primary", 300, url="http://127.0.0.1:1002/"), ev("stopped", 10_000)], produced=[])
    driver.check_failover(run, {}, by_id(run))
    assert run.failures == []


def test_the_failover_checks_want_after_failover_puts_answered_by_the_new_primary(driver: Driver) -> None:
    run = failover_run([ev("primary", 300, url="http://127.0.0.1:1002")], produced=[])
    run.scenario["produce"] = {"count": 5, "every_ms": 50, "after_failover": 3}
    run.produced_new = 2
    driver.check_failover(run, {}, by_id(run))
    assert run.failures == ["2 puts answered by the new primary, the scenario asks for 3"]
    run.failures, run.produced_new = [], 3
    driver.check_failover(run, {}, by_id(run))
    assert run.failures == []
