"""Unique jobs (engine/unique.py): `@unique(pending)` holds a key while its job is ready, delayed
or leased, not once it is done or dead; the put's `if absent` skips, replaces or debounces; and
16 producers at once leave exactly one pending job a key, in every mode."""

from __future__ import annotations

import random
import threading

import pytest
from fenecdb_server import Database, FenecError

QUEUE = ("create collection jobs (key text @unique(pending), payload json, run_at timestamp @sorted, owner text, "
         "attempts int, done_at timestamp)")
MODES = {
    "skip": "put jobs {key: $1, payload: $2, run_at: now() + $3, attempts: 0} if absent",
    "replace": "put jobs {key: $1, payload: $2, run_at: now() + $3, attempts: 0} if absent "
               "else set {payload: new.payload}",
    "debounce": "put jobs {key: $1, payload: $2, run_at: now() + $3, attempts: 0} if absent "
                "else set {run_at: new.run_at}",
}


def fails(fn, status, needle=None):
    with pytest.raises(FenecError) as ei:
        fn()
    assert ei.value.status == status, ei.value
    if needle:
        assert needle in ei.value.message, ei.value.message


@pytest.fixture
def db(db):  # conftest's, on its clock
    db.query(QUEUE)
    return db


def test_the_three_modes(db):
    assert db.query(MODES["skip"], ["a", 1, 0]) == {"affected": 1}
    assert db.query(MODES["skip"], ["a", 2, 0]) == {"affected": 0}  # the duplicate, answered, no error
    assert db.query("get jobs select payload") == [{"payload": 1}]
    assert db.query(MODES["replace"], ["a", 3, 0]) == {"affected": 1}
    assert db.query("get jobs select id, payload") == [{"id": 1, "payload": 3}]
    assert db.query(MODES["debounce"], ["a", 4, 60_000]) == {"affected": 1}
    assert db.query("get jobs select id, payload, run_at") == [
        {"id": 1, "payload": 3, "run_at": "2026-05-03T09:21:00Z"}]
    fails(lambda: db.query("put jobs {key: 'a', run_at: now(), attempts: 0}"), 409, "@unique(pending)")


def test_a_key_is_held_while_pending_and_given_up_when_done_or_dead(db):
    db.query(MODES["skip"], ["a", 1, 0])
    db.query("set jobs {owner: 'w', run_at: now() + 30000, attempts: attempts + 1} where key = 'a'")  # leased
    assert db.query(MODES["skip"], ["a", 2, 0]) == {"affected": 0}
    db.query("set jobs {owner: null, run_at: null, done_at: now()} where id = 1")  # done
    assert db.query(MODES["skip"], ["a", 2, 0]) == {"affected": 1}
    db.query("set jobs {run_at: null} where id = 2")  # dead
    assert db.query(MODES["skip"], ["a", 3, 0]) == {"affected": 1}
    assert db.query("get jobs select id order id") == [{"id": 1}, {"id": 2}, {"id": 3}]  # none deleted
    fails(lambda: db.query("set jobs {run_at: now(), attempts: 0} where id = 2"), 409)  # sent again by hand: taken


def test_only_on_a_queue_and_an_index_on_existing_jobs(db):
    fails(lambda: db.query("create collection t (k text @unique(pending))"), 400, "queue")
    fails(lambda: db.query("create collection t (k text @unique(later))"), 400, "pending")
    db.query("create collection q (k text, run_at timestamp @sorted, owner text, attempts int)")
    db.query("put q [{k: 'a', run_at: now()}, {k: 'a', run_at: null}, {k: 'b', run_at: now()}]")
    db.query("create index on q (k) @unique(pending)")  # a dead job beside a pending one: fine
    db.query("put q {k: 'c', run_at: now()}")
    fails(lambda: db.query("put q {k: 'b', run_at: now()}"), 409)
    db.query("create collection r (k text, run_at timestamp @sorted, owner text, attempts int)")
    db.query("put r [{k: 'a', run_at: now()}, {k: 'a', run_at: now()}]")
    fails(lambda: db.query("create index on r (k) @unique(pending)"), 409, "pending jobs 1 and 2")


def test_kept_across_a_reopen(tmp_path):
    path = str(tmp_path / "u.fenec")
    db = Database(path, sync="off")
    db.query(QUEUE)
    db.query(MODES["skip"], ["a", 1, 0])
    db.close()
    db = Database(path, sync="off")
    assert db.query(MODES["skip"], ["a", 2, 0]) == {"affected": 0}
    db.compact()
    db.close()
    db = Database(path, sync="off")
    assert db.query(MODES["skip"], ["a", 2, 0]) == {"affected": 0}
    db.close()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_16_producers_at_once_leave_one_pending_job_a_key(db, mode):
    """Sixteen threads put the same 20 keys, each in its own order, 3 rounds, while a worker thread
    claims and finishes jobs (so keys are given up and taken again), reading the rows after each
    step: no key ever has two pending jobs. Then, the worker stopped, one more round at once:
    exactly one pending job a key."""
    keys = [f"k{i}" for i in range(20)]
    text = MODES[mode]
    errors: list[BaseException] = []
    stop = threading.Event()
    seen_twice: list[str] = []

    worked, last = threading.Barrier(17), threading.Barrier(17)

    def producer(n: int) -> None:
        rnd = random.Random(n)
        try:
            for round_ in range(4):
                if round_ == 3:
                    worked.wait()
                    last.wait()  # the worker has stopped
                order = keys[:]
                rnd.shuffle(order)
                for k in order:
                    db.query(text, [k, n, rnd.choice([0, 0, 5000])])
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)
            worked.abort()
            last.abort()

    def worker() -> None:
        while not stop.is_set():
            took = db.query("set jobs {owner: 'w', run_at: now() + 30000, attempts: attempts + 1} "
                            "where run_at <= now() order run_at limit 3 returning id")
            for row in took:
                db.query("set jobs {owner: null, run_at: null, done_at: now()} where id = $1", [row["id"]])
            pending = [r["key"] for r in db.query("get jobs select key where run_at is not null")]
            if len(pending) != len(set(pending)):
                seen_twice.append(repr(pending))

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(16)]
    w = threading.Thread(target=worker)
    w.start()
    for t in threads:
        t.start()
    try:
        worked.wait(120)
        stop.set()
        w.join()
        last.wait(120)
    finally:
        stop.set()
        for t in threads:
            t.join()
        w.join()
    assert not errors, errors
    assert not seen_twice, seen_twice[:1]
    pending = sorted(r["key"] for r in db.query("get jobs select key where run_at is not null"))
    assert pending == sorted(keys)
