"""held/lines.py rule 2b: a write makes a held line look only when a row it put passes the line's
filter, and a written row is checked only against the lines that may want it. Work is counted
(the lines' looks, runs and row checks), never timed: what a put costs the held lines must not
grow with the jobs ready nor with the claims that match none of what it wrote."""

from __future__ import annotations

import pytest
from conftest import TestClock
from fenecdb_server import Database
from fenecdb_server.held import HeldClaim, HeldClaims

from unit.test_held import Claim, FakeDriver, Said, run

QUEUE = "create collection jobs (queue text @hash, run_at timestamp @sorted, owner text, attempts int)"
# the worker policy's claim with its attempts bound: one line per value
KEYED = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where queue = $2 and attempts = $3 and run_at <= now() order run_at limit 10 returning id, owner")
# no equality term: every row written to `jobs` is checked against it
LOOSE = ("set jobs {owner: $1, run_at: now() + 30000} "
         "where attempts > $2 and run_at <= now() order run_at limit 1 returning id, owner")


class World:
    def __init__(self, ready: int) -> None:
        self.clock = TestClock()
        self.db = Database(clock=self.clock)
        self.db.query(QUEUE)
        for start in range(0, ready, 1000):
            n = min(1000, ready - start)
            self.db.query("put jobs [" + ", ".join(["{queue: 'a', run_at: now(), attempts: 0}"] * n) + "]")
        self.driver = FakeDriver(self.clock, self.db)
        self.lines: HeldClaims[Said] = HeldClaims(self.db, self.driver)
        self.answers: dict[str, Said] = {}

    def hold(self, name: str, text: str, params: list[object]) -> None:
        c = Claim(text, params)
        seen = self.db.seq
        first = run(self.db, c)
        assert not first.final, "the first run took something"
        waiter = HeldClaim(c, first.answer, lambda a: self.answers.__setitem__(name, a))
        self.lines.hold(self.db.prepare_hold([(text, params)]), waiter, 30_000, seen)
        self.driver.drain()

    def put(self, queue: str, attempts: int = 0, run_at: str = "now()") -> None:
        self.db.query(f"put jobs {{queue: $1, run_at: {run_at}, attempts: $2}}", [queue, attempts])
        self.driver.drain()

    def work(self) -> tuple[int, int, int]:
        return self.lines.looks, self.lines.checks, self.lines.runs


def puts_cost(ready: int, held: int, text: str, params: list[list[object]]) -> tuple[int, int, int]:
    """What ten puts into queue `b` cost the held lines: (looks, checks, runs)."""
    w = World(ready)
    for i in range(held):
        w.hold(f"w{i}", text, [f"w{i}", *params[i]])
    assert w.lines.held == held
    before = w.work()
    for _ in range(10):
        w.put("b")
    after = w.work()
    assert w.lines.held == held and not w.answers
    return after[0] - before[0], after[1] - before[1], after[2] - before[2]


def test_a_put_costs_the_lines_its_row_cannot_concern_nothing() -> None:
    small = puts_cost(100, 5, KEYED, [["c", 1000 + i] for i in range(5)])
    large = puts_cost(3000, 60, KEYED, [["c", 1000 + i] for i in range(60)])
    # not a look, not a check: the row carries queue 'b', and every line is keyed on 'c'
    assert small == large == (0, 0, 0)


def test_lines_with_no_equality_term_are_checked_per_row_never_read_again() -> None:
    small = puts_cost(100, 5, LOOSE, [[1000 + i] for i in range(5)])
    large = puts_cost(3000, 60, LOOSE, [[1000 + i] for i in range(60)])
    # one check of the row put per line, whatever is ready: no look reads the collection
    assert small == (0, 10 * 5, 0)
    assert large == (0, 10 * 60, 0)


