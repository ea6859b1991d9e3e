"""held/: the waiting lines and their fairness contract (held/lines.py's rules 1-10 and 7b), driven
by a fake driver on a fake clock over a real in-memory database: no sleeps, no real time, exact
counts of looks and runs."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from conftest import TestClock
from fenecdb_server import Database, FenecError
from fenecdb_server.held import HeldClaim, HeldClaims, Outcome
from fenecdb_server.held.port import Timer

JOBS = "create collection jobs (run_at timestamp @sorted, owner text, n int)"
CLAIM = "set jobs {owner: $1, run_at: now() + 30000} where run_at <= now() order run_at limit 1 returning id, owner"
OTHER = "set jobs {owner: $1, run_at: now() + 30000} where run_at <= now() order id limit 1 returning id, owner"
RIDES = "create collection rides (pickup geo @geo, run_at timestamp @sorted, owner text)"
NEAREST = ("set rides {owner: $1, run_at: now() + 30000} "
           "where run_at <= now() order distance(pickup, $2) limit 1 returning id, owner")
OLDEST = "set rides {owner: $1, run_at: now() + 30000} where run_at <= now() order run_at limit 1 returning id, owner"


@dataclass
class Claim:
    """What the fake runner runs: the statement, and when the caller's token expires (ms)."""

    text: str
    params: list[object]
    expires: int | None = None


@dataclass
class Said:
    """An answer: the rows (or `{"affected": n}`), or the error's status."""

    rows: object = None
    status: int = 200


class _Timer:
    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeDriver:
    """Timers on the test's clock, hops and settling pauses queued until `drain`, runs at once
    (or kept in flight while `hold_runs`)."""

    def __init__(self, clock: TestClock, db: Database) -> None:
        self.clock = clock
        self.db = db
        self.timers: list[tuple[float, int, _Timer]] = []
        self.order = itertools.count()
        self.ready: deque[Callable[[], None]] = deque()
        self.hold_runs = False
        self.in_flight: list[tuple[HeldClaim[Said], Callable[[Outcome[Said]], None]]] = []

    def time(self) -> float:
        return self.clock() / 1000

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        t = _Timer(fn)
        heapq.heappush(self.timers, (when, next(self.order), t))
        return t

    def soon(self, fn: Callable[[], None]) -> None:
        self.ready.append(fn)

    def settle(self, fn: Callable[[], None]) -> None:
        self.ready.append(fn)

    def run(self, held: HeldClaim[Said], done: Callable[[Outcome[Said]], None]) -> None:
        if self.hold_runs:
            self.in_flight.append((held, done))
        else:
            done(self.runner(held))

    def runner(self, held: HeldClaim[Said]) -> Outcome[Said]:
        c = held.payload
        assert isinstance(c, Claim)
        return run(self.db, c)

    def finish_runs(self) -> None:
        self.hold_runs = False
        while self.in_flight:
            held, done = self.in_flight.pop(0)
            done(self.runner(held))
        self.drain()

    def drain(self) -> None:
        while self.ready:
            self.ready.popleft()()

    def advance(self, ms: int) -> None:
        """Move the clock by `ms`, firing every timer due on the way, in order."""
        self.drain()
        end = self.clock() + ms
        while True:
            while self.timers and self.timers[0][2].cancelled:
                heapq.heappop(self.timers)
            if not self.timers or self.timers[0][0] * 1000 > end + 1e-6:
                break
            when, _, t = heapq.heappop(self.timers)
            self.clock.set(max(self.clock(), math.ceil(when * 1000 - 1e-6)))
            t.fn()
            self.drain()
        self.clock.set(end)
        self.drain()


def run(db: Database, c: Claim) -> Outcome[Said]:
    """A held run as the HTTP app makes one: a token expired is a final 401; a `require` miss
    took nothing; rows taken end the wait."""
    if c.expires is not None and db.now() >= c.expires:
        return Outcome(True, Said(status=401))
    try:
        result = db.execute([(c.text, c.params)])
    except FenecError as e:
        return Outcome(e.kind != "unmet", Said(status=e.status))
    return Outcome(result.taken > 0, Said(result.answers[0]))


