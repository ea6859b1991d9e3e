"""`--sync always` with the fdatasync running while the loop goes on (kernel AIO,
storage/kernel_aio.py; http/durable.py): a write is answered only once an fdatasync that started
after its append has completed, writes that arrive meanwhile wait for the next one, a failed one
fails exactly the writes it covered, and a thread (or a close) that needs a sync the loop started
reaps it itself instead of waiting for the loop.

The loop-level tests drive the sync with a ring whose completion the test gives (`HeldRing`), so
"while the fdatasync runs" is a state, not a timing; the kernel's own ring is tried where it exists.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import select
import threading
from typing import Any

import pytest
from fenecdb_server import Database
from fenecdb_server.http.app import App, Config
from fenecdb_server.http.busy_poll import BusyPoll
from fenecdb_server.storage import StorageFailed, sync_thread
from fenecdb_server.storage.files import FaultyFiles, OsFiles
from fenecdb_server.storage.kernel_aio import DatasyncRing, drain_eventfd
from fenecdb_server.storage.log import Log

DEADLINE = 30.0  # seconds: a generous bound on waiting for a condition, never a rate


class HeldRing:
    """A ring whose fdatasync completes when the test says (`complete`), with a real eventfd the
    loop watches, bumped at completion as the kernel bumps it, whoever reaps. A blocking reap (a
    thread or a close waiting for it) completes it at once."""

    def __init__(self) -> None:
        self._eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.in_flight = False
        self.submits = 0
        self._result: int | None = None
        self.fds: list[int] = []

    def fileno(self) -> int:
        return self._eventfd

    def submit(self, fd: int) -> None:
        assert not self.in_flight
        os.fdatasync(fd)  # the data really is synced; only the telling is held back
        self.in_flight = True
        self.submits += 1
        self._result = None

    def complete(self, result: int = 0) -> None:
        assert self.in_flight
        self._result = result
        os.eventfd_write(self._eventfd, 1)

    def reap(self, block: bool) -> int | None:
        if not self.in_flight:
            return None
        if self._result is None:
            if not block:
                return None
            self.complete()
        self.in_flight = False
        return self._result

    def clear(self) -> None:
        drain_eventfd(self._eventfd)

    def close(self) -> None:
        if self._eventfd >= 0:
            os.close(self._eventfd)
            self._eventfd = -1


class HeldRingFiles(FaultyFiles):
    def __init__(self) -> None:
        super().__init__()
        self.ring = HeldRing()

    def datasync_ring(self, fd: int) -> Any:
        return self.ring


# -- the kernel's ring ---------------------------------------------------------------------

def test_the_kernel_ring_runs_an_fdatasync_and_tells_it_through_its_eventfd(tmp_path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        ring = DatasyncRing.open(fd)
        if ring is None:
            pytest.skip("no kernel AIO fdatasync on this machine: the server syncs in place here")
        try:
            for round_ in range(3):
                os.pwrite(fd, b"record %d\n" % round_, round_ * 9)
                ring.submit(fd)
                assert ring.in_flight
                readable, _, _ = select.select([ring.fileno()], [], [], DEADLINE)
                assert readable == [ring.fileno()]
                ring.clear()  # as the loop does once woken
                assert select.select([ring.fileno()], [], [], 0)[0] == []
                assert ring.reap(block=False) == 0 and not ring.in_flight
                assert ring.reap(block=False) is None  # nothing in flight: nothing to reap
            ring.submit(fd)
            assert ring.reap(block=True) == 0  # a waiter that cannot wait for the loop...
            assert select.select([ring.fileno()], [], [], DEADLINE)[0] == [ring.fileno()]  # ...and the loop woken
        finally:
            ring.close()
        assert DatasyncRing.open(-1) is None  # never a ring for a bad descriptor
    finally:
        os.close(fd)


# -- the thread of its own (storage/sync_thread.py) -----------------------------------------

def test_a_compiled_install_runs_its_fdatasyncs_on_the_thread_of_its_own(tmp_path) -> None:
    from fenecdb_server import compiled

    if not compiled.running():
        pytest.skip("installed without compiling: the kernel's ring (or a sync in place) stands in")
    assert sync_thread.built()
    log = Log(tmp_path / "f.fenec", sync="always")
    log.open()
    try:
        assert isinstance(log.datasync_ring(), sync_thread.DatasyncThread)
    finally:
        log.close()


def test_the_thread_runs_an_fdatasync_and_tells_it_through_its_eventfd(tmp_path) -> None:
    if not sync_thread.built():
        pytest.skip("installed without compiling: no thread of its own here")
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        ring = sync_thread.open_thread(fd)
        assert ring is not None
        try:
            assert ring.reap(block=False) is None and ring.reap(block=True) is None  # nothing in flight
            for round_ in range(3):
                os.pwrite(fd, b"record %d\n" % round_, round_ * 9)
                ring.submit(fd)
                assert ring.in_flight
                with pytest.raises(RuntimeError):
                    ring.submit(fd)  # one at a time
                readable, _, _ = select.select([ring.fileno()], [], [], DEADLINE)
                assert readable == [ring.fileno()]
                ring.clear()  # as the loop does once woken
                assert select.select([ring.fileno()], [], [], 0)[0] == []
                assert ring.reap(block=False) == 0 and not ring.in_flight
                assert ring.reap(block=False) is None
            ring.submit(fd)
            assert ring.reap(block=True) == 0  # a waiter that cannot wait for the loop...
            assert select.select([ring.fileno()], [], [], DEADLINE)[0] == [ring.fileno()]  # ...and the loop woken
            ring.clear()
            os.close(os.dup(fd))
            spare = os.dup(fd)
            os.close(spare)
            ring.submit(spare)  # a descriptor closed meanwhile: its errno, told as the kernel's ring tells it
            assert ring.reap(block=True) == -errno.EBADF
            with pytest.raises(OSError):
                ring.submit(-1)
            ring.submit(fd)
        finally:
            ring.close()  # waits for the sync in flight, then ends the thread
        assert not ring.in_flight
        ring.close()  # a second close does nothing
        with pytest.raises(ValueError):
            ring.submit(fd)
    finally:
        os.close(fd)


def test_no_thread_for_a_descriptor_that_cannot_be_synced(tmp_path) -> None:
    r, w = os.pipe()
    try:
        assert sync_thread.open_thread(w) is None
        assert sync_thread.open_thread(-1) is None
    finally:
        os.close(r)
        os.close(w)


def test_the_environment_picks_the_way_for_a_measurement(tmp_path, monkeypatch) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        monkeypatch.setenv("FENECDB_DATASYNC", "inplace")
        assert OsFiles().datasync_ring(fd) is None  # every sync in place, on the loop
        monkeypatch.setenv("FENECDB_DATASYNC", "aio")
        _kernel_ring_or_none(fd)
        if sync_thread.built():
            monkeypatch.setenv("FENECDB_DATASYNC", "thread")
            ring = OsFiles().datasync_ring(fd)
            assert isinstance(ring, sync_thread.DatasyncThread)
            ring.close()
    finally:
        os.close(fd)


def test_a_log_without_the_thread_falls_back_to_the_kernel_ring(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sync_thread, "DatasyncThread", None)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _kernel_ring_or_none(fd)
    finally:
        os.close(fd)


def _kernel_ring_or_none(fd: int) -> None:
    """The files' way is the kernel's ring, or in place where this machine has none."""
    ring = OsFiles().datasync_ring(fd)
    if ring is not None:
        assert isinstance(ring, DatasyncRing)
        ring.close()


def test_a_ring_refused_on_a_descriptor_is_none_and_the_log_syncs_in_place(tmp_path) -> None:
    r, w = os.pipe()  # a pipe has no fdatasync: the kernel refuses it (EINVAL)
    try:
        assert DatasyncRing.open(w) is None
    finally:
        os.close(r)
        os.close(w)


# -- the log's leader step, started and reaped ------------------------------------------------

def open_log(tmp_path: Any) -> tuple[Log, HeldRing]:
    files = HeldRingFiles()
    lg = Log(tmp_path / "d.fenec", sync="always", files=files)
    lg.open()
    ring = lg.datasync_ring()
    assert ring is files.ring
    return lg, files.ring


def test_a_started_sync_covers_what_was_appended_before_it_and_nothing_after(tmp_path) -> None:
    lg, ring = open_log(tmp_path)
    first = lg.append(b'{"a":1}')
    second = lg.append(b'{"a":2}')
    assert lg.sync_begin(ring)
    assert not lg.sync_begin(ring)  # one sync at a time
    third = lg.append(b'{"a":3}')
    assert not lg.sync_reap()  # still running: nothing is durable yet
    assert lg.durable == 0
    ring.complete()
    assert lg.sync_reap()
    assert lg.durable == second and first < second < third and lg.dirty
    assert lg.sync_begin(ring)
    ring.complete()
    assert lg.sync_reap() and lg.durable == third and not lg.dirty
    assert not lg.sync_begin(ring)  # nothing dirty: nothing started
    assert ring.submits == 2 and lg.fsyncs == 2
    lg.close()


def test_a_failed_started_sync_fails_its_writes_and_every_later_one(tmp_path) -> None:
    lg, ring = open_log(tmp_path)
    lg.append(b'{"a":1}')
    assert lg.sync_begin(ring)
    ring.complete(-errno.EIO)
    with pytest.raises(StorageFailed, match="outcome is unknown"):
        lg.sync_reap()
    assert lg.failed and lg.durable == 0
    with pytest.raises(StorageFailed, match="refused"):
        lg.append(b'{"a":2}')
    with pytest.raises(StorageFailed):
        lg.sync_begin(ring)
    lg.close()


def test_a_thread_that_needs_the_started_sync_reaps_it_itself(tmp_path) -> None:
    """The loop that started it may be the thread now waiting (a write run off the loop, a
    compaction, a close): waiting for the loop to reap it would never end."""
    lg, ring = open_log(tmp_path)
    ticket = lg.append(b'{"a":1}')
    assert lg.sync_begin(ring)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (lg.sync_upto(ticket), done.set()))
    waiter.start()
    waiter.join(DEADLINE)
    assert done.is_set() and lg.durable == ticket
    assert lg.sync_reap()  # the loop, woken after: already reaped, nothing left to do
    lg.sync_upto(ticket)  # and nothing to sync
    assert ring.submits == 1
    later = lg.append(b'{"a":2}')
    assert lg.sync_begin(ring)
    assert lg.close() is False  # the close reaps the sync it finds running: nothing left dirty
    reopened = Log(tmp_path / "d.fenec", sync="always")
    assert len(reopened.open()[1]) == later
    reopened.close()


# -- over the loop: TurnSync with a started sync ----------------------------------------------

def open_app(tmp_path: Any) -> tuple[App, Database, HeldRingFiles]:
    files = HeldRingFiles()
    db = Database(str(tmp_path / "d.fenec"), sync="always", files=files)
    db.query("create collection jobs (tag text, n int)")
    return App(db, Config(sync_always=True)), db, files


async def start(app: App, text: str) -> tuple[asyncio.Task[None], list[dict[str, Any]]]:
    """A request to the ASGI app, running; its sent messages collect in the list."""
    body = json.dumps({"query": text}).encode()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/query", "raw_path": b"/query", "query_string": b"",
             "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1)}
    return asyncio.ensure_future(app(scope, receive, send)), sent


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def answered(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)


async def two_writes_in_one_sync(app: App) -> list[tuple[asyncio.Task[None], list[dict[str, Any]]]]:
    """The app started on this loop, then two writes in one turn: their sync started, not done."""
    task, _ = await start(app, "get jobs count")
    await answered([task])
    writes = [await start(app, f"put jobs {{tag: 'a', n: {i}}}") for i in range(2)]
    await turns(20)
    return writes


def status(sent: list[dict[str, Any]]) -> tuple[int, Any]:
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


def test_writes_that_arrive_while_a_sync_runs_wait_for_the_next_one(tmp_path) -> None:
    app, db, files = open_app(tmp_path)
    ring = files.ring

    async def main() -> None:
        task, sent = await start(app, "get jobs count")  # starts the app on this loop
        await answered([task])
        assert app.turns is not None and app.turns.overlapped
        first = [await start(app, f"put jobs {{tag: 'a', n: {i}}}") for i in range(2)]
        await turns(20)
        assert ring.in_flight and ring.submits == 1  # two writes in the turn: one sync started
        second = [await start(app, f"put jobs {{tag: 'b', n: {i}}}") for i in range(3)]
        await turns(20)
        assert ring.submits == 1  # not a second sync while one runs
        assert all(not sent for _, sent in first + second)  # nothing answered before its sync
        read, read_sent = await start(app, "get jobs count")
        await answered([read])  # reads go on meanwhile, and see the writes
        assert status(read_sent) == (200, [{"count": 5}])
        ring.complete()
        await answered([t for t, _ in first])
        assert [status(s) for _, s in first] == [(200, {"affected": 1})] * 2
        await turns(20)
        assert ring.in_flight and ring.submits == 2  # the next sync, for the writes that waited
        assert all(not sent for _, sent in second)
        ring.complete()
        await answered([t for t, _ in second])
        assert [status(s) for _, s in second] == [(200, {"affected": 1})] * 3
        assert not db.log.dirty

    asyncio.run(main())
    db.close()
    again = Database(str(tmp_path / "d.fenec"), sync="always")
    assert again.query("get jobs count") == [{"count": 5}]
    again.close()


def test_a_failed_started_sync_fails_the_writes_it_covered_and_refuses_those_that_waited(tmp_path) -> None:
    app, db, files = open_app(tmp_path)
    ring = files.ring

    async def main() -> None:
        covered = await two_writes_in_one_sync(app)
        waited = [await start(app, "put jobs {tag: 'b', n: 9}")]
        await turns(20)
        ring.complete(-errno.EIO)
        await answered([t for t, _ in covered + waited])
        for _, sent in covered:
            code, body = status(sent)
            assert code == 500 and "outcome is unknown" in body["error"], body
        code, body = status(waited[0][1])  # never covered by a sync: its outcome is unknown too
        assert code == 500 and "outcome is unknown" in body["error"], body
        later, sent = await start(app, "put jobs {tag: 'c', n: 1}")
        await answered([later])
        assert status(sent)[0] == 500 and "refused" in status(sent)[1]["error"]

    asyncio.run(main())
    assert db.failed is not None
    db.close()


def test_writes_whose_sync_a_thread_reaped_are_still_answered_by_the_loop(tmp_path) -> None:
    """A write run off the loop (a large request, the sweeper) that needs the sync the loop started
    reaps it itself; the loop, woken by the eventfd all the same, answers the writes it covered."""
    app, db, files = open_app(tmp_path)
    ring = files.ring

    async def main() -> None:
        covered = await two_writes_in_one_sync(app)
        assert ring.in_flight and all(not sent for _, sent in covered)
        ticket = db.log.appended
        thread = threading.Thread(target=db.log.sync_upto, args=(ticket,))
        thread.start()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, DEADLINE)
        assert not thread.is_alive() and not ring.in_flight and db.log.durable == ticket
        await answered([t for t, _ in covered])
        assert [status(s) for _, s in covered] == [(200, {"affected": 1})] * 2

    asyncio.run(main())
    db.close()


def test_a_lone_write_syncs_in_place(tmp_path) -> None:
    """One write in its turn: nothing to overlap, so no ring round trip (measured slower)."""
    app, db, files = open_app(tmp_path)

    async def main() -> None:
        task, _ = await start(app, "get jobs count")
        await answered([task])
        before = files.calls["datasync"]
        task, sent = await start(app, "put jobs {tag: 'a', n: 1}")
        await answered([task])
        assert status(sent) == (200, {"affected": 1})
        assert files.calls["datasync"] == before + 1 and files.ring.submits == 0 and not db.log.dirty

    asyncio.run(main())
    db.close()


def test_the_busy_poll_stands_down_while_a_sync_runs_on_the_ring(tmp_path) -> None:
    """The kernel runs an AIO fdatasync on the CPU that started it: the loop's polling window
    (http/busy_poll.py) must not hold that CPU while the sync runs, and resumes after it."""
    files = HeldRingFiles()
    db = Database(str(tmp_path / "d.fenec"), sync="always", files=files)
    db.query("create collection jobs (tag text, n int)")
    busy = BusyPoll(3600.0)  # a window no test outlasts: only the pause can end it
    app = App(db, Config(sync_always=True), busy=busy)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        covered = await two_writes_in_one_sync(app)
        assert files.ring.in_flight and app.turns is not None and app.turns.syncing()
        busy.touch(loop)  # as an answer written meanwhile would
        await turns(3)
        assert not busy.spinning and busy.expired == 0  # stood down at once
        files.ring.complete()
        await answered([t for t, _ in covered])
        assert not app.turns.syncing()
        busy.touch(loop)
        await turns(10)
        assert busy.spinning  # no sync running: the window holds again

    asyncio.run(main())
    db.close()
