"""rwlock: readers share, the writer is alone, a waiting writer stops new readers."""

from __future__ import annotations

import threading
import time

from fenecdb_server.engine.rwlock import RWLock


def test_readers_share():
    lock = RWLock()
    lock.acquire_read()
    done = threading.Event()

    def reader():
        lock.acquire_read()
        done.set()
        lock.release_read()
    t = threading.Thread(target=reader)
    t.start()
    assert done.wait(2)
    t.join()
    lock.release_read()


def test_writer_waits_for_readers_and_blocks_new_readers():
    lock = RWLock()
    lock.acquire_read()
    events = []
    wrote = threading.Event()

    def writer():
        lock.acquire_write()
        events.append("w")
        wrote.set()
        lock.release_write()

    def late_reader():
        lock.acquire_read()
        events.append("r")
        lock.release_read()
    tw = threading.Thread(target=writer)
    tw.start()
    time.sleep(0.05)
    assert not wrote.is_set()           # the reader still holds it
    tr = threading.Thread(target=late_reader)
    tr.start()
    time.sleep(0.05)
    assert events == []                 # the waiting writer holds the new reader back
    lock.release_read()
    tw.join(2)
    tr.join(2)
    assert events == ["w", "r"]


def test_writers_exclude_each_other():
    lock = RWLock()
    inside = [0]
    worst = [0]

    def work():
        for _ in range(200):
            lock.acquire_write()
            inside[0] += 1
            worst[0] = max(worst[0], inside[0])
            inside[0] -= 1
            lock.release_write()
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert worst[0] == 1