class World:
    def __init__(self) -> None:
        self.clock = TestClock()
        self.db = Database(clock=self.clock)
        self.db.query(JOBS)
        self.db.query(RIDES)
        self.driver = FakeDriver(self.clock, self.db)
        self.lines: HeldClaims[Said] = HeldClaims(self.db, self.driver)
        self.answers: dict[str, Said] = {}
        self.held_claims: dict[str, HeldClaim[Said]] = {}

    def hold(self, name: str, text: str = CLAIM, params: list[object] | None = None, wait_ms: int = 30_000,
             expires: int | None = None) -> HeldClaim[Said]:
        """Run the claim once; if it took nothing, hold it (as http/app.py and in_process.py do)."""
        c = Claim(text, params if params is not None else [name], expires)
        seen = self.db.seq
        first = run(self.db, c)
        assert not first.final, "the first run took something"
        held = HeldClaim(c, first.answer, lambda a: self.answers.__setitem__(name, a))
        self.held_claims[name] = held
        self.lines.hold(self.db.prepare_hold([(text, c.params)]), held, wait_ms, seen)
        self.driver.drain()
        return held

    def put(self, n: int = 1, delay_ms: int = 0, coll: str = "jobs") -> None:
        if coll == "jobs":
            self.db.query("put jobs [" + ", ".join(["{run_at: now() + $1}"] * n) + "]", [delay_ms])
        self.driver.drain()

    def flash(self) -> None:
        """A write whose row would pass the claims' filter but is gone when they are woken: a job
        put and deleted in one block (rule 2b checks the row as it is then: nothing to take)."""
        rid = 1_000_000 + self.db.seq
        self.db.execute([("put jobs {id: $1, run_at: now()}", [rid]), ("del jobs where id = $1", [rid])],
                        block=True)
        self.driver.drain()

    def owner_of(self, name: str) -> object:
        said = self.answers[name]
        assert isinstance(said.rows, list) and len(said.rows) == 1, said
        return said.rows[0]["owner"]


@pytest.fixture
def w() -> World:
    return World()


def test_a_put_wakes_the_waiter_with_one_look_and_one_run(w: World) -> None:
    w.hold("w1")
    looks, runs = w.lines.looks, w.lines.runs
    w.put()
    assert w.owner_of("w1") == "w1"
    assert w.lines.runs - runs == 1
    assert w.lines.looks - looks == 1  # the wake's; no one is left to look after the hand-off
    assert w.lines.held == 0 and not w.lines.lines


def test_rule_1_and_4_one_line_first_come_first_served_and_hand_off(w: World) -> None:
    for name in ("w0", "w1", "w2"):
        w.hold(name)
    assert len(w.lines.lines) == 1 and w.lines.held == 3
    looks, runs = w.lines.looks, w.lines.runs
    w.put(2)
    # the oldest job to the longest-waiting worker, the next at once to the next
    assert [w.answers[n].rows for n in ("w0", "w1")] == [[{"id": 1, "owner": "w0"}], [{"id": 2, "owner": "w1"}]]
    assert "w2" not in w.answers and w.lines.held == 1
    assert w.lines.runs - runs == 2  # runs only where a row was there
    assert w.lines.looks - looks == 3  # the write's look, then one after each hand-off


def test_rule_2_a_write_wakes_only_lines_reading_its_collection(w: World) -> None:
    w.hold("w1")
    looks = w.lines.looks
    w.db.query("put rides {pickup: [29, 41], run_at: now()}")
    w.driver.drain()
    assert w.lines.looks == looks and "w1" not in w.answers
    w.flash()  # a write to jobs whose row is gone by the wake: no look, no run
    assert w.lines.looks == looks and w.lines.runs == 0
    w.put()  # a row that passes: its check is the line's look, and the head runs
    assert w.lines.looks == looks + 1 and w.lines.runs == 1 and w.owner_of("w1") == "w1"


def test_rule_2b_a_row_that_does_not_pass_the_filter_costs_no_look(w: World) -> None:
    w.hold("w1")
    looks, checks = w.lines.looks, w.lines.checks
    w.put(delay_ms=20_000)  # not due: checked, not looked at; the line's timer set for it
    assert w.lines.looks == looks and w.lines.runs == 0 and w.lines.checks == checks + 1
    w.db.query("del jobs where id = 1")  # a delete gives no row: not even checked
    w.driver.drain()
    assert w.lines.checks == checks + 1
    w.put(delay_ms=10_000)  # due sooner: the timer is brought forward to it
    w.driver.advance(9_999)
    assert "w1" not in w.answers and w.lines.runs == 0
    w.driver.advance(1)
    assert w.answers["w1"].rows == [{"id": 2, "owner": "w1"}]


