"""engine/queues.py: which collections are queues, each job's state, and what each write did.

Every case runs real statements through `Database` (the seed page's claim, ack, extend, fail
and dead-letter) on a test clock, and reads `db.stats()` and `db.tally` as /_metrics does."""

from __future__ import annotations

from typing import Any

import pytest
from fenecdb_server import Database, FenecError
from fenecdb_server.engine.queues import EVENTS, shape_of
from fenecdb_server.plan.schema import Schema

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 3 returning id")
ACK = "del jobs where id = $1 and owner = $2 require 1"
EXTEND = "set jobs {run_at: now() + 30000} where id = $1 and owner = $2 require 1"
FAIL = ("set jobs {owner: null, error: 'smtp', run_at: case when attempts >= 3 then null "
        "else now() + 1000 * attempts end} where id = $1 and owner = $2 require 1")
DONE = "set jobs {owner: null, run_at: null, done_at: now()} where id = $1 and owner = $2 require 1"


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000_000

    def __call__(self) -> int:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(clock: Clock, fields: str) -> Database:
    db = Database(clock=clock)
    db.query(f"create collection jobs ({fields})")
    return db


def events(db: Database, value: str = "") -> dict[str, int]:
    return dict(zip(EVENTS, db.tally.snapshot().get(("jobs", value), [0] * 5), strict=True))


def schema(fields: str) -> Schema:
    db = Database()
    db.query(f"create collection c ({fields})")
    return db.collections["c"].schema


@pytest.mark.parametrize(("fields", "ready"), [
    ("payload json, run_at timestamp @sorted, owner text, attempts int", "run_at"),
    ("run_at timestamp, owner text, attempts int", "run_at"),  # no index: still a queue
    ("due timestamp @sorted, owner text, attempts int, done_at timestamp @sorted", "due"),
    ("run_at int, due timestamp @sorted, owner text, attempts int", "due"),
])
def test_a_queue_is_known_by_its_shape(fields: str, ready: str) -> None:
    shape = shape_of(schema(fields))
    assert shape is not None and shape.ready == ready


@pytest.mark.parametrize("fields", [
    "run_at timestamp @sorted, attempts int",                    # no owner
    "run_at timestamp @sorted, owner text",                      # no attempts
    "run_at timestamp @sorted, owner int, attempts int",         # owner not text
    "a timestamp @sorted, b timestamp @sorted, owner text, attempts int",  # two candidates
    "due timestamp, owner text, attempts int",                   # not run_at and not @sorted
])
def test_what_is_not_a_queue(fields: str) -> None:
    assert shape_of(schema(fields)) is None


def test_each_state_counted_per_queue_value(clock: Clock) -> None:
    db = make(clock, "queue text, payload json, run_at timestamp @sorted, owner text, attempts int, "
                     "error text, done_at timestamp")
    db.query("put jobs [{queue: 'mail', run_at: now() - 5000, attempts: 0}, "
             "{queue: 'mail', run_at: now() - 1000, attempts: 1, error: 'x'}, "   # ready and retrying
             "{queue: 'mail', run_at: now() + 5000, attempts: 2, error: 'x'}, "   # delayed and retrying
             "{queue: 'mail', run_at: now() + 5000, attempts: 2, error: 'x', owner: 'w'}, "  # leased
             "{queue: 'mail', run_at: null, attempts: 5, error: 'x'}, "           # dead
             "{queue: 'mail', run_at: null, attempts: 1, done_at: now()}, "       # done
             "{queue: 'img', run_at: now() + 9000, attempts: 0}, "
             "{run_at: now(), attempts: 0}]")
    st = db.stats()["collections"]["jobs"]
    assert st["queues"]["mail"] == {"ready": 2, "leased": 1, "delayed": 1, "retrying": 2, "dead": 1, "done": 1,
                                    "oldest_ready_ms": 5000}
    assert st["queues"]["img"] == {"ready": 0, "leased": 0, "delayed": 1, "retrying": 0, "dead": 0, "done": 0,
                                   "oldest_ready_ms": 0}
    assert st["queues"][""]["ready"] == 1
    assert (st["ready"], st["leased"], st["delayed"], st["dead"], st["done"]) == (3, 1, 2, 1, 1)
    assert st["oldest_ready_ms"] == 5000 and st["queue_field"] == "queue"


