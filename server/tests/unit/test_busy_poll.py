"""The polling window after an answer (http/busy_poll.py): while it lasts the loop never sleeps,
once it passes with nothing read the loop may sleep again, and it stands down when told to; and
the hold while a write's answer waits for `--sync-replicas` replicas, which gives the CPU way at
each poll. The clock is the test's, so "inside the window" is a state, not a timing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fenecdb_server import Database, cli
from fenecdb_server.flags import BadFlag
from fenecdb_server.http.app import App, Config
from fenecdb_server.http.busy_poll import REPLICAS_S, BusyPoll, usable_cpus
from fenecdb_server.http.exchange import Answer
from fenecdb_server.replication.feed import Feed, Replica
from fenecdb_server.replication.identity import Identity
from fenecdb_server.replication.node import Node

TURNS = 20  # loop turns to let a spin run: each turn is one poll


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_loop_keeps_polling_inside_the_window_and_sleeps_after_it() -> None:
    clock = Clock()
    busy = BusyPoll(0.0001, clock)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        busy.touch(loop)
        await turns(50)
        assert busy.spinning and busy.expired == 0  # the clock stands still: inside the window
        clock.now += 0.00005
        busy.touch(loop)  # an answer inside the window pushes its end ahead; no second spin
        clock.now += 0.00008  # past the first window's end, inside the second's
        await turns(50)
        assert busy.spinning and busy.expired == 0
        clock.now += 0.00003
        await turns(5)
        assert not busy.spinning and busy.expired == 1  # ran out once, for both answers
        busy.touch(loop)  # the next answer starts a window again
        await turns(5)
        assert busy.spinning
        clock.now += 1
        await turns(5)
        assert not busy.spinning and busy.expired == 2

    asyncio.run(main())


def test_it_stands_down_at_once_when_paused_and_counts_no_expiry() -> None:
    clock = Clock()
    busy = BusyPoll(1.0, clock)
    paused = [False]
    busy.paused = lambda: paused[0]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        busy.touch(loop)
        await turns(10)
        assert busy.spinning
        paused[0] = True  # say an fdatasync started on the kernel's AIO
        await turns(3)
        assert not busy.spinning and busy.expired == 0
        busy.touch(loop)  # an answer while paused: one look, then the loop may sleep
        await turns(3)
        assert not busy.spinning
        paused[0] = False
        busy.touch(loop)
        await turns(3)
        assert busy.spinning

    asyncio.run(main())


@pytest.mark.parametrize(("affinity", "cpu_max", "cpus"), [
    ({0, 1}, None, 2.0),
    ({0}, None, 1.0),
    ({0, 1, 2, 3}, "max 100000", 4.0),
    ({0, 1, 2, 3}, "150000 100000", 1.5),
    ({0, 1}, "50000 100000", 0.5),
    ({0, 1}, "800000 100000", 2.0),  # a quota above the CPUs it may run on
    ({0, 1}, "garbage", 2.0),
    ({0, 1}, "x 100000", 2.0),
    ({0, 1}, "0 100000", 2.0),
])
def test_usable_cpus_is_the_affinity_bounded_by_the_cgroup_quota(affinity, cpu_max, cpus) -> None:
    assert usable_cpus(affinity, cpu_max) == cpus


def test_the_flag_default_depends_on_the_cpus_and_an_explicit_value_is_kept(monkeypatch) -> None:
    monkeypatch.setattr(cli, "cgroup_cpu_max", lambda: None)
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0, 1})
    assert cli.parse_busy_poll(None) == cli.BUSY_POLL_DEFAULT_US == 100
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {3})
    assert cli.parse_busy_poll(None) == 0  # one CPU: the client may need it
    assert cli.parse_busy_poll("250") == 250  # said explicitly: kept
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(cli, "cgroup_cpu_max", lambda: "100000 100000")
    assert cli.parse_busy_poll(None) == 0  # a quota of one CPU
    assert cli.parse_busy_poll("0") == 0
    assert cli.parse_busy_poll("10000") == 10_000
    for bad in ("10001", "-1", "1.5", "x", ""):
        with pytest.raises(BadFlag) as e:  # the command line exits 2 with its message
            cli.parse_busy_poll(bad)
        assert "--busy-poll" in e.value.message


def test_a_spin_left_on_a_closed_loop_does_not_keep_the_next_loop_from_polling() -> None:
    clock = Clock()
    busy = BusyPoll(1.0, clock)

    async def touch_and_leave() -> None:
        busy.touch(asyncio.get_running_loop())
        await turns(3)
        assert busy.spinning

    asyncio.run(touch_and_leave())  # the loop closes with the spin still queued on it

    async def again() -> None:
        busy.touch(asyncio.get_running_loop())
        clock.now += 2
        await turns(5)
        assert not busy.spinning and busy.expired == 1  # it ran, and ran out, on this loop

    asyncio.run(again())


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


def sync_node(tmp_path: Path) -> tuple[Node, Replica]:
    """A primary's replication as `App.confirmed` sees it: a feed, one replica, `--sync-replicas 1`."""
    db = Database()
    node = Node(db, Identity(str(tmp_path / "p.fenec")), "t", buffer_bytes=1 << 20, sync_replicas=1,
                sync_wait_s=3600.0)
    node.feed = Feed(db, 1 << 20)
    replica = Replica("127.0.0.1:1", 0)
    node.feed.replicas.add(replica)
    return node, replica


def test_a_write_owed_to_a_sync_replica_holds_the_loop_polling_until_its_answer_is_sent(tmp_path: Path) -> None:
    busy, clock, gave = poll()
    app = App(Database(), Config(), busy=busy)
    node, replica = sync_node(tmp_path)
    app.config.replication = node
    sent: list[Answer] = []

    async def main() -> None:
        answer = Answer(200, b"{}", [(b"fenec-seq", b"3")])
        app.confirmed(answer, sent.append)
        await turns(TURNS)
        assert sent == [] and busy.spinning and gave  # waiting for the ack: polling, giving way
        replica.acked = 3
        assert node.quorum is not None
        node.quorum.acked()
        assert sent == [answer]
        clock.now += REPLICAS_S + 0.001
        await turns(3)
        assert not busy.spinning

    asyncio.run(main())


def test_an_answer_the_replicas_hold_already_is_sent_at_once_and_holds_nothing(tmp_path: Path) -> None:
    busy, clock, gave = poll()
    app = App(Database(), Config(), busy=busy)
    node, _ = sync_node(tmp_path)
    app.config.replication = node
    assert node.quorum is not None
    node.quorum.level = 7  # the replicas hold change 7 already
    sent: list[Answer] = []

    async def main() -> None:
        answer = Answer(200, b"{}", [(b"fenec-seq", b"5")])
        app.confirmed(answer, sent.append)
        await turns(TURNS)
        assert sent == [answer] and not busy.spinning and gave == []

    asyncio.run(main())
