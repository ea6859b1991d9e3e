"""The primary's side of a sync replica, without a network: the feed's streams are woken by the
log's sync (not by a poll), and the quorum calls back each waiting answer once N replicas hold its
change, or refuses it after its wait, with one timer for all (replication/feed.py, quorum.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from fenecdb_server import Database
from fenecdb_server.http.replication import Pusher
from fenecdb_server.replication.feed import Feed, Replica
from fenecdb_server.replication.quorum import Quorum


def test_a_stream_waiting_on_the_feed_is_woken_by_the_logs_sync(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "p.fenec"), sync="off")
    feed = Feed(db, 1 << 20)
    feed.attach()
    db.query("create collection jobs (n int)")

    async def main() -> list[bool]:
        seen = []
        more = feed.more()
        assert feed.durable_frames(0) == (0, b"")  # nothing on the disk yet: nothing to send
        db.query("put jobs {n: 1}")
        await asyncio.sleep(0)
        seen.append(more.done())  # appended, not synced: still waiting
        db.log.sync()  # on the loop's thread
        seen.append(more.done())
        again = feed.more()
        db.query("put jobs {n: 2}")
        synced = threading.Thread(target=db.log.sync)  # on another thread: through the loop
        synced.start()
        synced.join()
        await asyncio.wait_for(again, 30)
        seen.append(again.done())
        return seen

    try:
        assert asyncio.run(main()) == [False, True, True]
        assert (feed.durable_frames(0) or (0, b""))[0] == 3  # the three records, the last change 3
    finally:
        db.close()


def test_a_waiting_stream_runs_in_the_loops_next_turn_after_the_sync(tmp_path: Path) -> None:
    """The stream sends on the turn after the fdatasync's, not two turns later (its task awaits
    its own future: asyncio.wait would wake it through a future of its own, a turn later)."""
    db = Database(str(tmp_path / "p.fenec"), sync="off")
    feed = Feed(db, 1 << 20)
    feed.attach()

    async def main() -> tuple[bool, bool, int]:
        woken: list[bool] = []

        async def stream() -> None:
            more = feed.more()
            await feed.wait(more, 30)
            woken.append(True)

        task = asyncio.create_task(stream())
        await asyncio.sleep(0)  # the stream waits
        db.query("create collection jobs (n int)")
        db.log.sync()  # the sync's turn, on the loop's thread
        before = bool(woken)
        await asyncio.sleep(0)  # one turn
        after = bool(woken)
        await task
        for _ in range(5):  # an idle primary's keep-alive waits, each ended by its time, do not pile up
            await feed.wait(feed.more(), 0.001)
        return before, after, len(feed._waiting)

    try:
        assert asyncio.run(asyncio.wait_for(main(), 30)) == (False, True, 1)
    finally:
        db.close()


def test_a_sync_on_the_loop_sends_its_records_to_a_waiting_stream_in_its_own_call(tmp_path: Path) -> None:
    """Under `--sync always` the sync's own call sends what it covers to each stream whose task waits
    (a sync replica has it a loop turn sooner); never to a stream whose task is busy (an image being
    sent: the records must come after it), nor past a transport that cannot take it now: those the
    task sends when it wakes."""
    db = Database(str(tmp_path / "p.fenec"), sync="off")
    feed = Feed(db, 1 << 20)
    feed.attach()
    db.query("create collection jobs (n int)")
    db.log.sync()
    written: list[bytes] = []
    takes = [True]

    def send_now(body: bytes) -> bool:
        if takes[0]:
            written.append(body)
        return takes[0]

    replica = Replica("r:1", 1, "r")
    pusher = Pusher(feed, replica, send_now)
    feed.pushers.append(pusher.push)

    async def main() -> None:
        feed.more()  # the stream's look: the loop's thread is known to the feed
        db.query("put jobs {n: 1}")
        db.log.sync()
        assert written == [] and replica.sent == 1  # its task is not waiting: the task's to send
        pusher.idle = True
        db.log.sync()  # nothing more covered: nothing sent
        assert written == []
        db.query("put jobs {n: 2}")
        db.log.sync()  # in this very call: both records, framed as the log framed them
        assert replica.sent == 3 and written == [(feed.durable_frames(1) or (0, b""))[1]]
        takes[0] = False  # a slow reader: the transport takes nothing now
        db.query("put jobs {n: 3}")
        db.log.sync()
        assert replica.sent == 3 and feed.durable_frames(3) is not None
        synced = threading.Thread(target=db.log.sync)  # off the loop: the task is woken instead
        takes[0] = True
        db.query("put jobs {n: 4}")
        synced.start()
        synced.join()
        assert replica.sent == 3 and len(written) == 1

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        db.close()


def test_the_quorum_answers_each_wait_once_n_replicas_hold_it_or_refuses_it() -> None:
    feed = Feed(Database(), 1 << 20)
    quorum = Quorum(lambda: feed, 2, wait_s=0.2)
    a, b = Replica("a:1", 0, "a"), Replica("b:1", 0, "b")
    feed.replicas.update((a, b))

    async def main() -> list[tuple[str, bool]]:
        told: list[tuple[str, bool]] = []
        for name, seq in (("w3", 3), ("w5", 5), ("w9", 9)):
            quorum.when(seq, lambda ok, name=name: told.append((name, ok)))
        a.acked = 6
        quorum.acked()
        assert told == []  # one replica is not two
        b.acked = 5
        quorum.acked()
        assert told == [("w3", True), ("w5", True)] and quorum.level == 5
        quorum.when(4, lambda ok: told.append(("w4", ok)))  # held already: at once
        assert told[-1] == ("w4", True)
        while len(told) < 4:  # w9: refused at its deadline
            await asyncio.sleep(0.02)
        return told

    told = asyncio.run(asyncio.wait_for(main(), 30))
    assert told == [("w3", True), ("w5", True), ("w4", True), ("w9", False)]
    assert quorum.refused == 1