def test_the_index_path_and_the_scan_agree(clock: Clock) -> None:
    rows = ("[{run_at: now() - 5000, attempts: 0}, {run_at: now() + 5000, attempts: 0, owner: 'w'}, "
            "{run_at: now() + 5000, attempts: 0}, {run_at: null, attempts: 3}]")
    fast = make(clock, "run_at timestamp @sorted, owner text, attempts int")
    scan = make(clock, "run_at timestamp @sorted, owner text, attempts int, error text")
    fast.query(f"put jobs {rows}")
    scan.query(f"put jobs {rows}")
    a, b = fast.stats()["collections"]["jobs"], scan.stats()["collections"]["jobs"]
    for k in ("ready", "leased", "delayed", "dead", "done", "oldest_ready_ms"):
        assert a[k] == b[k], k
    assert a["oldest_ready_ms"] == 5000


def test_nothing_ready_is_an_age_of_zero(clock: Clock) -> None:
    db = make(clock, "run_at timestamp @sorted, owner text, attempts int")
    db.query("put jobs {run_at: now() + 1000, attempts: 0}")
    assert db.stats()["collections"]["jobs"]["oldest_ready_ms"] == 0


def test_a_workers_life_is_counted(clock: Clock) -> None:
    db = make(clock, "payload json, run_at timestamp @sorted, owner text, attempts int, error text, "
                     "done_at timestamp")
    db.query("put jobs [{run_at: now(), attempts: 0}, {run_at: now(), attempts: 0}, {run_at: now(), attempts: 0}]")
    assert events(db) == {"enqueued": 3, "claimed": 0, "acked": 0, "failed": 0, "dead_lettered": 0}
    ids = [r["id"] for r in db.query(CLAIM, ["w1"])]
    assert events(db)["claimed"] == 3
    db.query(EXTEND, [ids[0], "w1"])
    assert events(db)["claimed"] == 3  # an extension is not a claim
    db.query(ACK, [ids[0], "w1"])
    db.query(DONE, [ids[1], "w1"])
    assert events(db)["acked"] == 2  # deleted, and kept done
    db.query(FAIL, [ids[2], "w1"])
    assert events(db)["failed"] == 1 and events(db)["dead_lettered"] == 0  # back in 1 s
    for _ in range(2):
        clock.t += 60_000
        db.query(CLAIM, ["w2"])
        db.query(FAIL, [ids[2], "w2"])
    assert events(db) == {"enqueued": 3, "claimed": 5, "acked": 2, "failed": 3, "dead_lettered": 1}
    st = db.stats()["collections"]["jobs"]
    assert (st["dead"], st["done"]) == (1, 1)
    db.query("set jobs {run_at: now(), attempts: 0, error: null} where run_at is null and done_at is null")
    db.query("del jobs where run_at is null")  # the done job, by hand: not an ack (nobody held it)
    assert events(db) == {"enqueued": 3, "claimed": 5, "acked": 2, "failed": 3, "dead_lettered": 1}


def test_a_failed_block_counts_nothing(clock: Clock) -> None:
    db = make(clock, "run_at timestamp @sorted, owner text, attempts int")
    with pytest.raises(FenecError):
        db.batch([("put jobs {run_at: now(), attempts: 0}", None), ("del jobs where id = 99 require 1", None)])
    assert events(db)["enqueued"] == 0


def test_counters_split_by_queue_value_and_cap_it(clock: Clock, monkeypatch: Any) -> None:
    from fenecdb_server.engine import queues

    monkeypatch.setattr(queues, "MAX_VALUES", 2)
    db = make(clock, "queue text, run_at timestamp @sorted, owner text, attempts int")
    db.query("put jobs [{queue: 'a', run_at: now(), attempts: 0}, {queue: 'b', run_at: now(), attempts: 0}, "
             "{queue: 'c', run_at: now(), attempts: 0}, {queue: 'd', run_at: now(), attempts: 0}]")
    assert events(db, "a")["enqueued"] == 1 and events(db, "b")["enqueued"] == 1
    assert events(db, queues.OTHER)["enqueued"] == 2
    assert ("jobs", "c") not in db.tally.snapshot()


def test_a_collection_that_is_not_a_queue_is_not_counted(clock: Clock) -> None:
    db = make(clock, "name text, run_at timestamp")
    db.query("put jobs {name: 'x', run_at: now()}")
    assert db.tally.snapshot() == {}
    assert "ready" not in db.stats()["collections"]["jobs"]


def test_blocks_waiting_to_be_counted_hold_a_bounded_number_of_rows(clock: Clock) -> None:
    """A bulk load with no one reading the counters kept every block's rows alive (4 096 blocks of
    1 000 jobs: four million rows); the rows waiting are bounded, and all of them are counted."""
    db = make(clock, "run_at timestamp @sorted, owner text, attempts int")
    tally = db.tally
    for _ in range(40):
        db.query("put jobs $1", [[{"run_at": clock.t, "attempts": 0}] * 5_000])
        waiting = sum(len(undo) for undo, _ in tally._pending)
        assert waiting <= tally.PENDING_ROWS + 5_000
    assert events(db)["enqueued"] == 200_000