def test_rule_3_writes_in_the_look_gap_are_answered_by_one_look_at_its_end(w: World) -> None:
    w.hold("w0")
    w.hold("w1")
    looks = w.lines.looks
    w.put()  # w0 takes it (the check its look); w1 looks at once, and finds nothing
    assert w.owner_of("w0") == "w0" and w.lines.looks == looks + 2
    for _ in range(20):  # inside the 1 ms gap after that empty look
        w.put()
    assert w.lines.looks == looks + 2 and "w1" not in w.answers
    w.driver.advance(1)
    assert w.lines.looks == looks + 3  # one look for the twenty writes
    assert w.owner_of("w1") == "w1"
    w.driver.advance(10)
    assert w.lines.looks == looks + 3


def test_rule_3_the_gap_never_delays_a_look_due_to_the_clock(w: World) -> None:
    w.put(delay_ms=1)
    w.hold("w1")
    w.driver.advance(1)  # the job comes due inside a look gap opened by a write just before
    assert w.owner_of("w1") == "w1"


def test_rule_5_a_run_that_took_nothing_keeps_its_place(w: World) -> None:
    pair = "set jobs {owner: $1} where run_at <= now() and owner = null order run_at limit 2 returning id require 2"
    w.hold("w0", pair)
    w.hold("w1", pair)
    runs = w.lines.runs
    w.put(1)  # the look sees a row, the head's run misses its `require 2`: it took nothing
    assert w.lines.runs == runs + 1 and not w.answers and w.lines.held == 2
    w.put(1)
    assert w.answers["w0"] == Said([{"id": 1}, {"id": 2}])
    assert "w1" not in w.answers


def test_rule_6_a_delayed_job_wakes_its_line_at_run_at_not_before(w: World) -> None:
    w.put(delay_ms=5000)
    w.hold("w1")
    line = next(iter(w.lines.lines.values()))
    assert line.time_timer is not None and line.moment == w.clock() + 5000
    looks = w.lines.looks
    w.driver.advance(4999)
    assert "w1" not in w.answers and w.lines.looks == looks  # no look before the job's time
    w.driver.advance(1)
    assert w.owner_of("w1") == "w1" and w.lines.looks == looks + 1


def test_rule_6_a_timer_that_fires_early_sleeps_the_rest(w: World) -> None:
    w.put(delay_ms=5000)
    w.hold("w1")
    line = next(iter(w.lines.lines.values()))
    line.moment = w.clock() + 5000
    w.lines.time.due(line)  # the driver fired it 5 s early
    assert "w1" not in w.answers and line.time_timer is not None
    w.driver.advance(5000)
    assert w.owner_of("w1") == "w1"


def test_rule_6_nothing_written_nothing_due_no_timer(w: World) -> None:
    w.hold("w1")
    line = next(iter(w.lines.lines.values()))
    assert line.time_timer is None and line.throttle_timer is None and not w.driver.ready


def test_rule_7_across_lines_the_head_held_longest_runs_first(w: World) -> None:
    for name, text in (("b0", OTHER), ("a0", CLAIM), ("b1", OTHER), ("a1", CLAIM)):
        w.hold(name, text)
    assert len(w.lines.lines) == 2
    for expected in ("b0", "a0", "b1", "a1"):
        w.put(1)
        w.driver.advance(5)  # past any look gap
        assert w.owner_of(expected) == expected
        assert sum(n in w.answers for n in ("b0", "a0", "b1", "a1")) == ("b0", "a0", "b1", "a1").index(expected) + 1


def test_rule_7b_the_claim_that_ranks_the_job_first_gets_it(w: World) -> None:
    points = {"c0": [29.0, 41.0], "c1": [29.5, 41.0], "c2": [30.0, 41.0]}
    for name, at in points.items():
        w.hold(name, NEAREST, [name, at])
    assert w.lines.auctions.biddings  # a claim of its own order: its collection bids
    w.db.query("put rides {pickup: [29.9, 41], run_at: now()}")
    w.driver.drain()
    assert list(w.answers) == ["c2"]  # held last, but nearest
    w.db.query("put rides {pickup: [29.1, 41], run_at: now()}")
    w.driver.advance(1)  # the write fell in the look gap of the pass that found nothing more
    assert list(w.answers) == ["c2", "c0"]
    w.held_claims["c1"]  # still held
    assert w.lines.held == 1


