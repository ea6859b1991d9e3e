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


def _row_by_row(tally: Any, undo: list, ops: list) -> None:
    """The counting rule, spelled out: each row a block changed, from its first state in the
    undo list to its last in the ops, through `Tally._one`."""
    before: dict[tuple[str, int], dict | None] = {}
    for coll, rid, old in undo:
        before.setdefault((coll.name, rid), old)
    after: dict[tuple[str, int], dict | None] = {}
    for op in ops:
        if op[0] == "p":
            after[(op[1], op[2])] = op[3]
        elif op[0] == "d":
            after[(op[1], op[2])] = None
    for key, old in before.items():
        shape = tally.shape(key[0])
        if shape is not None and key in after:
            tally._one(key[0], shape, old, after[key])


@pytest.mark.sources  # a spy on the engine's counter (conftest)
@pytest.mark.parametrize("seed", range(6))
def test_the_counting_of_a_block_follows_the_row_by_row_rule(clock: Clock, seed: int) -> None:
    """`Tally._block` counts a block one collection at a time (`_part`), the workers' everyday writes
    among them (a put, a claim, an ack in a collection without a queue field); random blocks of every kind, in collections with and
    without one, rows written twice in a block included, count as the rule says."""
    import random

    from fenecdb_server.engine.queues import Tally

    rnd = random.Random(seed)
    db = Database(clock=clock)
    db.query("create collection jobs (run_at timestamp @sorted, owner text, attempts int, error text, "
             "done_at timestamp)")
    db.query("create collection tasks (queue text, run_at timestamp @sorted, owner text, attempts int)")
    db.query("create collection notes (text text)")
    blocks: list[tuple[list, list]] = []
    noted = db.tally.note
    db.tally.note = lambda undo, ops: (blocks.append((list(undo), list(ops))), noted(undo, ops))  # type: ignore[method-assign]

    def one(coll: str) -> list[tuple[str, list[Any]]]:
        pick = rnd.randrange(9)
        owner = rnd.choice(["w1", "w2"])
        if pick == 0:
            return [(f"put {coll} {{run_at: now() - $1, attempts: 0}}", [rnd.randrange(3)])]
        if pick == 1:
            return [(f"put {coll} [{{run_at: now(), attempts: 0, owner: 'w1'}}, {{run_at: null, attempts: 2}}]", [])]
        if pick == 2:
            return [(f"set {coll} {{owner: $1, run_at: now() + 30000, attempts: attempts + 1}} "
                     f"where run_at <= now() order run_at limit {rnd.randrange(1, 4)}", [owner])]
        if pick == 3:
            return [(f"del {coll} where owner = $1 and id = $2", [owner, rnd.randrange(1, 40)])]
        if pick == 4:
            return [(f"set {coll} {{owner: null, run_at: case when attempts >= 2 then null else now() end}} "
                     f"where owner = $1 and id = $2", [owner, rnd.randrange(1, 40)])]
        if pick == 5:
            return [(f"set {coll} {{run_at: now() + 5000}} where id = $1", [rnd.randrange(1, 40)])]
        if pick == 6:  # a row written twice in one block: claimed, then acked
            rid = rnd.randrange(1, 40)
            return [(f"set {coll} {{owner: $1, attempts: attempts + 1}} where id = $2", [owner, rid]),
                    (f"del {coll} where id = $1", [rid])]
        if pick == 7:
            return [(f"set {coll} {{attempts: 0, owner: null}} where run_at is null", [])]
        return [("put notes {text: 'x'}", [])]

    for _ in range(400):
        clock.t += rnd.randrange(0, 3000)
        statements = [s for _ in range(rnd.randrange(1, 4)) for s in one(rnd.choice(["jobs", "tasks"]))]
        if rnd.randrange(3) == 0:
            for i, (text, params) in enumerate(statements):
                if text.startswith("put tasks"):
                    statements[i] = (text.replace("attempts: 0", f"attempts: 0, queue: '{rnd.choice('ab')}'"),
                                     params)
        db.batch(statements)
    assert len(blocks) > 200  # a block that wrote nothing is not noted
    fast, rule = Tally(db.collections), Tally(db.collections)
    for undo, ops in blocks:
        fast._block(undo, ops)
        _row_by_row(rule, undo, ops)
    assert fast.counters == rule.counters
    assert sum(c[1] for c in rule.counters.values()) > 0 and sum(c[2] for c in rule.counters.values()) > 0
