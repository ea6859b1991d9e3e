"""`--sync always` over HTTP: the writes of one loop turn share one fdatasync, and no answer of a
write goes out before the fdatasync that covers it (http/durable.py).

The app is driven directly as ASGI, with requests started together on one loop, so that "one
turn" is a count, not a timing: every request below runs until its answer is pending, before the turn's flush.
"""

from __future__ import annotations

import asyncio
import errno
import json
from typing import Any

from fenecdb_server import Database
from fenecdb_server.http.app import Answer, App, Config, Pending
from fenecdb_server.http.exchange import Request, request_of
from fenecdb_server.storage.files import FaultyFiles

SCHEMA = "create collection jobs (tag text, n int)"


def scope(headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/query", "raw_path": b"/query", "query_string": b"",
            "headers": [(b"content-type", b"application/json"), *(headers or [])], "client": ("127.0.0.1", 1)}


async def post(app: App, files: FaultyFiles, text: str, *params: Any,
               headers: list[tuple[bytes, bytes]] | None = None, batch: list[str] | None = None) -> tuple[int, Any, int]:
    """(status, body, the datasyncs run when the answer started). With `batch`, a `/batch` of
    those texts (and `text` is not sent)."""
    body = json.dumps({"query": text, "params": list(params)}).encode()
    request = scope(headers)
    if batch is not None:
        body = "\n".join(json.dumps({"query": t}) for t in batch).encode()
        request.update(path="/batch", raw_path=b"/batch")
    sent: list[dict[str, Any]] = []
    syncs_at_start: list[int] = []

    read: list[bool] = []

    async def receive() -> dict[str, Any]:
        if read:  # the body was read: what follows is the client's silence (a held claim watches it)
            await asyncio.Event().wait()
        read.append(True)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            syncs_at_start.append(files.calls["datasync"])
        sent.append(message)

    await app(request, receive, send)
    status = sent[0]["status"]
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(payload), syncs_at_start[0]


def open_app(tmp_path: Any) -> tuple[App, Database, FaultyFiles]:
    files = FaultyFiles()
    db = Database(str(tmp_path / "d.fenec"), sync="always", files=files)
    db.query(SCHEMA)
    return App(db, Config(sync_always=True)), db, files


def test_the_writes_of_one_turn_share_one_fdatasync_and_answer_after_it(tmp_path) -> None:
    app, db, files = open_app(tmp_path)

    async def main() -> list[tuple[int, Any, int]]:
        await post(app, files, "get jobs count")  # starts the app on this loop
        before = files.calls["datasync"]
        answers = await asyncio.gather(*(post(app, files, "put jobs {tag: $1, n: $2}", f"w{i}", i)
                                         for i in range(16)))
        assert files.calls["datasync"] == before + 1  # sixteen writes, one fdatasync
        assert app.turns is not None and app.turns.flushes == 1
        return [(s, b, at - before) for s, b, at in answers]

    answers = asyncio.run(main())
    assert answers == [(200, {"affected": 1}, 1)] * 16  # every answer after that fdatasync
    assert not db.log.dirty
    db.close()
    again = Database(str(tmp_path / "d.fenec"), sync="always")
    assert again.query("get jobs count") == [{"count": 16}]
    again.close()


def test_turns_that_write_nothing_sync_nothing(tmp_path) -> None:
    app, db, files = open_app(tmp_path)

    async def main() -> None:
        before = files.calls["datasync"]
        answers = await asyncio.gather(*(post(app, files, "get jobs count") for _ in range(8)),
                                       post(app, files, "del jobs where tag = 'none'"),
                                       post(app, files, "put jobs {tag: 'x', n: 'not an int'}"))
        assert [a[0] for a in answers] == [200] * 9 + [400]
        assert files.calls["datasync"] == before and app.turns is not None and app.turns.flushes == 0

    asyncio.run(main())
    db.close()


