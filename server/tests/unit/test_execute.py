"""execute: statements run inside a Block; a failing block puts back rows, schema and ids
(fenecql.md §5, §8, §13); `require` and the `unmet: ` prefix; @ttl in writes (§11.3)."""

from __future__ import annotations

import pytest
from conftest import SPEC_EPOCH_MS, TestClock, dump
from fenecdb_server import Database, FenecError
from fenecdb_server.engine.execute import Block, unmet


@pytest.fixture
def db():
    d = Database(clock=TestClock())
    d.query("create collection q (n int, u text @unique)")
    d.query("create collection accounts (name text @unique, balance int)")
    d.query('put accounts [{name: "ada", balance: 100}, {name: "bob", balance: 0}]')
    return d


def fails(fn, status):
    with pytest.raises(FenecError) as ei:
        fn()
    assert ei.value.status == status, ei.value
    return ei.value


def test_ids_in_write_order_never_reused(db):
    assert db.query("put q [{n: 1}, {n: 2}]") == {"affected": 2}
    db.query("del q where id = 2")
    db.query("put q {n: 3}")
    assert db.query("get q select id, n") == [{"id": 1, "n": 1}, {"id": 3, "n": 3}]
    db.query("put q {id: 1, u: 'x'}")
    assert db.query("get q where id = 1") == [{"id": 1, "n": None, "u": "x"}]  # replaced whole
    fails(lambda: db.query("insert q {id: 1, n: 11}"), 409)
    db.query("put q {id: 10, n: 0}")
    db.query("put q {n: 4}")
    assert db.query("get q order id desc limit 1 select id") == [{"id": 11}]
    for bad in ("0", "-1", "1.5", "'a'"):
        fails(lambda bad=bad: db.query(f"put q {{id: {bad}}}"), 400)


def test_failed_statement_hands_its_ids_back(db):
    db.query("put q {n: 1, u: 'a'}")
    fails(lambda: db.query("put q [{n: 2}, {n: 3, u: 'a'}]"), 409)
    db.query("put q {n: 4}")
    assert [r["id"] for r in db.query("get q")] == [1, 2]


def test_block_all_or_nothing_with_at_and_unmet_prefix(db):
    before = dump(db)
    stmts = [
        ("set accounts {balance: balance - $2} where name = $1 and balance >= $2 require 1", ["bob", 5]),
        ("put q {n: 1}", None),
    ]
    e = fails(lambda: db.batch(stmts), 412)
    assert e.at == 0 and e.message == "unmet: `set accounts` wrote 0 rows, and requires 1"
    e = fails(lambda: db.batch([("put q [{n: 1}, {n: 2}]", None), ("create collection z (a int)", None),
                                ("create index on q (n) @sorted", None), ("drop collection accounts", None),
                                ("get q where n = 1 require 2", None)]), 412)
    assert e.at == 4 and e.message == "unmet: `get q` answered 1 rows, and requires 2"
    assert dump(db) == before
    assert db.query("put q {n: 9}") == {"affected": 1}
    assert db.query("get q select id") == [{"id": 1}]  # the block's ids were handed back
    assert db.collection("q").index("n") is None


def test_single_statement_unmet_has_no_prefix(db):
    e = fails(lambda: db.query("set accounts {balance: 0} require 1"), 412)
    assert e.message == "`set accounts` wrote 2 rows, and requires 1" and e.at is None
    assert db.query("get accounts select balance order id") == [{"balance": 100}, {"balance": 0}]
    e = fails(lambda: db.query("del accounts where name = 'zed' require 1"), 412)
    assert e.message == "`del accounts` wrote 0 rows, and requires 1"
    assert db.query("get accounts where balance >= 0 require 0 limit 0") == []


def test_block_success_answers_per_statement(db):
    got = db.batch([("set accounts {balance: balance - 30} where name = 'ada' require 1", None),
                    ("set accounts {balance: balance + 30} where name = 'bob' returning balance", None),
                    ("get accounts count", None), ("create collection if not exists q (n int)", None)])
    assert got == [{"affected": 1}, {"rows": [{"balance": 30}]}, {"rows": [{"count": 2}]},
                   {"message": "collection `q` exists"}]


def test_block_error_at_names_the_statement_for_every_kind(db):
    for stmts, status, at in [
        ([("get q", None), ("put q {n: 'x'}", None)], 400, 1),
        ([("get q", None), ("get nosuch", None)], 404, 1),
        ([("put q {u: 'a'}", None), ("put q {u: 'a'}", None)], 409, 1),
        ([("get q where n = $1", None)], 400, 0),
        ([("get q get q", None)], 400, 0),
    ]:
        e = fails(lambda stmts=stmts: db.batch(stmts), status)
        assert e.at == at, (stmts, e)
    assert db.query("get q count") == [{"count": 0}]


