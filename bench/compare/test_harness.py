"""A round's phases and rows, run on a stand-in system that starts no server: `python -m pytest bench/compare -q`."""

from __future__ import annotations

from typing import Any

import pytest

from . import harness, loadgen


class Stand:
    """A system with both kinds of replica whose every call is written down."""

    key, name, replicas = "stand", "Stand", ("sync", "async")

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, wd: str, durable: bool, replica: str | None = None) -> None:
        self.calls.append(("start", durable, replica))

    def stop(self) -> None:
        self.calls.append(("stop",))

    def reset(self) -> None:
        pass

    def load(self, n: int, ready: bool) -> None:
        self.calls.append(("load", n, ready))

    def replica_level(self) -> None:
        self.calls.append(("level",))

    def session(self) -> Any:
        class Session:
            def close(self) -> None:
                pass
        return Session()


@pytest.fixture
def fake_load(monkeypatch: pytest.MonkeyPatch) -> None:
    latency = {"p50": 1.0, "p99": 2.0, "claims_per_job": 1.0}
    monkeypatch.setattr(loadgen, "wake_latency", lambda system, n, poll: latency)
    monkeypatch.setattr(loadgen, "claim_latency", lambda s, n: latency)
    monkeypatch.setattr(loadgen, "few_ready_latency", lambda s, n: latency)
    monkeypatch.setattr(loadgen, "run_workers",
                        lambda system, kind, w, seconds: {"rate": 100.0 * w, "done": 7 * w, "dry": False})
    monkeypatch.setattr(harness, "host_check", lambda: 1.0)


@pytest.mark.parametrize("parts", [harness.PARTS, ("async",), ("claims", "async"), ("durable", "sync")])
def test_a_round_makes_its_phases_and_records_its_rows(fake_load: None, tmp_path: Any, parts: tuple) -> None:
    system = Stand()
    recorded: dict[str, float] = {}
    phases: list[str] = []
    dirs = harness.Workdirs(str(tmp_path))
    harness.one_round(system, harness.QUICK, dirs, recorded.__setitem__, phases.append, print, parts)
    assert len(phases) == harness.phases_per_round(parts)
    assert set(recorded) == {r.key for r in harness.rows(harness.QUICK.jobs, parts)}
    assert [c[0] for c in system.calls if c[0] in ("start", "stop")] == ["start", "stop"] * len(
        [c for c in system.calls if c[0] == "start"])  # every server started is stopped before the next


def test_each_window_finds_the_queue_topped_up_by_what_went_before(fake_load: None, tmp_path: Any) -> None:
    system = Stand()
    harness.one_round(system, harness.QUICK, harness.Workdirs(str(tmp_path)), lambda row, v: None,
                      lambda what: None, print, ("claims", "async"))
    loads = [c[1] for c in system.calls if c[0] == "load" and c[2]]
    jobs, claimed = harness.QUICK.jobs, harness.QUICK.claims * 10
    # claims: the full queue, the timed claims' jobs, then each window's; async: the same from a full queue
    assert loads == [jobs, claimed, 7, 28, jobs, 7, 28]
    assert system.calls.index(("level",)) > system.calls.index(("start", False, "async"))


def test_a_before_checkout_without_a_build_is_skipped_with_how_to_build_it(tmp_path: Any) -> None:
    present, info = harness.discover(["fenecdb"], before=str(tmp_path))
    assert list(present) == ["fenecdb"]  # the run goes on with this checkout's build alone
    assert info["before"]["name"] == "FenecDB before"
    assert info["before"]["skipped"] == f"{tmp_path}/.venv/bin/fenec-server not found: run `make venv` in {tmp_path}"


def test_a_before_checkout_runs_its_own_server_beside_this_ones(tmp_path: Any) -> None:
    exe = tmp_path / ".venv" / "bin" / "fenec-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    present, info = harness.discover(["fenecdb"], before=str(tmp_path))
    assert list(present) == ["fenecdb", "before"]  # alternated in every round with the others
    assert present["before"].server == [str(exe)]
    assert present["fenecdb"].server != [str(exe)]
    assert info["before"]["durable"] == "--sync always"