def test_a_failed_fdatasync_fails_every_write_of_its_turn_and_refuses_later_ones(tmp_path) -> None:
    app, db, files = open_app(tmp_path)

    async def main() -> None:
        await post(app, files, "get jobs count")
        files.fail("datasync", errno.EIO)
        answers = await asyncio.gather(*(post(app, files, "put jobs {tag: $1, n: 1}", f"w{i}") for i in range(4)))
        for status, body, _ in answers:
            assert status == 500 and "outcome is unknown" in body["error"], body
        status, body, _ = await post(app, files, "put jobs {tag: 'later', n: 2}")
        assert status == 500 and "refused" in body["error"]
        status, body, _ = await post(app, files, "get jobs count")  # reads go on
        assert (status, body) == (200, [{"count": 4}])

    asyncio.run(main())
    assert db.failed is not None
    db.close()


def test_a_replay_in_the_turn_of_its_write_answers_after_the_fdatasync(tmp_path) -> None:
    app, db, files = open_app(tmp_path)
    key = [(b"idempotency-key", b"order-1")]

    async def main() -> None:
        await post(app, files, "get jobs count")
        before = files.calls["datasync"]
        first, replay = await asyncio.gather(post(app, files, "put jobs {tag: 'k', n: 1}", headers=key),
                                             post(app, files, "put jobs {tag: 'k', n: 1}", headers=key))
        assert first[:2] == replay[:2] == (200, {"affected": 1})
        assert first[2] == replay[2] == before + 1  # the replay too waited for the write's sync

    asyncio.run(main())
    assert db.query("get jobs count") == [{"count": 1}]
    db.close()


def test_the_short_way_answers_a_write_once_its_fdatasync_is_done_and_500_when_it_failed(tmp_path) -> None:
    """What the protocol's direct path gets for a write under --sync always: a Pending answer that
    `App.release` hands over only from the flush (a failed fdatasync: the log's 500)."""
    app, db, files = open_app(tmp_path)

    def request(text: str) -> tuple[Request, bytes]:
        body = json.dumps({"query": text}).encode()
        return request_of(scope([(b"content-length", str(len(body)).encode())])), body

    async def settled(got: list[Any], n: int) -> None:
        for _ in range(100):
            if len(got) >= n:
                return
            await asyncio.sleep(0)
        raise AssertionError("never answered")

    async def main() -> None:
        await post(app, files, "get jobs count")  # starts the app on this loop
        got: list[Any] = []
        pending = app.handle(*request("put jobs {tag: 'a', n: 1}"))
        assert isinstance(pending, Pending)
        before = files.calls["datasync"]
        app.release(pending, got.append)
        assert got == [] and files.calls["datasync"] == before  # nothing before the flush
        await settled(got, 1)
        assert files.calls["datasync"] == before + 1
        assert (got[0].status, json.loads(got[0].body)) == (200, {"affected": 1})
        read = app.handle(*request("get jobs count"))
        assert isinstance(read, Answer) and json.loads(read.body) == [{"count": 1}]  # a read is not held
        files.fail("datasync", errno.EIO)
        pending = app.handle(*request("put jobs {tag: 'b', n: 2}"))
        assert isinstance(pending, Pending)
        app.release(pending, got.append)
        await settled(got, 2)
        assert got[1].status == 500 and "outcome is unknown" in json.loads(got[1].body)["error"]

    asyncio.run(main())
    db.close()


# A statement text over OFF_LOOP_TEXT (2 KiB) that was never parsed is parsed and run in a worker
# thread (app.py): its write's sync is the worker's to wait for, as no loop turn owes it.
LONG = "x" * 3000


