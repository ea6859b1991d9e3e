"""Automatic collection is off while any large statement runs off the loop, and on again after the last."""

from __future__ import annotations

import gc
import threading

from fenecdb_server.http import collection


def test_collection_is_off_during_a_run_and_on_after_the_last() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def long_run() -> None:
        inside.set()
        release.wait(30)
        seen.append(gc.isenabled())

    t = threading.Thread(target=collection.deferred, args=(long_run,))
    t.start()
    assert inside.wait(30)
    assert collection.deferred(gc.isenabled) is False  # a second run beside the first
    assert not gc.isenabled(), "the first run still holds it off"
    release.set()
    t.join(30)
    assert seen == [False] and gc.isenabled()


def test_a_run_that_raises_turns_collection_back_on() -> None:
    def boom() -> None:
        raise ValueError("x")

    try:
        collection.deferred(boom)
    except ValueError:
        pass
    assert gc.isenabled()
