"""The loop's polling window (http/busy_poll.py): the window after an answer, and the hold while a
write's answer waits for `--sync-replicas` replicas, which gives the CPU way at each poll.

The clock is the test's own, so no assertion depends on how fast the machine runs the loop."""

from __future__ import annotations

import asyncio

from fenecdb_server import Database
from fenecdb_server.http.app import App, Config
from fenecdb_server.http.busy_poll import REPLICAS_S, BusyPoll
from fenecdb_server.http.exchange import Answer
from fenecdb_server.replication.feed import Feed, Replica
from fenecdb_server.replication.quorum import Quorum

TURNS = 20  # loop turns to let a spin run: each turn is one poll


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def poll(window: float = 0.0001) -> tuple[BusyPoll, Clock, list[int]]:
    clock = Clock()
    busy = BusyPoll(window, clock)
    gave: list[int] = []
    busy.give = lambda: gave.append(1)
    return busy, clock, gave


def test_an_answer_keeps_the_loop_polling_for_its_window_and_never_gives_way() -> None:
    busy, clock, gave = poll()

    async def main() -> None:
        busy.touch(asyncio.get_running_loop())
        await turns(TURNS)
        assert busy.spinning and gave == []  # the window after an answer only polls
        clock.now += 0.0002
        await turns(3)
        assert not busy.spinning and busy.expired == 1

    asyncio.run(main())


def test_a_hold_polls_past_the_window_giving_way_at_each_poll_and_an_answer_does_not_cut_it_short() -> None:
    busy, clock, gave = poll()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        busy.hold(loop)
        await turns(TURNS)
        assert busy.spinning and len(gave) >= TURNS - 2  # each poll gave its CPU way
        clock.now += REPLICAS_S / 2  # past the answer's window, within the hold
        busy.touch(loop)  # an answer written meanwhile: its window ends sooner than the hold
        await turns(3)
        assert busy.spinning
        clock.now += REPLICAS_S / 2 + 0.00001  # the hold over; the answer's window over too
        await turns(3)
        assert not busy.spinning and busy.expired == 1
        given = len(gave)
        busy.touch(loop)  # a later answer polls again, without giving way
        await turns(TURNS)
        assert busy.spinning and len(gave) == given

    asyncio.run(main())


def test_a_hold_stands_down_while_the_loop_must_not_spin() -> None:
    busy, clock, gave = poll()
    busy.paused = lambda: True  # an fdatasync running beside the loop (http/durable.py)

    async def main() -> None:
        busy.hold(asyncio.get_running_loop())
        await turns(3)
        assert not busy.spinning and gave == [] and busy.expired == 0

    asyncio.run(main())


class SyncNode:
    """A primary's replication as `App.confirmed` sees it: a feed, one replica, `--sync-replicas 1`."""

    def __init__(self) -> None:
        self.db = Database()
        self.feed = Feed(self.db, 1 << 20)
        self.quorum = Quorum(lambda: self.feed, 1, wait_s=3600.0)
        self.replica = Replica("127.0.0.1:1", 0)
        self.feed.replicas.add(self.replica)


def test_a_write_owed_to_a_sync_replica_holds_the_loop_polling_until_its_answer_is_sent() -> None:
    busy, clock, gave = poll()
    app = App(Database(), Config(), busy=busy)
    node = app.config.replication = SyncNode()
    sent: list[Answer] = []

    async def main() -> None:
        answer = Answer(200, b"{}", [(b"fenec-seq", b"3")])
        app.confirmed(answer, sent.append)
        await turns(TURNS)
        assert sent == [] and busy.spinning and gave  # waiting for the ack: polling, giving way
        node.replica.acked = 3
        node.quorum.acked()
        assert sent == [answer]
        clock.now += REPLICAS_S + 0.001
        await turns(3)
        assert not busy.spinning

    asyncio.run(main())


def test_an_answer_the_replicas_hold_already_is_sent_at_once_and_holds_nothing() -> None:
    busy, clock, gave = poll()
    app = App(Database(), Config(), busy=busy)
    node = app.config.replication = SyncNode()
    node.quorum.level = 7  # the replicas hold change 7 already
    sent: list[Answer] = []

    async def main() -> None:
        answer = Answer(200, b"{}", [(b"fenec-seq", b"5")])
        app.confirmed(answer, sent.append)
        await turns(TURNS)
        assert sent == [answer] and not busy.spinning and gave == []

    asyncio.run(main())