def test_a_write_run_off_the_loop_answers_after_its_fdatasync(tmp_path) -> None:
    """Issue 40, item 1: a long put ran in a worker thread inside the loop's deferral scope, which
    noted its sync as owed, and the ticket was dropped: answered 200, never synced."""
    app, db, files = open_app(tmp_path)

    async def main() -> None:
        await post(app, files, "get jobs count")
        for i in range(3):
            before = files.calls["datasync"]
            status, body, at = await post(app, files, f"put jobs {{tag: '{LONG}', n: {i}}}")
            assert (status, body) == (200, {"affected": 1})
            assert at == before + 1  # its own fdatasync, before the answer
            assert not db.log.dirty
        texts = [f"put jobs {{tag: 'batch-line-{i:04d}', n: {i}}}" for i in range(60)]
        assert sum(map(len, texts)) > 2048  # run off the loop as one block
        before = files.calls["datasync"]
        status, body, at = await post(app, files, "", batch=texts)
        assert status == 200 and body["ok"] == 60
        assert at == before + 1 and not db.log.dirty

    asyncio.run(main())
    db.close()


def test_a_write_run_off_the_loop_whose_fdatasync_fails_is_answered_500(tmp_path) -> None:
    app, db, files = open_app(tmp_path)

    async def main() -> None:
        await post(app, files, "get jobs count")
        files.fail("datasync", errno.EIO)
        status, body, _ = await post(app, files, f"put jobs {{tag: '{LONG}', n: 1}}")
        assert status == 500 and "outcome is unknown" in body["error"], body

    asyncio.run(main())
    assert db.failed is not None
    db.close()


def test_a_held_claim_run_off_the_loop_answers_after_the_fdatasync_of_what_it_took(tmp_path) -> None:
    """A held claim whose text is long runs off the loop each time it is woken (held claims' runs)."""
    app, db, files = open_app(tmp_path)
    claim = f"set jobs {{tag: 'taken'}} where n = 1 and tag != '{LONG}' limit 1 returning n"

    async def main() -> None:
        await post(app, files, "get jobs count")
        held = asyncio.ensure_future(post(app, files, claim, headers=[(b"fenec-wait", b"30000")]))
        for _ in range(1000):  # until it is held (its first run took nothing)
            if app.lines is not None and app.lines.held == 1:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the claim was never held")
        status, _, put_at = await post(app, files, "put jobs {tag: 'a', n: 1}")
        assert status == 200
        status, body, at = await held
        assert (status, body) == (200, [{"n": 1}])
        assert at > put_at and not db.log.dirty  # its own write synced before its answer

    asyncio.run(main())
    db.close()


def test_a_server_under_always_syncs_every_write_it_answers_by_its_own_counters(tmp_path) -> None:
    """The issue's measurement, on a real server: after each answered write, the records the log
    holds are all covered by a sync (`/_metrics`: records vs syncs, docs/metrics.md), whichever
    way the write ran: a short text on the loop, a long one or a long `/batch` in a worker thread."""
    from test_http_e2e import Server

    def counters(c: Any) -> tuple[int, int]:
        text = c.get("/_metrics").text
        got = {line.split()[0]: int(float(line.split()[1])) for line in text.splitlines()
               if line.startswith(("fenec_log_records_total ", "fenec_log_syncs_total "))}
        return got["fenec_log_records_total"], got["fenec_log_syncs_total"]

    server = Server("--file", str(tmp_path / "d.fenec"), "--sync", "always")
    try:
        with server.client() as c:
            assert c.post("/query", json={"query": SCHEMA}).status_code == 200
            batch = "\n".join(json.dumps({"query": f"put jobs {{tag: 'batch-line-{i:04d}', n: {i}}}"})
                              for i in range(60))
            sends = [("/query", json.dumps({"query": "put jobs {tag: 'short', n: 0}"})),
                     *[("/query", json.dumps({"query": f"put jobs {{tag: '{LONG}', n: {i}}}"})) for i in range(3)],
                     ("/batch", batch)]
            for path, body in sends:
                records, syncs = counters(c)
                r = c.post(path, content=body.encode())
                assert r.status_code == 200, r.text
                after = counters(c)
                assert after[0] == records + 1 and after[1] >= syncs + 1, (path, records, syncs, after)
    finally:
        assert server.stop() == 0
