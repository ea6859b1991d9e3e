"""The Python SDK's worker under the docs' own policy (worker-policy.json; conformance/README.md,
"The worker under the docs' policy"): the real `Worker`, with a worker token, against the server at
FENEC_POLICY_URL that `run.py` started with that policy. Answers (passed, failed): one case."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fenecdb

DEADLINE_S = 60.0  # generous: conditions are waited for, never assumed from a sleep


def policy_path() -> Path:
    return Path(os.environ.get("FENEC_POLICY_SCENARIO") or Path(__file__).resolve().parent / "worker-policy.json")


def _until(what: str, done: Callable[[], bool]) -> None:
    end = time.monotonic() + DEADLINE_S
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"not within {DEADLINE_S:.0f} s: {what}")
        time.sleep(0.05)


def run_case(spec: dict[str, Any], url: str, tokens: dict[str, str], root: str) -> None:
    admin = fenecdb.Client(url, token=root)
    producer = fenecdb.Client(url, token=tokens["producer"])
    mine = fenecdb.Client(url, token=tokens["worker"])
    other = fenecdb.Client(url, token=tokens["other"])
    with contextlib.suppress(fenecdb.NotFoundError):  # each SDK's runner starts from a fresh queue
        admin.query("drop collection jobs")
    admin.query(spec["schema"])
    w = spec["worker"]
    events: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_event(event: dict[str, Any]) -> None:
        with lock:
            events.append(event)

    worker = fenecdb.Worker(mine, "jobs", name=w["name"], batch=w["batch"], concurrency=w["concurrency"],
                            lease=w["lease_ms"] / 1000, wait=w["wait_ms"] / 1000, max_attempts=w["max_attempts"],
                            backoff=lambda attempts: w["backoff_ms"] / 1000, drain_timeout=w["drain_timeout_ms"] / 1000,
                            on_event=on_event)
    enqueuer = fenecdb.Worker(producer, "jobs")  # a producer's token enqueues; it never runs
    by_key: dict[str, dict[str, Any]] = {j["key"]: j for j in spec["jobs"]}
    for job in spec["jobs"]:
        if job.get("by") == "server token":
            admin.query("put jobs {queue: $1, payload: $2, run_at: now(), attempts: $3}",
                        [spec["tokens"]["worker"]["queue"], {"key": job["key"]}, job["attempts"]])
        else:
            assert enqueuer.enqueue({"key": job["key"]}) == 1
    starts: Counter[str] = Counter()
    stopping = threading.Event()
    checked = threading.Event()

    def handle(job: fenecdb.Job) -> None:
        key = job.payload["key"]
        with lock:
            starts[key] += 1
        # the scenario's jobs by their behaviour; the stop's `block-<n>` jobs wait for the stop; any
        # other (the job put to show another queue's token refused) is acked at once
        kind = by_key[key]["behaviour"] if key in by_key else "block" if key.startswith("block") else "held"
        if kind == "fail-always" or (kind == "fail-once" and job.attempts == 1):
            raise RuntimeError(key)
        if kind == "slow":
            time.sleep(by_key[key]["hold_ms"] / 1000)  # past the lease: only the heartbeat keeps it
        if kind == "block":
            stopping.wait(DEADLINE_S)
        if kind == "held":  # held (leased, its owner set) while another queue's token tries it, then acked
            checked.wait(DEADLINE_S)

    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(handle)
        except BaseException as exc:  # the case fails with it, below
            failure.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()

    def rows() -> dict[str, dict[str, Any]]:
        return {r["payload"]["key"]: r for r in admin.query("get jobs")}

    settled = list(by_key)
    _until("every job settled", lambda: bool(failure) or all(
        (k not in (now := rows())) if by_key[k]["expect"]["fate"] == "acked"
        else (k in now and now[k]["run_at"] is None) for k in settled))
    assert not failure, f"run ended: {failure[0]!r}"
    now = rows()
    for key, job in by_key.items():
        exp = job["expect"]
        assert starts[key] == exp["starts"], f"{key}: started {starts[key]} times, expected {exp['starts']}"
        if exp["fate"] == "dead":
            assert now[key]["error"] == exp["error"] and now[key]["attempts"] == exp["attempts"], now[key]
            assert now[key]["owner"] is None, now[key]
    # the other queue's token: a mail job, held by the worker, is not there for it (nor is a ready one)
    assert enqueuer.enqueue({"key": "left"}) == 1
    _until("the left job started", lambda: starts["left"] == 1)
    left = rows()["left"]
    foreign = fenecdb.Worker(other, "jobs", wait=0)
    assert foreign.claim(wait=0) == [], "a worker of another queue claimed a mail job"
    for statement in ("set jobs {run_at: now() + 60000} where id = $1 and owner = $2 require 1",
                      "del jobs where id = $1 and owner = $2 require 1"):
        try:
            other.query(statement, [left["id"], left["owner"] or "w-7:1"])
        except fenecdb.UnmetError:
            pass
        else:
            raise AssertionError(f"a worker of another queue wrote a mail job: {statement}")
    checked.set()
    _until("the left job acked", lambda: "left" not in rows())
    # the stop: two block jobs run, the third is given back
    # one put, so that one claim takes them all (a claim held at the server wakes at the first job)
    producer.query("put jobs $1", [[{"payload": {"key": f"block-{n}"}, "run_at": 0, "attempts": 0}
                                     for n in range(spec["stop"]["jobs"])]])
    _until("two block jobs running", lambda: sum(v for k, v in starts.items() if k.startswith("block")) == 2)
    worker.stop()
    stopping.set()
    runner.join(DEADLINE_S)
    assert not runner.is_alive() and not failure, failure
    now = rows()
    back = [r for k, r in now.items() if k.startswith("block")]
    exp = spec["stop"]["expect"]
    assert len(back) == exp["given_back"], now
    assert all(r["owner"] is None and r["attempts"] == exp["given_back_row"]["attempts"] and r["run_at"] is not None
               for r in back), back
    types = Counter(e["type"] for e in events)
    assert types["released"] == exp["given_back"] and types["lost"] == 0 and types["stopped"] == 1, types
    contract = json.loads((Path(__file__).resolve().parent / "worker-contract.json").read_text())
    assert set(types) <= set(contract["events"]["type_names"]["python"].values()), types


def run_file(path: Path, out: Callable[[str], None] = print) -> tuple[int, int]:
    url = (os.environ.get("FENEC_POLICY_URL") or "").rstrip("/")
    name = "worker under the docs' policy"
    if not url:
        if os.environ.get("FENEC_REQUIRE_SERVER") == "1":
            out(f"FAIL {name}: FENEC_REQUIRE_SERVER=1 but FENEC_POLICY_URL is not set")
            return 0, 1
        out(f"skipped {name}: FENEC_POLICY_URL not set")
        return 0, 0
    spec = json.loads(path.read_text())
    tokens = json.loads(os.environ["FENEC_POLICY_TOKENS"])
    try:
        run_case(spec, url, tokens, os.environ["FENEC_POLICY_ROOT_TOKEN"])
    except Exception as exc:
        out(f"FAIL {name}: {exc!r}")
        return 0, 1
    out(f"ok {name}")
    return 1, 0