def test_the_row_that_carries_a_lines_value_wakes_that_line_alone() -> None:
    w = World(1000)
    for i in range(50):
        w.hold(f"w{i}", KEYED, [f"w{i}", "c", 1000 + i])
    looks, checks, runs = w.work()
    w.put("c", attempts=1017)
    assert list(w.answers) == ["w17"]
    said = w.answers["w17"].rows
    assert isinstance(said, list) and len(said) == 1 and said[0]["owner"] == "w17"
    # one check (the line keyed on 1017), its look, its run, and one check of the row its run
    # updated (attempts 1018, leased: the line keyed on 1018 cannot take it yet); the 48 others
    # never heard of either
    assert w.work() == (looks + 1, checks + 2, runs + 1)


def test_a_row_put_not_yet_due_sets_the_lines_timer_and_is_taken_then() -> None:
    w = World(500)
    w.hold("w", KEYED, ["w", "c", 7])
    looks = w.lines.looks
    w.put("c", attempts=7, run_at="now() + 5000")
    assert w.lines.looks == looks and not w.answers
    w.driver.advance(4_999)
    assert not w.answers
    w.driver.advance(1)
    said = w.answers["w"].rows
    assert isinstance(said, list) and [r["owner"] for r in said] == ["w"]


def test_an_update_that_brings_a_row_into_the_filter_wakes_the_line() -> None:
    w = World(10)
    w.hold("w", KEYED, ["w", "c", 3])
    w.db.query("set jobs {queue: 'c', attempts: 3} where id = 4")  # a row updated into the line's reach
    w.driver.drain()
    said = w.answers["w"].rows
    assert isinstance(said, list) and [r["id"] for r in said] == [4]


@pytest.mark.parametrize("ready", [100, 3000])
def test_a_claim_beside_a_read_looks_once_then_is_checked(ready: int) -> None:
    """A batch cannot say from its first run that no row passed (a `require` may have stopped
    it): its line looks at the first write, and from then on only checks."""
    w = World(ready)
    batch = [("get jobs where queue = 'z'", []), (KEYED, ["w", "c", 5])]
    seen = w.db.seq
    c = Claim(KEYED, ["w", "c", 5])
    waiter = HeldClaim(c, Said([]), lambda a: w.answers.__setitem__("w", a))
    w.lines.hold(w.db.prepare_hold(batch), waiter, 30_000, seen)
    w.driver.drain()
    looks = w.lines.looks
    for _ in range(5):
        w.put("b")
        w.driver.advance(2)  # past the look gap
    assert w.lines.looks == looks + 1 and not w.answers


def time_wakes_cost(ready: int) -> tuple[int, int, int]:
    """Ten jobs of queue `b` come due one after another, 100 ms apart, beside a line over queue
    `a`'s `ready` jobs that wants none of them: what the line's wakes by the clock cost."""
    w = World(ready)
    for i in range(10):
        w.put("b", run_at=f"now() + {100 * (i + 1)}")
    w.hold("w", KEYED, ["w", "a", 5])  # queue a, but no job of it has 5 attempts
    before = w.work()
    wakeups = w.lines.wakeups
    w.driver.advance(1_000)
    assert w.lines.wakeups - wakeups == 10 and not w.answers  # one wake a job that came due
    after = w.work()
    return after[0] - before[0], after[1] - before[1], after[2] - before[2]


def test_a_wake_by_the_clock_checks_the_rows_that_came_due_not_every_ready_row() -> None:
    small, large = time_wakes_cost(100), time_wakes_cost(3000)
    # the first wake looks (nothing yet says when the line last read the collection); each of
    # the nine after checks the one job that came due since, a range of the run_at index
    assert small == large == (1, 9, 0)


def test_a_job_that_comes_due_after_a_look_by_the_clock_is_taken_at_its_time() -> None:
    w = World(50)
    w.put("b", run_at="now() + 100")  # wakes the line first: its look finds nothing
    w.put("c", attempts=7, run_at="now() + 200")
    w.hold("w", KEYED, ["w", "c", 7])
    w.driver.advance(199)
    assert not w.answers and w.lines.looks == 1
    w.driver.advance(1)
    said = w.answers["w"].rows
    assert isinstance(said, list) and [r["owner"] for r in said] == ["w"]
