"""Client and AsyncClient over a mock transport: what goes over the wire and what an answer
becomes (clients.md §1, §3.2, §3.8). No server needed."""

from __future__ import annotations

import asyncio
import json
import socket

import fenecdb
import pytest
from capture_transport import Capture, Sent, answer
from fenecdb import (
    AsyncClient,
    BadRequestError,
    BuilderError,
    DuplicateError,
    FenecError,
    ForbiddenError,
    KeyReusedError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
    UnmetError,
    expr,
    inc,
    raw,
)
from fenecdb._http11 import Answer


def claim_chain(db: fenecdb.Client) -> fenecdb.Query:
    return db.collection("jobs").where(raw("run_at <= now()")).order("run_at").limit(10)


CLAIM_PATCH = {"owner": "w1:1", "run_at": expr("now() + ?", 30000), "attempts": inc(1)}


def test_a_statement_goes_whole_as_json_with_its_headers() -> None:
    cap = Capture(lambda r: answer(200, json=[{"id": 1, "attempts": 1}]))
    db = cap.client(token="s3cret")
    rows = claim_chain(db).update(CLAIM_PATCH, returning=True, wait=20)
    assert rows == [{"id": 1, "attempts": 1}] and isinstance(rows, fenecdb.Rows)
    (req,) = cap.requests
    assert req.method == "POST" and req.path == "/query"
    assert req.headers["content-type"] == "application/json"
    assert req.headers["content-length"] == str(len(req.content))
    assert "transfer-encoding" not in req.headers
    assert req.headers["authorization"] == "Bearer s3cret"
    assert req.headers["fenec-wait"] == "20000"
    assert "idempotency-key" not in req.headers
    assert json.loads(req.content) == {
        "query": "set jobs {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} "
                 "where run_at <= now() order run_at asc limit 10 returning *",
        "params": ["w1:1", 30000, 1]}


def test_a_held_request_gets_the_timeout_plus_its_wait() -> None:
    cap = Capture(lambda r: answer(200, json=[]))
    db = cap.client(timeout=5.0)
    claim_chain(db).update(CLAIM_PATCH, returning=True, wait=25.5)
    db.collection("jobs").where("id", 1).delete()
    held, plain = (r.timeout for r in cap.requests)
    assert held == pytest.approx(30.5)  # the connect, each send and each read of the request
    assert plain == pytest.approx(5.0)
    assert cap.requests[0].headers["fenec-wait"] == "25500"
    assert "fenec-wait" not in cap.requests[1].headers


@pytest.mark.parametrize("wait", [-1, "5", True, float("nan"), float("inf")])
def test_a_bad_wait_is_refused_before_sending(wait: object) -> None:
    cap = Capture()
    with pytest.raises(BuilderError, match="wait is seconds, a number from 0"):
        cap.client().collection("jobs").where("id", 1).delete(wait=wait)  # type: ignore[arg-type]
    assert cap.requests == []


def test_endpoints_answer_counts_rows_first_and_count() -> None:
    answers = iter([{"affected": 2}, [{"count": 7}], [{"id": 3}], [], {"affected": 1}, [{"id": 9}]])
    cap = Capture(lambda r: answer(200, json=next(answers)))
    jobs = cap.client().collection("jobs")
    assert jobs.insert([{"a": 1}, {"a": 2}]) == 2
    assert jobs.where("owner", None).count() == 7
    assert jobs.where("id", 3).first() == {"id": 3}
    assert jobs.where("id", 4).first() is None
    assert jobs.where("id", 3).update({"owner": None}) == 1
    assert jobs.where("id", 9).delete(returning=["id"]) == [{"id": 9}]
    sent = [b["query"] for b in cap.bodies]
    assert sent[2] == "get jobs where id = $1 limit 1"
    assert sent[1] == "get jobs where owner is null count"


def test_inserting_no_documents_sends_nothing_and_answers_zero() -> None:
    cap = Capture()
    assert cap.client().collection("jobs").insert([]) == 0
    assert cap.requests == []


@pytest.mark.parametrize(("status", "cls", "code"), [
    (400, BadRequestError, "bad_request"), (401, UnauthorizedError, "unauthorized"),
    (403, ForbiddenError, "forbidden"), (404, NotFoundError, "not_found"), (409, DuplicateError, "conflict"),
    (412, UnmetError, "unmet"), (422, KeyReusedError, "key_reused"), (503, UnavailableError, "unavailable"),
    (504, UnavailableError, "timeout"), (507, UnavailableError, "storage_full"), (500, FenecError, "http_500"),
    (418, FenecError, "http_418"),
])
def test_every_status_has_its_error(status: int, cls: type[FenecError], code: str) -> None:
    cap = Capture(lambda r: answer(status, json={"error": f"refused with {status}"}))
    with pytest.raises(FenecError) as e:
        cap.client().query("get jobs")
    assert type(e.value) is cls and e.value.status == status and e.value.code == code
    assert str(e.value) == f"refused with {status}" and e.value.at is None


