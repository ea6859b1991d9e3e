"""The Python workers against `conformance/worker-contract.json`, checked mechanically: every option's
name and default, the methods, the events' types and fields; and the contract's lifecycle rules that
the Python workers once broke: a graceful stop bounded by `drain_timeout` while the server is down,
a refusal no retry mends ending `run`, and `enqueue`."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fenecdb
import pytest
from capture_transport import Answer, Capture, Sent, answer
from fenecdb import AsyncWorker, Client, Worker

CONTRACT = json.loads((Path(__file__).resolve().parents[3] / "conformance" / "worker-contract.json").read_text())
OPTIONS = {o["names"]["python"]: o for o in CONTRACT["options"]}
DEPRECATED = set(CONTRACT["deprecated"]["python"])


@pytest.mark.parametrize("cls", [Worker, AsyncWorker])
def test_the_options_are_the_contracts_names_and_defaults(cls: type) -> None:
    params = inspect.signature(cls).parameters
    positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = {n: p for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    assert positional == ["db", "queue"]  # the constructor takes a client and the queue's name
    assert set(keywords) == set(OPTIONS) | DEPRECATED  # a renamed, missing or extra option fails here
    for name, option in OPTIONS.items():
        default = keywords[name].default
        if "default_ms" in option:
            assert default == option["default_ms"] / 1000, name
        elif isinstance(option["default"], (int, bool)) and option["type"] in ("count", "boolean"):
            assert default == option["default"] and type(default) is type(option["default"]), name
        elif name == "backoff":
            assert [default(a) for a in (1, 2, 3)] == [1.0, 4.0, 9.0]  # attempts² seconds
        else:
            assert default is None, name  # name (random), heartbeat (lease / 3), on_event (none)
    assert OPTIONS["heartbeat"]["off"]["python"] == "heartbeat=0"
    assert cls(Client("http://fenec.test"), "jobs", heartbeat=0).heartbeat is False
    assert cls(Client("http://fenec.test"), "jobs").options.beat == 10.0
    assert cls(Client("http://fenec.test"), "jobs").name.startswith("w-")


@pytest.mark.parametrize("cls", [Worker, AsyncWorker])
def test_the_methods_are_the_contracts(cls: type) -> None:
    for name in CONTRACT["method_names"]["python"]:
        assert callable(getattr(cls, name, None)), name
    assert "hard" in inspect.signature(cls.stop).parameters
    assert list(inspect.signature(cls.enqueue).parameters) == ["self", "payload", "delay"]
    assert inspect.iscoroutinefunction(AsyncWorker.enqueue) and inspect.iscoroutinefunction(AsyncWorker.run)


def test_the_events_are_the_contracts_types_with_their_fields() -> None:
    fields = {f: spec.get("names", {}).get("python", spec["python"]) for f, spec in CONTRACT["events"]["fields"].items()}
    types = CONTRACT["events"]["type_names"]["python"]
    seen: list[dict[str, Any]] = []
    batch = [{"id": 1, "payload": {}, "attempts": 1}, {"id": 2, "payload": {}, "attempts": 1},
             {"id": 3, "payload": {}, "attempts": 9}]
    claims = iter([batch])
    answers = iter([ConnectionError("refused")])

    def reply(request: Sent) -> Answer:
        if b'returning *' in request.content:
            return answer(200, json=next(claims, []))
        if b'"del jobs' in request.content and (error := next(answers, None)) is not None:
            raise error
        return answer(200, json={"affected": 1})

    def handle(job: fenecdb.Job) -> None:
        if job.id == 2:
            worker.stop()
            raise RuntimeError("smtp timeout")

    worker = Worker(Capture(reply).client(), "jobs", name="w7", wait=0, retry_min=0.001, retry_max=0.002,
                    on_event=seen.append)
    worker.run(handle)
    assert {e["type"] for e in seen} <= set(types.values())
    assert [e["type"] for e in seen] == ["claimed", "dead", "start", "retry", "done", "start", "failed", "stopped"]
    for event in seen:
        wanted = {fields[f] for f in CONTRACT["events"]["types"][event["type"]]["fields"]} | {"type"}
        if event["type"] == "retry":
            wanted |= {fields[f] for f in CONTRACT["events"]["types"]["retry"]["job_fields_when_of_a_job"]}
        assert set(event) == wanted, event


def test_enqueue_writes_the_contracts_statement() -> None:
    capture = Capture(lambda request: answer(200, json={"affected": 1, "ids": [7]}))
    Worker(capture.client(), "mail").enqueue({"to": "ada@example.com"}, delay=1.5)
    (sent,) = capture.requests
    body = json.loads(sent.content)
    assert body["query"] == CONTRACT["enqueue"]["statement"].replace("<queue>", "mail")
    assert body["params"] == [{"to": "ada@example.com"}, 1500, 0]


@pytest.fixture
def db(server_url: str) -> Iterator[Client]:
    with Client(server_url) as client:
        yield client


def test_enqueue_makes_a_job_a_worker_claims(db: Client, queue: str) -> None:
    worker = Worker(db, queue, wait=0)
    assert worker.enqueue({"to": "ada@example.com"}) == 1
    worker.enqueue({"to": "later"}, delay=60)
    assert [(job.payload, job.attempts) for job in worker.claim(wait=0)] == [({"to": "ada@example.com"}, 1)]


def _outage(stop_on: str) -> tuple[Capture, threading.Event]:
    """A server that answers one claim of three jobs, then goes down once `down` is set."""
    down = threading.Event()
    batch = [{"id": n, "payload": {}, "attempts": 1} for n in (1, 2, 3)]
    claims = iter([batch])

    def reply(request: Sent) -> Answer:
        if down.is_set():
            raise ConnectionError("refused")
        if b'returning *' in request.content:
            return answer(200, json=next(claims, []))
        return answer(200, json={"affected": 1})

    return Capture(reply), down


def test_a_graceful_stop_with_the_server_down_ends_within_the_drain_timeout() -> None:
    capture, down = _outage("release")
    drain = 0.5

    def handle(job: fenecdb.Job) -> None:  # the first job: the server goes, then the stop comes
        down.set()
        worker.stop()

    worker = Worker(capture.client(), "jobs", batch=3, wait=0, drain_timeout=drain, retry_min=0.01, retry_max=0.05)
    started = time.monotonic()
    runner = threading.Thread(target=worker.run, args=(handle,), daemon=True)
    runner.start()
    runner.join(drain + 20)  # generous: the bound is drain + 1 s; the old code retried the give-back forever
    assert not runner.is_alive(), "run() did not return after a stop with the server down"
    assert time.monotonic() - started < drain + 10


def test_an_async_graceful_stop_with_the_server_down_ends_within_the_drain_timeout() -> None:
    capture, down = _outage("release")
    drain = 0.5

    async def handle(job: fenecdb.AsyncJob) -> None:
        down.set()
        worker.stop()

    worker = AsyncWorker(capture.async_client(), "jobs", batch=3, wait=0, drain_timeout=drain,
                         retry_min=0.01, retry_max=0.05)

    async def main() -> float:
        started = time.monotonic()
        await asyncio.wait_for(worker.run(handle), drain + 20)
        return time.monotonic() - started

    assert asyncio.run(main()) < drain + 10


@pytest.mark.parametrize("status", [403, 404, 401])
def test_a_refusal_no_retry_mends_ends_run(status: int) -> None:
    def reply(request: Sent) -> Answer:
        if b'returning *' in request.content:
            return answer(200, json=[{"id": 1, "payload": {}, "attempts": 1}])
        return answer(status, json={"error": "the document is outside what this token may write to `jobs`"})

    seen: list[dict[str, Any]] = []
    worker = Worker(Capture(reply).client(), "jobs", wait=0, on_event=seen.append)
    runner_error: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(lambda job: (_ for _ in ()).throw(RuntimeError("boom")))
        except fenecdb.FenecError as exc:
            runner_error.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(20)  # the old worker emitted an `error` event and claimed on forever
    assert not runner.is_alive() and [e.status for e in runner_error] == [status]  # type: ignore[attr-defined]
    assert {e["type"] for e in seen} <= set(CONTRACT["events"]["type_names"]["python"].values())
