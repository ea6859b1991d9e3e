"""A client given a replica, or a list of servers (docs/clients.md, "Replicas and failover"): what each
answer makes it do, over fake answers. No server needed; the live cases are conformance/python_replicas.py."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

import fenecdb
import pytest
from capture_transport import Capture, Sent, answer
from fenecdb import ForbiddenError, UnavailableError, expr, inc, raw
from fenecdb._http11 import Answer

P, R, S = "http://p.test:8080", "http://r.test:8080", "http://s.test:8080"
CONTRACT = json.loads((Path(__file__).resolve().parents[3] / "conformance" / "worker-contract.json").read_text())
REFUSAL = {"error": f"this server is a replica: send writes and claims to its primary, {P}"}


def by_server(answers: Mapping[str, Callable[[Sent], Answer]]) -> Capture:
    return Capture(lambda sent: answers[sent.server](sent))


def replica_of(primary: str) -> Callable[[Sent], Answer]:
    """A replica: reads answered (an empty list), anything else refused 403 naming `primary`."""
    def reply(sent: Sent) -> Answer:
        if b'"query":"get ' in sent.content:
            return answer(200, json=[], headers={"Fenec-Primary": primary})
        return answer(403, json=REFUSAL, headers={"Fenec-Primary": primary})
    return reply


def refused(sent: Sent) -> Answer:
    raise ConnectionRefusedError(111, "Connection refused")


def ok(sent: Sent) -> Answer:
    return answer(200, json={"affected": 1}, headers={"Fenec-Seq": "7"})


def claim(db: fenecdb.Client, wait: float | None = 5) -> object:
    chain = db.collection("jobs").where(raw("run_at <= now()")).order("run_at").limit(10)
    return chain.update({"owner": "w:1", "run_at": expr("now() + ?", 30000), "attempts": inc(1)},
                        returning=True, wait=wait)


def test_a_replicas_refusal_naming_its_primary_sends_the_same_request_there_at_once() -> None:
    cap = by_server({R: replica_of(P), P: lambda sent: answer(200, json=[{"id": 1}])})
    db = fenecdb.Client(R, transport=cap)
    assert claim(db) == [{"id": 1}]
    first, second = cap.requests
    assert (first.server, second.server) == (R, P)
    assert first.content == second.content and second.headers["fenec-wait"] == "5000"  # the held claim, unparked
    assert db.url == P and db.servers == [R, P]
    db.collection("jobs").insert({"payload": 1})
    assert [r.server for r in cap.requests[2:]] == [P]  # the primary is kept: the next call goes straight there


def test_a_403_without_the_header_is_an_ordinary_403() -> None:
    cap = by_server({R: lambda sent: answer(403, json={"error": "outside the token's rules"})})
    db = fenecdb.Client([R, P], transport=cap)
    with pytest.raises(ForbiddenError, match="token's rules"):
        db.query("put jobs {payload: 1}")
    assert [r.server for r in cap.requests] == [R] and db.url == R


def test_refusals_are_followed_two_hops_at_most() -> None:
    cap = by_server({R: replica_of(S), S: replica_of(R)})
    db = fenecdb.Client(R, transport=cap)
    with pytest.raises(ForbiddenError) as err:
        db.query("put jobs {payload: 1}")
    assert err.value.status == 403
    assert [r.server for r in cap.requests] == [R, S, R]


def test_a_refused_connection_moves_to_the_next_server_of_the_list() -> None:
    cap = by_server({P: refused, R: ok})
    db = fenecdb.Client([P, R], transport=cap)
    assert db.query("put jobs {payload: 1}") == {"affected": 1}
    assert [r.server for r in cap.requests] == [P, R] and db.url == R
    db.query("put jobs {payload: 2}")
    assert [r.server for r in cap.requests] == [P, R, R]


def test_the_list_goes_round_and_the_call_fails_once_every_server_failed() -> None:
    cap = by_server({P: refused, R: refused, S: ok})
    db = fenecdb.Client([R, S, P], transport=cap)
    db.query("put jobs {payload: 1}")
    assert [r.server for r in cap.requests] == [R, S] and db.url == S
    cap.reply = lambda sent: refused(sent)
    with pytest.raises(ConnectionRefusedError):
        db.query("put jobs {payload: 2}")
    assert [r.server for r in cap.requests[2:]] == [S, P, R]  # each once, from the primary on


def test_a_request_sent_whose_answer_was_lost_is_not_sent_elsewhere() -> None:
    def lost(sent: Sent) -> Answer:
        raise ConnectionResetError(104, "Connection reset by peer")
    cap = by_server({P: lost, R: ok})
    db = fenecdb.Client([P, R], transport=cap)
    with pytest.raises(ConnectionResetError):
        db.query("put jobs {payload: 1}")
    assert [r.server for r in cap.requests] == [P] and db.url == P


def test_a_refusal_naming_a_server_this_call_could_not_reach_fails_the_call_as_unreachable() -> None:
    cap = by_server({P: refused, R: replica_of(P)})  # the primary killed, its replica not promoted yet
    db = fenecdb.Client([P, R], transport=cap)
    with pytest.raises(ConnectionRefusedError):
        claim(db)
    assert [r.server for r in cap.requests] == [P, R]


def test_a_503_with_retry_after_sends_the_next_call_to_the_next_server() -> None:
    busy: dict[str, Callable[[Sent], Answer]] = {P: lambda sent: answer(503, json={"error": "no primary"}, headers={"Retry-After": "1"}), R: ok}
    cap = by_server(busy)
    db = fenecdb.Client([P, R], transport=cap)
    with pytest.raises(UnavailableError):
        db.query("put jobs {payload: 1}")
    db.query("put jobs {payload: 2}")
    assert [r.server for r in cap.requests] == [P, R]
    single = fenecdb.Client(P, transport=by_server(busy))
    with pytest.raises(UnavailableError):
        single.query("put jobs {payload: 1}")
    assert single.url == P


def test_reads_where_told_go_to_a_replica_after_the_last_write_seen() -> None:
    cap = by_server({P: ok, R: lambda sent: answer(200, json=[{"id": 1}])})
    db = fenecdb.Client([P, R], read_from="replica", transport=cap)
    db.collection("jobs").where("id", 1).rows()
    assert cap.requests[-1].server == R and "fenec-after" not in cap.requests[-1].headers  # no write seen yet
    db.collection("jobs").insert({"payload": 1})
    assert cap.requests[-1].server == P
    assert db.collection("jobs").where("id", 1).first() == {"id": 1}
    assert cap.requests[-1].server == R and cap.requests[-1].headers["fenec-after"] == "7"
    db.query("get jobs")  # a text goes to the primary unless the call says it reads
    assert cap.requests[-1].server == P
    db.query("get jobs", read=True)
    assert cap.requests[-1].server == R


def test_a_replica_read_that_times_out_or_cannot_be_reached_goes_to_the_primary() -> None:
    behind: dict[str, Callable[[Sent], Answer]] = {P: lambda sent: answer(200, json=[{"id": 1, "at": "primary"}], headers={"Fenec-Seq": "9"}),
              R: lambda sent: answer(504, json={"error": "change 9 has not reached this server", "seq": 3})}
    cap = by_server(behind)
    db = fenecdb.Client([P, R], read_from="replica", transport=cap)
    db.query("put jobs {payload: 1}")
    assert db.collection("jobs").rows() == [{"id": 1, "at": "primary"}]
    assert [r.server for r in cap.requests] == [P, R, P] and db.url == P
    behind[R] = refused
    db.collection("jobs").rows()
    assert [r.server for r in cap.requests[3:]] == [R, P] and db.url == P  # an unreachable replica moves no primary


def test_read_from_is_primary_or_replica() -> None:
    with pytest.raises(ValueError, match="read_from"):
        fenecdb.Client(P, read_from="nearest")
    with pytest.raises(ValueError, match="list"):
        fenecdb.Client([])
    with pytest.raises(ValueError):
        fenecdb.Client([P, "ftp://x"])


def test_a_real_refused_connect_is_tried_on_the_next_server_and_then_fails_as_before() -> None:
    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()  # nothing listens there now: a connect is refused
    db = fenecdb.Client([f"http://127.0.0.1:{p}" for p in ports], timeout=5)
    with pytest.raises(ConnectionError):
        db.query("get jobs")
    assert db.url == f"http://127.0.0.1:{ports[0]}"  # round once: back where it started


def test_the_async_client_follows_the_same_rules() -> None:
    async def main() -> list[str]:
        cap = by_server({P: refused, R: replica_of(S), S: lambda sent: answer(200, json=[])})
        db = fenecdb.AsyncClient([P, R], transport=cap)
        chain = db.collection("jobs").where(raw("run_at <= now()")).limit(1)
        assert await chain.update({"owner": "w:1"}, returning=True, wait=1) == []
        return [r.server for r in cap.requests] + [db.url]
    assert asyncio.run(main()) == [P, R, S, S]


def test_a_worker_tells_a_change_of_primary_as_a_primary_event() -> None:
    events: list[dict[str, object]] = []
    cap = by_server({R: replica_of(P), P: lambda sent: answer(200, json=[])})
    worker = fenecdb.Worker(fenecdb.Client(R, transport=cap), "jobs", name="w", on_event=events.append)
    assert worker.claim(wait=0) == []
    assert [r.server for r in cap.requests] == [R, P]
    assert [e for e in events if e["type"] == "primary"] == [{"type": "primary", "worker": "w", "url": P}]
    fields = CONTRACT["events"]["fields"]
    assert CONTRACT["events"]["type_names"]["python"]["primary"] == "primary"
    assert {"type"} | {fields[f]["python"] for f in CONTRACT["events"]["types"]["primary"]["fields"]} == set(events[0])
    worker.claim(wait=0)
    assert len([e for e in events if e["type"] == "primary"]) == 1  # told once per change


def test_the_async_worker_tells_it_too() -> None:
    async def main() -> list[dict[str, object]]:
        events: list[dict[str, object]] = []
        cap = by_server({P: refused, R: lambda sent: answer(200, json=[])})
        worker = fenecdb.AsyncWorker(fenecdb.AsyncClient([P, R], transport=cap), "jobs", name="a",
                                     on_event=events.append)
        await worker.claim(wait=0)
        return [e for e in events if e["type"] == "primary"]
    assert asyncio.run(main()) == [{"type": "primary", "worker": "a", "url": R}]