def test_an_unmet_require_is_412_and_unmet() -> None:
    cap = Capture(lambda r: answer(412, json={"error": "`del jobs` wrote 0 rows, and requires 1"}))
    with pytest.raises(UnmetError) as e:
        cap.client().collection("jobs").where("id", 41).where("owner", "w9:17").delete(require=1)
    assert e.value.status == 412 and str(e.value) == "`del jobs` wrote 0 rows, and requires 1"


def test_a_batch_goes_as_ndjson_and_a_refusal_names_its_statement() -> None:
    cap = Capture(lambda r: answer(412, json={"error": "unmet: `del jobs` wrote 0 rows, and requires 1",
                                                      "at": 1, "completed": 0}))
    db = cap.client()
    jobs = db.collection("jobs")
    with pytest.raises(UnmetError) as e:
        db.batch([jobs.where("id", 1).where("owner", "w").to_delete(require=1),
                  jobs.where("id", 2).where("owner", "w").to_delete(require=1)], idempotency_key="ack-1")
    assert (e.value.at, e.value.completed) == (1, 0)
    (req,) = cap.requests
    assert req.path == "/batch" and req.headers["content-type"] == "application/x-ndjson"
    assert req.headers["idempotency-key"] == "ack-1"
    lines = req.content.decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"query": "del jobs where id = $1 and owner = $2 require 1", "params": [1, "w"]},
        {"query": "del jobs where id = $1 and owner = $2 require 1", "params": [2, "w"]}]


def test_seq_is_the_highest_seen_and_replayed_follows_the_last_write() -> None:
    answers = iter([(7, False), (5, True), (9, False)])

    def reply(r: Sent) -> Answer:
        seq, replayed = next(answers)
        headers = {"Fenec-Seq": str(seq)}
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        return answer(200, json={"affected": 1}, headers=headers)

    db = Capture(reply).client()
    keyed = db.with_idempotency_key("k-1")
    db.query("put jobs {a: 1}")
    assert (db.seq, db.replayed) == (7, False)
    keyed.query("put jobs {a: 1}")
    assert (db.seq, db.replayed, keyed.seq, keyed.replayed) == (7, True, 7, True)
    db.query("put jobs {a: 2}")
    assert (keyed.seq, keyed.replayed) == (9, False)


def test_a_keyed_copy_sends_its_key_on_writes_only() -> None:
    cap = Capture(lambda r: answer(200, json=[] if b'"get' in r.content else {"affected": 1}))
    db = cap.client()
    keyed = db.with_idempotency_key("claim-42")
    keyed.collection("jobs").where("id", 1).update({"owner": "w"})
    keyed.collection("jobs").rows()
    db.collection("jobs").where("id", 1).delete()
    db.query("del jobs where id = 1", idempotency_key="raw-1")
    keys = [r.headers.get("idempotency-key") for r in cap.requests]
    assert keys == ["claim-42", None, None, "raw-1"]


@pytest.mark.parametrize("key", ["", None, 5])
def test_an_empty_key_is_refused(key: object) -> None:
    with pytest.raises(ValueError, match="an idempotency key is a text, not empty"):
        Capture().client().with_idempotency_key(key)  # type: ignore[arg-type]


def test_a_network_failure_is_an_os_error_and_a_timeout_a_timeout_error() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: a connect is refused
        with pytest.raises(OSError) as e:
            fenecdb.Client(f"http://127.0.0.1:{port}").query("get jobs")
        assert not isinstance(e.value, FenecError) and isinstance(e.value, ConnectionError)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts (the kernel does), never answers
        port = silent.getsockname()[1]
        with pytest.raises(TimeoutError), fenecdb.Client(f"http://127.0.0.1:{port}", timeout=0.2) as db:
            db.query("get jobs")

        async def main() -> None:
            async with AsyncClient(f"http://127.0.0.1:{port}", timeout=0.2) as db:
                await db.query("get jobs")

        with pytest.raises(TimeoutError):
            asyncio.run(main())


def test_the_async_client_makes_the_same_requests() -> None:
    cap = Capture(lambda r: answer(200, json=[{"id": 1}], headers={"Fenec-Seq": "3"}))

    async def main() -> tuple[object, int]:
        async with cap.async_client(timeout=2) as db:
            rows = await db.collection("jobs").where(raw("run_at <= now()")).order("run_at").limit(10) \
                .update(CLAIM_PATCH, returning=True, wait=1)
            return rows, db.seq

    rows, seq = asyncio.run(main())
    assert rows == [{"id": 1}] and seq == 3
    (req,) = cap.requests
    assert req.headers["fenec-wait"] == "1000" and req.timeout == pytest.approx(3.0)


def test_cancelling_an_async_claim_abandons_the_request() -> None:
    started = asyncio.Event()

    async def hold(request: Sent) -> Answer:
        started.set()
        await asyncio.sleep(30)
        return answer(200, json=[])

    async def main() -> None:
        async with Capture(hold).async_client() as db:
            task = asyncio.ensure_future(db.collection("jobs").where(raw("run_at <= now()")).order("run_at")
                                         .limit(1).update(CLAIM_PATCH, returning=True, wait=30))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(asyncio.wait_for(main(), 5))