def test_rule_7b_a_line_ordered_by_a_field_ties_and_its_wait_decides(w: World) -> None:
    w.hold("f", OLDEST)  # ranks every row alike: held first, it wins any tie
    w.hold("c", NEAREST, ["c", [29.0, 41.0]])
    w.db.query("put rides {pickup: [29.0, 41], run_at: now()}")
    w.driver.drain()
    assert list(w.answers) == ["f"]
    w.db.query("put rides {pickup: [29.0, 41], run_at: now()}")
    w.driver.advance(1)
    assert list(w.answers) == ["f", "c"]
    assert not w.lines.auctions.biddings  # the last claim of its own order left: dissolved
    assert w.lines.auctions.written.on is False  # and the written-ids history is no longer kept
    assert w.lines.auctions.written.note not in w.db.engine._observers  # nor fed by the engine


def test_rule_7b_a_delayed_ride_goes_to_the_nearest_at_its_time(w: World) -> None:
    w.hold("far", NEAREST, ["far", [31.0, 41.0]])
    w.hold("near", NEAREST, ["near", [29.0, 41.0]])
    w.db.query("put rides {pickup: [29.0, 41], run_at: now() + 3000}")
    w.driver.drain()
    w.driver.advance(2999)
    assert not w.answers
    w.driver.advance(1)
    assert list(w.answers) == ["near"]


def test_rule_8_a_waiter_whose_client_left_is_never_run(w: World) -> None:
    w.hold("w0")
    w.hold("w1")
    w.lines.forget(w.held_claims["w0"])
    assert w.lines.held == 1
    w.put(1)
    assert list(w.answers) == ["w1"]  # the row went to the next; the one gone was never told
    w.put(1)
    assert list(w.answers) == ["w1"] and w.lines.held == 0


def test_rule_8_the_last_waiter_gone_drops_its_line(w: World) -> None:
    w.hold("w0")
    w.lines.forget(w.held_claims["w0"])
    assert not w.lines.lines and not w.lines.by_collection and w.lines.held == 0
    w.put(1)
    assert not w.answers and w.lines.looks == 0


def test_rule_9_a_deadline_during_a_run_is_answered_with_that_run(w: World) -> None:
    w.hold("w0", wait_ms=100)
    w.driver.hold_runs = True
    w.put(1)
    assert len(w.driver.in_flight) == 1
    w.driver.advance(200)  # the deadline falls during the run
    assert "w0" not in w.answers
    w.driver.finish_runs()
    assert w.owner_of("w0") == "w0"  # the row taken is delivered, never leased to no one


def test_the_deadline_answers_what_the_last_run_answered(w: World) -> None:
    w.hold("w0", wait_ms=250)
    w.driver.advance(249)
    assert "w0" not in w.answers
    w.driver.advance(1)
    assert w.answers["w0"] == Said([])
    assert w.lines.held == 0 and not w.lines.lines


def test_a_wait_past_the_ceiling_is_cut_to_30_s(w: World) -> None:
    w.hold("w0", wait_ms=10**9)
    w.driver.advance(29_999)
    assert "w0" not in w.answers
    w.driver.advance(1)
    assert w.answers["w0"] == Said([])


def test_an_expired_token_is_answered_its_last_run_at_the_deadline_and_401_at_a_run(w: World) -> None:
    expires = w.clock() + 1000
    w.hold("idle", wait_ms=5000, expires=expires)
    w.driver.advance(5000)  # no job came: at its deadline, what its last run answered
    assert w.answers["idle"] == Said([])
    w.hold("late", wait_ms=10_000, expires=w.clock() + 1000)
    w.hold("fresh", OTHER, wait_ms=10_000)
    w.driver.advance(2000)
    w.put(1)  # a job comes: the expired token's run is refused, and the job goes to the next line
    assert w.answers["late"] == Said(status=401)
    assert w.owner_of("fresh") == "fresh"


def test_rule_10_shutdown_answers_everyone_and_holds_nothing_after(w: World) -> None:
    w.hold("w0")
    w.hold("w1", OTHER)
    assert w.lines.shutdown() == 2
    assert w.answers == {"w0": Said([]), "w1": Said([])}
    assert not w.lines.lines
    w.hold("w2")
    assert w.answers["w2"] == Said([])  # answered at once


def test_a_write_between_the_first_run_and_the_hold_makes_the_line_look_at_once(w: World) -> None:
    c = Claim(CLAIM, ["w0"])
    seen = w.db.seq
    first = run(w.db, c)
    w.db.query("put jobs {run_at: now()}")  # lands before the claim is held: no wake for it
    held = HeldClaim(c, first.answer, lambda a: w.answers.__setitem__("w0", a))
    w.lines.hold(w.db.prepare_hold([(CLAIM, ["w0"])]), held, 30_000, seen)
    w.driver.drain()
    assert w.owner_of("w0") == "w0"
