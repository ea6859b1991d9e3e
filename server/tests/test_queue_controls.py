"""Pausing a queue, caps and rate limits (docs/queues.md "Pausing a queue", "Caps and rate limits"),
in process: sixteen worker threads on a capped queue, a rate limit over a dozen windows turned by the
test clock, held claims kept by a pause and woken in their order, the controls across a restart (the
log replayed, and a snapshot), and the `control` grant. Every count is of rows read from the
database; nothing waits for a time to pass but under a 30 s deadline."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Caller, TestClock, held, until
from fenecdb_server import Database, FenecError
from fenecdb_server.policy import Policy

JOBS = ("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, "
        "queue text, tenant text)")
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit %d returning id, queue, tenant")
ACK = "del jobs where id = $1 and owner = $2 require 1"
LEASED = "get jobs where run_at > now() and owner != null count"
THREADS = 16


def put_jobs(db: Database, n: int, **fields: object) -> None:
    docs = [{"payload": {"n": i}, "run_at": db.now(), "attempts": 0, **fields} for i in range(n)]
    db.query("put jobs $1", [docs])


def tenants(db: Database, n: int, names: list[str]) -> None:
    docs = [{"payload": {"n": i}, "run_at": db.now(), "attempts": 0, "tenant": names[i % len(names)]}
            for i in range(n)]
    db.query("put jobs $1", [docs])


@pytest.fixture
def db(clock: TestClock) -> Database:
    d = Database(clock=clock)
    d.query(JOBS)
    return d


# ---------------------------------------------------------------- caps


def workers(db: Database, step: Callable[[str], bool]) -> list[BaseException]:
    """THREADS threads each running `step(name)` until it answers False; their errors."""
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            while step(name):
                pass
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    return errors


def test_sixteen_workers_never_hold_more_than_the_cap(db: Database) -> None:
    put_jobs(db, 600)
    db.query("limit queue jobs to 5 leased")
    seen: list[int] = []
    done: list[int] = []
    lock = threading.Lock()
    counter = iter(range(10**9))

    def step(name: str) -> bool:
        owner = f"{name}:{next(counter)}"
        got = db.query(CLAIM % 3, [owner])
        leased = db.query(LEASED)[0]["count"]
        with lock:
            seen.append(leased)
        for job in got:
            db.query(ACK, [job["id"], owner])
            with lock:
                done.append(job["id"])
        with lock:
            return len(done) < 600

    assert workers(db, step) == []
    assert sorted(done) == list(range(1, 601))  # every job, once
    assert max(seen) <= 5
    assert db.query("get jobs count")[0]["count"] == 0


def test_a_cap_per_tenant_counts_each_tenant_apart(db: Database) -> None:
    tenants(db, 300, ["a", "b", "c"])
    db.query("limit queue jobs to 2 leased per tenant")
    problems: list[str] = []
    done: list[int] = []
    lock = threading.Lock()
    counter = iter(range(10**9))

    def step(name: str) -> bool:
        owner = f"{name}:{next(counter)}"
        got = db.query(CLAIM % 4, [owner])
        rows = db.query("get jobs select tenant where run_at > now() and owner != null")
        for t in "abc":
            n = sum(1 for r in rows if r["tenant"] == t)
            if n > 2:
                with lock:
                    problems.append(f"tenant {t}: {n} leased")
        for job in got:
            db.query(ACK, [job["id"], owner])
        with lock:
            done.extend(j["id"] for j in got)
            return len(done) < 300

    assert workers(db, step) == []
    assert problems == []
    assert sorted(done) == list(range(1, 301))


def test_a_claim_takes_fewer_and_a_lapsed_lease_stops_counting(db: Database, clock: TestClock) -> None:
    put_jobs(db, 10)
    db.query("limit queue jobs to 3 leased")
    assert [r["id"] for r in db.query(CLAIM % 10, ["w1"])] == [1, 2, 3]
    assert db.query(CLAIM % 10, ["w2"]) == []
    db.query(ACK, [1, "w1"])  # a lease ended: one place
    assert [r["id"] for r in db.query(CLAIM % 10, ["w2"])] == [4]
    clock.advance(30_001)  # every lease lapsed: they are ready again, and count no more
    got = [r["id"] for r in db.query(CLAIM % 10, ["w3"])]
    assert got == [5, 6, 7]  # the oldest ready first; 2, 3 and 4 came due again at their lease's end
    assert db.query(LEASED)[0]["count"] == 3


def test_a_batch_counts_its_own_claims(db: Database) -> None:
    put_jobs(db, 10)
    db.query("limit queue jobs to 4 leased")
    got = db.batch([(CLAIM % 3, ["w1"]), (CLAIM % 3, ["w2"])])
    assert [len(g["rows"]) for g in got] == [3, 1]
    db.batch([(ACK, [1, "w1"]), (CLAIM % 3, ["w3"])])
    assert db.query(LEASED)[0]["count"] == 4


def test_a_named_queue_and_the_collection_both_hold(db: Database) -> None:
    put_jobs(db, 6, queue="mail")
    put_jobs(db, 6, queue="img")
    db.query('limit queue jobs "mail" to 1 leased')
    db.query("limit queue jobs to 3 leased")
    got = db.query(CLAIM % 10, ["w1"])
    assert [r["queue"] for r in got] == ["mail", "img", "img"]  # mail's one, then the rest of the cap


# ---------------------------------------------------------------- rate limits


def test_a_rate_limit_holds_in_each_of_twelve_windows(db: Database, clock: TestClock) -> None:
    clock.set(1_000_000)  # a window's start: windows are [k * 1000, (k + 1) * 1000)
    tenants(db, 1000, ["a", "b"])
    db.query("limit queue jobs to 7 claimed per 1s per tenant")
    per_window: dict[tuple[int, str], int] = {}
    lock = threading.Lock()
    counter = iter(range(10**9))
    for _window in range(12):
        window = db.now() // 1000
        stop = threading.Event()

        def step(name: str, window: int = window, stop: threading.Event = stop) -> bool:
            got = db.query(CLAIM % 3, [f"{name}:{next(counter)}"])
            with lock:
                for r in got:
                    key = (window, r["tenant"])
                    per_window[key] = per_window.get(key, 0) + 1
                if not got:
                    stop.set()
            return not stop.is_set()

        assert workers(db, step) == []
        clock.advance(400)  # within the window: still nothing
        assert db.query(CLAIM % 3, ["late"]) == []
        clock.advance(600)  # the next window
    assert len(per_window) == 24
    assert set(per_window.values()) == {7}  # never past 7 a tenant a window, and 7 taken in each
    claimed = db.query("get jobs where attempts = 1 count")[0]["count"]
    assert claimed == 12 * 2 * 7


def test_a_held_claim_stopped_by_a_rate_limit_is_woken_when_the_window_turns() -> None:
    db = Database()
    db.query(JOBS)
    put_jobs(db, 5)
    db.query("limit queue jobs to 1 claimed per 200ms")
    first = db.query(CLAIM % 1, ["w1"])
    window = db.now() // 200
    assert len(first) == 1
    got = db.query(CLAIM % 1, ["w2"], wait=30_000)  # held until the window turns
    assert [r["id"] for r in got] == [2]
    assert db.now() // 200 > window


def test_a_rolled_back_block_gives_its_claims_back(db: Database, clock: TestClock) -> None:
    clock.set(5_000_000)
    put_jobs(db, 10)
    db.query("limit queue jobs to 3 claimed per 1m")
    with pytest.raises(FenecError):
        db.batch([(CLAIM % 2, ["w1"]), ("del jobs where id = 99 require 1", [])])
    assert len(db.query(CLAIM % 10, ["w1"])) == 3


# ---------------------------------------------------------------- pause and resume


def test_a_paused_queue_hands_out_nothing_and_puts_still_land(db: Database) -> None:
    put_jobs(db, 3, queue="mail")
    put_jobs(db, 3, queue="img")
    db.query('pause queue jobs "mail"')
    put_jobs(db, 2, queue="mail")  # puts land
    assert db.query("get jobs where queue = 'mail' count")[0]["count"] == 5
    got = db.query(CLAIM % 10, ["w1"])
    assert {r["queue"] for r in got} == {"img"}
    assert db.query("get jobs where queue = 'mail' and owner = null count")[0]["count"] == 5
    db.query("pause queue jobs")
    db.query("set jobs {owner: null, run_at: now()} where queue = 'img'")
    assert db.query(CLAIM % 10, ["w2"]) == []
    db.query("resume queue jobs")
    assert {r["queue"] for r in db.query(CLAIM % 10, ["w2"])} == {"img"}
    db.query('resume queue jobs "mail"')
    assert len(db.query(CLAIM % 10, ["w3"])) == 5


def test_held_claims_stay_held_while_paused_and_resume_wakes_them_in_order(db: Database) -> None:
    db.query("pause queue jobs")
    put_jobs(db, 3)
    waiting = []
    for i in range(3):
        waiting.append(Caller(lambda i=i: db.query(CLAIM % 1, [f"w{i}"], wait=30_000)))
        until(lambda: held(db) == len(waiting))
    lines = db._in_process.lines
    looks = lines.looks
    put_jobs(db, 1)  # a write that wakes them: still paused, still held
    until(lambda: lines.looks > looks)
    assert held(db) == 3
    assert db.query(LEASED)[0]["count"] == 0
    db.query("resume queue jobs")
    assert [w.result() for w in waiting] == [[{"id": i + 1, "queue": None, "tenant": None}] for i in range(3)]


def test_a_held_claim_stopped_by_a_cap_is_woken_by_an_ack(db: Database) -> None:
    put_jobs(db, 3)
    db.query("limit queue jobs to 1 leased")
    (job,) = db.query(CLAIM % 1, ["w1"])
    waiting = Caller(lambda: db.query(CLAIM % 1, ["w2"], wait=30_000))
    until(lambda: held(db) == 1)
    db.query(ACK, [job["id"], "w1"])
    assert waiting.result() == [{"id": 2, "queue": None, "tenant": None}]


# ---------------------------------------------------------------- durable, shown, granted


def test_controls_survive_a_restart_replayed_and_from_a_snapshot(tmp_path: Path) -> None:
    path = str(tmp_path / "q.fenec")
    db = Database(path)
    db.query(JOBS)
    put_jobs(db, 4, queue="mail")
    db.query('pause queue jobs "mail"')
    db.query("limit queue jobs to 2 leased per tenant")
    db.query("limit queue jobs to 9 claimed per 1m")
    shown = db.query("show queues")
    assert shown[0]["limits"] == ["2 leased per tenant", "9 claimed per 1m"] and shown[1]["paused"] is True
    db.close()
    db = Database(path)  # the log replayed
    assert db.query("show queues") == shown
    assert db.query(CLAIM % 10, ["w1"]) == []
    db.compact()
    db.close()
    db = Database(path)  # the snapshot read
    assert db.query("show queues") == shown
    assert db.query(CLAIM % 10, ["w1"]) == []
    db.query('resume queue jobs "mail"')
    assert len(db.query(CLAIM % 10, ["w1"])) == 2  # two leased per tenant (all of them null)
    db.close()


def test_dropping_a_collection_forgets_its_controls(db: Database) -> None:
    db.query("pause queue jobs")
    db.query("drop collection jobs")
    db.query(JOBS)
    put_jobs(db, 1)
    assert len(db.query(CLAIM % 1, ["w1"])) == 1


def test_show_queues_and_the_refusals(db: Database) -> None:
    db.query("create collection notes (text text)")
    db.query("create collection plain (run_at timestamp @sorted, owner text, attempts int)")
    assert db.query('limit queue jobs "mail" to 3 claimed per 10s per tenant') == {
        "message": 'queue jobs "mail" limited to 3 claimed per 10s per tenant'}
    assert db.query("show queues") == [
        {"collection": "jobs", "queue": None, "paused": False, "limits": []},
        {"collection": "jobs", "queue": "mail", "paused": False, "limits": ["3 claimed per 10s per tenant"]},
        {"collection": "plain", "queue": None, "paused": False, "limits": []},
    ]
    for text, status in [("pause queue nowhere", 404), ("pause queue notes", 400),
                         ('pause queue plain "x"', 400), ("limit queue jobs to 0 leased", 400),
                         ("limit queue jobs to 1 leased per nothing", 400),
                         ("limit queue jobs to 1 leased per payload", 400),
                         ("limit queue jobs to 1 claimed per 0s", 400)]:
        with pytest.raises(FenecError) as e:
            db.query(text)
        assert e.value.status == status, text
    assert db.query('unlimit queue jobs "mail"') == {"message": 'queue jobs "mail" unlimited'}
    assert db.query("show queues")[1]["collection"] == "plain"


POLICY = """
jobs read                                  where queue = $jwt.queue  for worker
jobs update(owner, run_at, attempts)       where queue = $jwt.queue  for worker
jobs read,control                                                     for ops
"""


def test_a_worker_token_cannot_pause_and_its_claims_are_capped(db: Database) -> None:
    policy = Policy.parse(POLICY)
    worker = policy.scope_for({"sub": "w", "role": "worker", "queue": "mail"})
    ops = policy.scope_for({"sub": "o", "role": "ops"})
    put_jobs(db, 5, queue="mail")
    with pytest.raises(FenecError) as e:
        db.execute([('pause queue jobs "mail"', [])], scope=worker)
    assert e.value.status == 403
    assert db.execute([('limit queue jobs "mail" to 2 leased', [])], scope=ops).answers[0]["message"]
    got = db.execute([(CLAIM % 5, ["w:1"])], scope=worker).answers[0]
    assert len(got) == 2
    db.execute([('pause queue jobs "mail"', [])], scope=ops)
    db.query("set jobs {owner: null, run_at: now()}")
    assert db.execute([(CLAIM % 5, ["w:2"])], scope=worker).answers[0] == []
    assert db.execute([("show queues", [])], scope=worker).answers[0][1]["paused"] is True
    with pytest.raises(FenecError) as e:
        Policy.parse("jobs control where queue = 'x'")
    assert "takes no `where`" in e.value.message


def test_a_cap_first_counted_inside_a_block_counts_the_block_once(db: Database) -> None:
    put_jobs(db, 10)
    db.query("limit queue jobs to 3 leased")
    # the book of leases is first built by the second claim, after the first wrote in the same block
    got = db.batch([(CLAIM % 2, ["w1"]), (CLAIM % 5, ["w2"])])
    assert [len(g["rows"]) for g in got] == [2, 1]
    with pytest.raises(FenecError):  # a block that fails leaves no lease counted
        db.batch([(ACK, [1, "w1"]), (CLAIM % 5, ["w3"]), ("del jobs where id = 99 require 1", [])])
    assert db.query(CLAIM % 5, ["w4"]) == []
    db.query(ACK, [1, "w1"])
    assert len(db.query(CLAIM % 5, ["w4"])) == 1
