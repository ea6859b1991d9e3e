"""The claim's fast path answers what the general plan answers.

A claim (`set jobs {...} where run_at <= now() order run_at limit n returning *`) over an `@sorted`
int or timestamp field reads its page straight off the packed index, moves the page's entries as two
slices, skips converting values already of their field's type, and renders answers from a blank row.
Each of those has a general twin: twin A declares `@sorted`, twin B declares no index and so scans,
sorts and moves one row at a time. Hypothesis draws the queue (nulls, ties, values at the edge of
the 64-bit range) and a run of claims, acks, failures with backoff and clock steps; every answer,
every error and the final rows must be equal.
"""

from __future__ import annotations

from conftest import SPEC_EPOCH_MS, TestClock
from fenecdb_server import Database, FenecError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NOW = SPEC_EPOCH_MS
INT_MAX = 2**63 - 1
RUN_AT = [None, NOW - 90_000, NOW - 1000, NOW - 1000, NOW, NOW + 1, NOW + 30_000, NOW + 3_600_000]
ATTEMPTS = [None, 0, 0, 1, 5, INT_MAX - 1, INT_MAX]

CLAIMS = [
    "set jobs {{owner: $1, run_at: now() + 30000, attempts: attempts + 1}} "
    "where run_at <= now() order run_at limit {n} returning *",
    "set jobs {{owner: $1, run_at: now() + 30000}} where run_at <= now() order run_at limit {n} returning *",
    "set jobs {{owner: $1, attempts: attempts + 1}} where run_at < now() order run_at limit {n} returning *",
    "set jobs {{owner: $1, run_at: null}} where run_at <= now() - 1000 order run_at limit {n}",
    "set jobs {{owner: $1, n: n + 2}} where n >= 0 order n limit {n} returning id, n, owner",
    "set jobs {{owner: $1, run_at: now() + 5000}} where run_at > now() - 100000 and run_at <= now() "
    "order run_at limit {n} returning *",
    "get jobs where run_at <= now() order run_at limit {n}",
]
FAIL = "set jobs {run_at: now() + 1000 * attempts, error: 'boom', owner: null} where id = $1 returning *"
ACK = "del jobs where id = $1 and owner = $2 require 1"


def create(indexed: bool) -> str:
    s = " @sorted" if indexed else ""
    return (f"create collection jobs (payload json, run_at timestamp{s}, owner text, attempts int, "
            f"error text, n int{s})")


@st.composite
def queues(draw):
    n = draw(st.integers(0, 40))
    return [{"payload": {"i": i}, "run_at": draw(st.sampled_from(RUN_AT)),
             "attempts": draw(st.sampled_from(ATTEMPTS)),
             "n": draw(st.sampled_from([None, -1, 0, 3, 3, INT_MAX - 1, INT_MAX]))} for i in range(n)]


@st.composite
def steps(draw):
    kind = draw(st.sampled_from(["claim", "claim", "claim", "ack", "fail", "clock"]))
    if kind == "claim":
        return ("claim", draw(st.sampled_from(CLAIMS)).format(n=draw(st.integers(1, 12))), draw(st.integers(0, 3)))
    if kind == "clock":
        return ("clock", draw(st.sampled_from([1, 999, 1000, 30_000, 31_000])), 0)
    return (kind, None, draw(st.integers(1, 40)))


def outcome(db: Database, text: str, params: list):
    try:
        return ("ok", db.query(text, params))
    except FenecError as e:
        return ("error", e.status, e.message)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(queue=queues(), run=st.lists(steps(), min_size=1, max_size=14))
def test_the_fast_claim_answers_as_the_general_plan(queue, run):
    clocks = TestClock(), TestClock()
    twins = Database(clock=clocks[0]), Database(clock=clocks[1])
    try:
        for db, indexed in zip(twins, (True, False), strict=True):
            db.query(create(indexed))
            if queue:
                db.query("put jobs $1", [queue])
        for kind, text, arg in run:
            if kind == "clock":
                for c in clocks:
                    c.advance(arg)
                continue
            if kind == "claim":
                text, params = text, [f"w{arg}"]
            elif kind == "ack":
                text, params = ACK, [arg, "w0"]
            else:
                text, params = FAIL, [arg]
            got = [outcome(db, text, params) for db in twins]
            assert got[0] == got[1], text
        assert outcome(twins[0], "get jobs order id", []) == outcome(twins[1], "get jobs order id", [])
        # and the index still holds exactly the rows: a walk in order equals the sort
        walked = twins[0].query("get jobs select id where run_at <= now() + 100000000 order run_at")
        sorted_ = twins[1].query("get jobs select id where run_at <= now() + 100000000 order run_at")
        assert walked == sorted_
    finally:
        for db in twins:
            db.close()


def test_a_claim_passes_over_a_row_past_the_last_int_and_moves_the_rest():
    # issue 18: one job at the 64-bit maximum of attempts stopped every claim of its queue;
    # a claim passes over it (left as it was) and takes the rest, on the fast path and the scan
    answers = []
    for indexed in (True, False):
        db = Database(clock=TestClock())
        db.query(create(indexed))
        db.query("put jobs [{run_at: now() - 3, attempts: 0}, {run_at: now() - 2, attempts: 9223372036854775807}, "
                 "{run_at: now() - 1, attempts: 4}]")
        poison = db.query("get jobs where id = 2")
        got = db.query(CLAIMS[0].format(n=10), ["w"])
        assert [(r["id"], r["attempts"], r["owner"]) for r in got] == [(1, 1, "w"), (3, 5, "w")]
        assert db.query("get jobs where id = 2") == poison
        assert [r["id"] for r in db.query("get jobs where run_at <= now() order run_at")] == [2]
        try:
            db.query("set jobs {attempts: attempts + 1} where run_at <= now()")  # no limit: refused whole
        except FenecError as e:
            assert e.status == 400 and "overflow" in e.message
        else:
            raise AssertionError("a set of every match should overflow")
        answers.append((got, db.query("get jobs order id")))
        db.close()
    assert answers[0] == answers[1]
