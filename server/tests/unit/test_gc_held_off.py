"""Automatic collection is off while any large statement runs off the loop, and on again after the last."""

from __future__ import annotations

import gc
import threading

from fenecdb_server import gc_policy


def test_collection_is_off_during_a_run_and_on_after_the_last() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def long_run() -> None:
        inside.set()
        release.wait(30)
        seen.append(gc.isenabled())

    t = threading.Thread(target=gc_policy.held_off, args=(long_run,))
    t.start()
    assert inside.wait(30)
    assert gc_policy.held_off(gc.isenabled) is False  # a second run beside the first
    assert not gc.isenabled(), "the first run still holds it off"
    release.set()
    t.join(30)
    assert seen == [False] and gc.isenabled()


def test_a_run_that_raises_turns_collection_back_on() -> None:
    def boom() -> None:
        raise ValueError("x")

    try:
        gc_policy.held_off(boom)
    except ValueError:
        pass
    assert gc.isenabled()


def test_a_large_statement_in_process_runs_with_collection_held_off() -> None:
    """A put of a thousand literal documents (about 90 KB of text) allocates far past the youngest
    generation's threshold: with the collector on, it ran collections that walked every row stored
    so far. In process such a text runs held off, as a large body does over HTTP."""
    from fenecdb_server import Database

    db = Database()
    db.query("create collection jobs (payload json, run_at timestamp @sorted, attempts int)")
    docs = ", ".join(f'{{payload: {{to: "user{i}@example.com", n: {i}, tags: ["a", "b"]}}, run_at: now(), attempts: 0}}'
                     for i in range(1000))
    text = f"put jobs [{docs}]"
    assert len(text) >= gc_policy.LARGE_TEXT
    starts: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            starts.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        assert db.query(text) == {"affected": 1000}
    finally:
        gc.callbacks.remove(seen)
    assert starts == [], f"{len(starts)} collections ran during the statement"
    assert gc.isenabled()