def test_unique_against_the_same_statement_and_released_values(db):
    db.query("put q [{u: 'a'}, {u: 'b'}]")
    fails(lambda: db.query("set q {u: 'c'}"), 409)  # two rows, one value
    # within a block a value released by one write can be claimed by a later one
    db.batch([("set q {u: 'z'} where u = 'a'", None), ("put q {u: 'a'}", None)])
    assert sorted(r["u"] for r in db.query("get q")) == ["a", "b", "z"]
    db.query("set q {n: 1} where u = 'b'")  # keeps its own value: no clash with itself


def test_ttl_rows_vanish_from_reads_and_writes_and_free_their_values():
    clock = TestClock()
    db = Database(clock=clock)
    db.query("create collection logins (token text @unique, seen timestamp @ttl(30m))")
    db.query("put logins {token: 's-1', seen: now()}")
    clock.advance(30 * 60_000 - 1)
    assert len(db.query("get logins")) == 1
    clock.advance(1)
    assert db.query("get logins") == [] and db.query("get logins count") == [{"count": 0}]
    assert db.query("set logins {token: 'x'}") == {"affected": 0}
    assert db.query("get logins where expired() select token") == [{"token": "s-1"}]
    assert db.query("put logins {token: 's-1', seen: now()}") == {"affected": 1}
    assert db.query("get logins select id, token") == [{"id": 2, "token": "s-1"}]
    assert db.query("get logins where expired()") == []  # the expired holder was deleted


def test_block_rollback_directly(db):
    blk = Block()
    coll = db.collection("q")
    blk.touch(coll)
    row = {"id": coll.next_id, "n": 5}
    coll.insert(row, blk.undo)
    blk.ops.append(("p", "q", row["id"], row))
    assert coll.next_id == 2 and "q" in blk.touched
    blk.rollback()
    assert coll.rows == {} and coll.next_id == 1 and blk.ops == [] and blk.undo == []


def test_unmet_messages():
    assert unmet("put", "q", 0, 1).message == "`put q` wrote 0 rows, and requires 1"
    assert unmet("get", "q", 3, 1, read=True).message == "`get q` answered 3 rows, and requires 1"
    assert unmet("del", "q", 0, 1).status == 412


def test_now_once_per_statement_and_per_statement_in_a_block():
    clock = TestClock()
    ticks = iter(range(10**6))

    def moving():
        return SPEC_EPOCH_MS + next(ticks)
    db = Database(clock=moving)
    db.query("create collection e (a timestamp, b timestamp)")
    db.query("put e [{a: now(), b: now()}, {a: now(), b: now()}]")
    rows = db.query("get e")
    assert len({r["a"] for r in rows} | {r["b"] for r in rows}) == 1
    db.batch([("put e {a: now()}", None), ("put e {a: now()}", None)])
    a3, a4 = [r["a"] for r in db.query("get e where id > 2 order id")]
    assert a3 != a4
    del clock


def test_set_values_worked_out_over_the_rows_as_they_were(db):
    db.query("create collection s (a int, b int)")
    db.query("put s {a: 1, b: 2}")
    db.query("set s {a: b, b: a}")
    assert db.query("get s select a, b") == [{"a": 2, "b": 1}]


def test_returning_and_picking_writes(db):
    db.query("put q [{n: 3}, {n: 1}, {n: 2}]")
    got = db.query("set q {n: n * 10} order n desc limit 2 returning id, n")
    assert got == [{"id": 1, "n": 30}, {"id": 3, "n": 20}]
    assert db.query("del q order n limit 1 returning *") == [{"id": 2, "n": 1, "u": None}]


def test_put_of_an_unbound_parameter_is_400_not_a_500():
    """`put jobs $1` without params was an IndexError (500): the documents' parameter is a number
    in the AST, which the count of parameters a statement names did not see (found by make fuzz)."""
    db = Database()
    db.query("create collection jobs (x int)")
    for params in (None, []):
        with pytest.raises(FenecError) as ei:
            db.query("put jobs $1", params)
        assert ei.value.status == 400 and ei.value.message == "parameter $1 is not bound"
    with pytest.raises(FenecError) as ei:
        db.batch([("put jobs [{x: 1}]", None), ("put jobs $2", [{"x": 2}])])
    assert ei.value.status == 400 and ei.value.at == 1
    assert db.query("put jobs $1", [[{"x": 3}, {"x": 4}]]) == {"affected": 2}
    assert db.query("get jobs count") == [{"count": 2}]
