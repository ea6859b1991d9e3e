"""Claims from many threads: the seed page's promise that no job is handed to two workers.

Sixteen threads share one in-memory `Database`. Each claims batches of ten with the page's claim statement,
under an owner token of its own per claim, and acks every job it got with the page's ack statement. A ledger
kept by the test records which claim holds each job; a job claimed while another claim still holds it is the
failure this file exists to catch. The second run fails one claimed job in ten with the seed's backoff
statement, moves the test clock on when the queue looks empty, and checks that those jobs come back, are
claimed a second time (attempts 2, the error kept) and are then acked once.
"""

from __future__ import annotations

import threading
import time

from conftest import TestClock

JOBS = 6000
THREADS = 16

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
ACK = "del jobs where id = $1 and owner = $2 require 1"
FAIL = ("set jobs {owner: null, error: $3, run_at: case when attempts >= 5 then null "
        "else now() + 1000 * attempts * attempts end} where id = $1 and owner = $2 require 1")


class Ledger:
    """Which claim holds each job right now, and everything that happened to each job."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: dict[int, str] = {}
        self.claims: dict[int, list[tuple[str, int]]] = {}  # id -> [(owner, attempts)]
        self.acked: dict[int, int] = {}
        self.failed: dict[int, int] = {}
        self.problems: list[str] = []
        # claims sent and not yet booked: while one is, a job may be held that `holder` lacks
        self.claiming = 0
        # acks and fails released here and not yet written: until one lands, its job is still leased
        self.writing = 0

    def claiming_one(self) -> None:
        with self.lock:
            self.claiming += 1

    def claimed(self, owner: str, rows: list[dict]) -> None:
        with self.lock:
            self.claiming -= 1
            for row in rows:
                job = row["id"]
                if job in self.holder:
                    self.problems.append(f"job {job} handed to {owner} while {self.holder[job]} holds it")
                if row["owner"] != owner:
                    self.problems.append(f"job {job} answered with owner {row['owner']!r}, claimed by {owner}")
                self.holder[job] = owner
                self.claims.setdefault(job, []).append((owner, row["attempts"]))

    def release(self, job: int, owner: str, book: dict[int, int]) -> None:
        # released before the ack/fail is sent: until that write lands nobody else can take the job
        with self.lock:
            if self.holder.get(job) != owner:
                self.problems.append(f"{owner} releases job {job} held by {self.holder.get(job)}")
            self.holder.pop(job, None)
            book[job] = book.get(job, 0) + 1
            self.writing += 1

    def written(self) -> None:
        with self.lock:
            self.writing -= 1

    def held(self) -> bool:
        with self.lock:
            return bool(self.holder) or self.claiming > 0 or self.writing > 0


def make_queue(clock: TestClock):
    from fenecdb_server import Database

    db = Database(clock=clock)
    db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
    docs = [{"payload": {"n": n}, "run_at": clock(), "attempts": 0} for n in range(JOBS)]
    assert db.query("put jobs $1", [docs]) == {"affected": JOBS}
    return db


def run_workers(db, clock: TestClock, ledger: Ledger, fail_one_in: int | None) -> None:
    from fenecdb_server import FenecError

    errors: list[BaseException] = []
    advance_lock = threading.Lock()
    # every worker holds its first claim before any goes on: the claims overlap by construction, not
    # by how the scheduler happens to share one core (a thread that re-takes the write lock before
    # the woken ones get the GIL could otherwise drain the queue alone)
    first = threading.Barrier(THREADS)

    def worker(w: int) -> None:
        n = 0
        handled = 0
        try:
            while True:
                n += 1
                owner = f"w{w}:{n}"
                seen = clock()
                ledger.claiming_one()
                rows = db.query(CLAIM, [owner])
                ledger.claimed(owner, rows)
                if n == 1:
                    first.wait(timeout=120)
                if not rows:
                    left = db.query("get jobs count")[0]["count"]
                    if left == 0:
                        return
                    # a claim answered but not booked yet, or an ack released but not yet written, holds
                    # its jobs too: moving the clock then could lapse their lease (one GIL slice fits
                    # the sixty empty claims that move it past the 30 s lease)
                    if ledger.held():
                        # other workers still hold jobs: wait for their acks, with the clock standing still
                        time.sleep(0.0005)
                        continue
                    # no job is held and none is ready: the rest wait for their backoff; move time on once
                    with advance_lock:
                        if clock() == seen:
                            clock.advance(500)
                    continue
                for row in rows:
                    handled += 1
                    first_try = row["attempts"] == 1
                    if fail_one_in and first_try and handled % fail_one_in == 0:
                        ledger.release(row["id"], owner, ledger.failed)
                        assert db.query(FAIL, [row["id"], owner, f"boom {row['id']}"]) == {"affected": 1}
                    else:
                        ledger.release(row["id"], owner, ledger.acked)
                        assert db.query(ACK, [row["id"], owner]) == {"affected": 1}
                    ledger.written()
        except (AssertionError, FenecError, threading.BrokenBarrierError) as e:  # the test fails on any of these
            errors.append(e)
            first.abort()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker never finished"
    assert not errors, errors[:3]


def test_sixteen_threads_never_share_a_job_and_ack_each_once():
    clock = TestClock()
    db = make_queue(clock)
    ledger = Ledger()
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def reader() -> None:
        # a read beside the claims sees whole statements: a job has an owner exactly when it was claimed
        # (attempts 1), and the queue only ever shrinks
        while not stop.is_set():
            torn = db.query("get jobs where owner is not null and attempts = 0 or owner is null and attempts != 0 count")
            left = db.query("get jobs count")
            seen.append((torn[0]["count"], left[0]["count"]))

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        try:
            run_workers(db, clock, ledger, fail_one_in=None)
        finally:
            stop.set()
            watcher.join(timeout=60)
        assert seen and all(torn == 0 for torn, _ in seen)
        counts = [left for _, left in seen]
        assert counts == sorted(counts, reverse=True)
        assert ledger.problems == []
        assert sorted(ledger.claims) == list(range(1, JOBS + 1))
        assert all(len(c) == 1 and c[0][1] == 1 for c in ledger.claims.values())
        assert ledger.acked == {job: 1 for job in range(1, JOBS + 1)}
        assert db.query("get jobs count") == [{"count": 0}]
        owners = {c[0][0].split(":")[0] for c in ledger.claims.values()}
        assert len(owners) == THREADS, owners  # each took its first claim while the others held theirs
    finally:
        db.close()


def test_failed_claims_back_off_and_are_claimed_again():
    clock = TestClock()
    db = make_queue(clock)
    ledger = Ledger()
    try:
        run_workers(db, clock, ledger, fail_one_in=10)
        assert ledger.problems == []
        assert sorted(ledger.claims) == list(range(1, JOBS + 1))
        failed = set(ledger.failed)
        # one claimed job in ten failed, each at its first attempt
        assert abs(len(failed) - JOBS // 10) <= THREADS, len(failed)
        assert all(count == 1 for count in ledger.failed.values())
        for job, claims in ledger.claims.items():
            if job in failed:
                assert [a for _, a in claims] == [1, 2], (job, claims)
                assert claims[0][0] != claims[1][0]
            else:
                assert [a for _, a in claims] == [1], (job, claims)
        assert ledger.acked == {job: 1 for job in range(1, JOBS + 1)}
        assert db.query("get jobs count") == [{"count": 0}]
        # the retries waited for their backoff: the clock had to move, but less than a lease
        moved = clock() - TestClock()()
        assert 1000 <= moved < 30000, moved
    finally:
        db.close()


def test_retried_job_keeps_its_error_and_counts_attempts():
    clock = TestClock()
    from fenecdb_server import Database, FenecError

    db = Database(clock=clock)
    try:
        db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
        db.query("put jobs {payload: {n: 1}, run_at: now(), attempts: 0}")
        [row] = db.query(CLAIM, ["a:1"])
        assert (row["id"], row["attempts"], row["owner"]) == (1, 1, "a:1")
        assert db.query(FAIL, [1, "a:1", "smtp timeout"]) == {"affected": 1}
        assert db.query(CLAIM, ["b:1"]) == []  # backing off: 1 s
        clock.advance(999)
        assert db.query(CLAIM, ["b:1"]) == []
        clock.advance(1)
        [row] = db.query(CLAIM, ["b:1"])
        assert (row["attempts"], row["error"], row["owner"]) == (2, "smtp timeout", "b:1")
        try:
            db.query(ACK, [1, "a:1"])
            raise AssertionError("the first claim's ack should be refused")
        except FenecError as e:
            assert e.status == 412
        assert db.query(ACK, [1, "b:1"]) == {"affected": 1}
    finally:
        db.close()
