"""Bad input: generated and mutated statements are refused cleanly (`fenecql.md` §17, §18).

Every statement here is either answered or refused with a `FenecError` whose status is one the spec gives a
statement (400, 404, 409, 412); no other exception, no hang (each call runs under a time limit), and a refused
statement or block leaves the database exactly as it was: every collection's rows, the database's stats and
its change counter compare equal before and after.

Inputs: real statements from the seed page and the spec with tokens inserted, deleted, swapped, duplicated
or replaced; random bytes and random text; deep nesting of every nestable form.
"""

from __future__ import annotations

import re
import threading

from conftest import TestClock, dump
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPEC_STATUSES = {400, 404, 409, 412}
TIME_LIMIT_S = 10.0

SETUP = [
    "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)",
    "create collection tasks (payload json, run_at timestamp @sorted, priority int @sorted, owner text, attempts int)",
    "create collection rides (pickup geo @geo, run_at timestamp @sorted, owner text, attempts int)",
    "create collection users (email text @unique, name text required, tags [text], seen timestamp @ttl(30m))",
    'put jobs [{payload: {"to": "ada@example.com"}, run_at: now(), attempts: 0}, '
    '{payload: {"to": "bo@example.com"}, run_at: now(), attempts: 0}, '
    '{payload: {"to": "di@example.com"}, run_at: now() + 3600000, attempts: 3, owner: "w1"}]',
    'put tasks [{payload: {"n": 1}, run_at: now(), priority: 0, attempts: 0}, '
    '{payload: {"n": 2}, run_at: now(), priority: 9, attempts: 0}]',
    "put rides [{pickup: [29.0100, 41.0400], run_at: now(), attempts: 0}, "
    "{pickup: [29.0300, 41.0500], run_at: now(), attempts: 0}]",
    'put users [{email: "a@x", name: "ada", tags: ["x"], seen: now()}, {email: "b@x", name: "bo", seen: now()}]',
]

REAL = [
    "set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
    "where run_at <= now() order run_at limit 10 returning *",
    "set jobs {owner: \"w1\", run_at: now() + 30000, attempts: attempts + 1} "
    "where run_at <= now() order run_at limit 2 returning id, payload.to",
    "del jobs where id = $2 and owner = $1 require 1",
    "set jobs {run_at: now() + 30000} where id = 2 and owner = \"w1\" require 1",
    "set jobs {owner: null, error: \"smtp timeout\", run_at: case when attempts >= 5 then null "
    "else now() + 1000 * attempts * attempts end} where id = 2 and owner = \"w1\" require 1",
    "get jobs select id, error where run_at is null",
    "set jobs {run_at: now(), attempts: 0, error: null} where id = 2 and run_at is null",
    "set tasks {owner: \"w1\", run_at: now() + 30000, attempts: attempts + 1} "
    "where run_at <= now() order priority desc limit 1 returning payload.n",
    "set rides {owner: \"w1\", run_at: now() + 30000, attempts: attempts + 1} "
    "where run_at <= now() order distance(pickup, [29.0290, 41.0490]) limit 1 returning id",
    "del tasks where run_at <= now() order priority desc limit 10 returning id, payload",
    "put jobs {payload: {\"to\": \"x\"}, run_at: now() + 3600000, attempts: 0}",
    "insert into users {email: \"a@x\", name: \"again\"} if absent",
    "put users {email: \"c@x\", name: \"cy\"} if absent else set {name: new.name}",
    "get jobs where attempts >= 1 and not (owner in [\"w1\", \"w2\"]) order attempts desc, id limit 2 offset 1",
    "get jobs where payload.to ~ \"ADA\" count",
    "select id, owner from jobs where owner = $1",
    "get users where tags has \"x\" and len(name) > 1 select upper(name) as n, bucket(seen, 1h) as b",
    "get rides where within(pickup, [29.0, 41.0, 29.02, 41.045]) and distance(pickup, [29.01, 41.04]) < 100",
    "create collection extra (a int @hash, b text required)",
    "create index on jobs (payload.to) @hash",
    "drop collection tasks",
    "del users where expired() and id = $2 require 1",
    "get jobs select greatest(attempts, 1) as g, coalesce(owner, \"none\") as o, "
    "timestamp(\"2026-05-03\") as t where id in [1, 2]",
]

TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|\$\w+|\d[\w.]*|\w+|<=|>=|==|!=|<>|\S')
VOCAB = ["get", "put", "set", "del", "insert", "where", "order", "limit", "offset", "select", "returning",
         "require", "count", "and", "or", "not", "in", "is", "null", "true", "case", "when", "then", "else",
         "end", "if", "absent", "as", "desc", "asc", "has", "create", "drop", "collection", "index", "on",
         "(", ")", "[", "]", "{", "}", ",", ":", ";", "=", "<", ">=", "!=", "~", "+", "-", "*", "/", "%", "@",
         "@sorted", "@ttl(1m)", "$1", "$3", "$0", "$jwt.sub", "now()", "1", "-1", "0.5", "1e999", "9223372036854775808",
         '"x"', "'", '"', "\\", "--", "#", "jobs", "nope", "id", "run_at", "payload.to", "payload.a.b", "1mo", "\x00",
         "é", "—", "\n", "[1, 2]", "{a: 1}", "distance(pickup, [1, 2])", "expired()"]

PARAMS = st.one_of(
    st.none(),
    st.lists(st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=8),
                       st.floats(allow_nan=True, allow_infinity=True), st.just([1, 2]),
                       st.just({"to": "x"})), max_size=3),
)


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@st.composite
def mutated(draw):
    toks = tokens(draw(st.sampled_from(REAL)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "swap", "duplicate", "replace"]))
        if not toks:
            toks = [draw(st.sampled_from(VOCAB))]
            continue
        i = draw(st.integers(0, len(toks) - 1))
        if op == "insert":
            toks.insert(i, draw(st.sampled_from(VOCAB)))
        elif op == "delete":
            del toks[i]
        elif op == "swap" and len(toks) > 1:
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif op == "duplicate":
            toks.insert(i, toks[i])
        else:
            toks[i] = draw(st.sampled_from(VOCAB))
    return " ".join(toks)


def random_bytes_text():
    return st.binary(max_size=120).map(lambda b: b.decode("utf-8", errors="replace"))


@st.composite
def nested(draw):
    depth = draw(st.sampled_from([50, 513, 2000, 20000]))
    form = draw(st.sampled_from(["paren", "not", "list", "object", "case", "and", "call", "minus"]))
    inner = {
        "paren": "(" * depth + "1" + ")" * depth,
        "not": "not " * depth + "true",
        "list": "[" * depth + "1" + "]" * depth,
        "object": "{a: " * depth + "1" + "}" * depth,
        "case": "case when true then " * depth + "1" + " end" * depth,
        "and": " and ".join(["attempts = 1"] * depth),
        "call": "coalesce(" * depth + "1" + ")" * depth,
        "minus": "1" + " - 1" * depth,
    }[form]
    where = draw(st.sampled_from([f"get jobs where {inner}", f"set jobs {{payload: {inner}}} where id = 1",
                                  f"get jobs select {inner} as x", f"put jobs {{payload: {inner}}}"]))
    if draw(st.booleans()):
        where = where[: draw(st.integers(0, len(where)))]  # cut anywhere
    return where


def fresh_db():
    from fenecdb_server import Database

    db = Database(clock=TestClock())
    for text in SETUP:
        db.query(text)
    return db


def snapshot(db) -> tuple:
    return dump(db)


def call_with_limit(fn):
    """fn() in a thread: (result, exception); fails the test when it runs past the time limit."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as e:  # reported to the test thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(TIME_LIMIT_S)
    assert not t.is_alive(), "the statement did not finish in time"
    return box.get("result"), box.get("error")


def check_statement(db, text: str, params, block: bool = False) -> None:
    from fenecdb_server import FenecError

    before = snapshot(db)
    if block:
        _, error = call_with_limit(lambda: db.batch([("del jobs where id = 1", None), (text, params)]))
    else:
        _, error = call_with_limit(lambda: db.query(text, params))
    if error is None:
        return
    assert isinstance(error, FenecError), f"{text!r} raised {error!r}"
    assert error.status in SPEC_STATUSES, f"{text!r}: status {error.status} ({error.message!r})"
    assert isinstance(error.message, str) and error.message, text
    if block:
        assert error.at in (0, 1), (text, error.at)
    assert snapshot(db) == before, f"{text!r} was refused ({error.status}) but changed the database"


COMMON = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(COMMON, max_examples=150)
@given(texts=st.lists(mutated(), min_size=1, max_size=6), params=PARAMS)
def test_mutated_statements(texts, params):
    db = fresh_db()
    try:
        for text in texts:
            check_statement(db, text, params)
    finally:
        db.close()


@settings(COMMON, max_examples=60)
@given(text=mutated(), params=PARAMS)
def test_mutated_statements_in_a_block(text, params):
    db = fresh_db()
    try:
        check_statement(db, text, params, block=True)
    finally:
        db.close()


@settings(COMMON, max_examples=80)
@given(text=st.one_of(random_bytes_text(), st.text(max_size=80)), params=PARAMS)
def test_random_text(text, params):
    db = fresh_db()
    try:
        check_statement(db, text, params)
    finally:
        db.close()


@settings(COMMON, max_examples=40)
@given(text=nested())
def test_deep_nesting(text):
    db = fresh_db()
    try:
        check_statement(db, text, None)
    finally:
        db.close()


def test_too_deep_is_refused_with_the_spec_message():
    from fenecdb_server import FenecError

    db = fresh_db()
    try:
        for inner in ("(" * 5000 + "1" + ")" * 5000, " and ".join(["attempts = 1"] * 5000)):
            before = snapshot(db)
            try:
                db.query(f"get jobs where {inner}")
                raise AssertionError("an expression past 512 levels was answered")
            except FenecError as e:
                assert e.status == 400 and "expression too deep" in e.message, e
            assert snapshot(db) == before
    finally:
        db.close()


def test_a_refused_write_keeps_no_part_of_itself():
    from fenecdb_server import FenecError

    db = fresh_db()
    try:
        before = snapshot(db)
        for text in (
            'put jobs [{attempts: 1}, {attempts: 2}, {attempts: "three"}]',
            "set jobs {attempts: 10 / (attempts - 3)}",
            'put users [{email: "z@x", name: "z"}, {email: "z@x", name: "zz"}]',
            "set jobs {attempts: attempts + 1} where run_at <= now() order run_at limit 10 require 3",
            "del jobs require 2",
        ):
            try:
                db.query(text)
                raise AssertionError(f"{text!r} was answered")
            except FenecError as e:
                assert e.status in SPEC_STATUSES
            assert snapshot(db) == before, text
        assert db.query("put jobs {attempts: 7}") == {"affected": 1}
        assert db.query("get jobs select id where attempts = 7") == [{"id": 4}]
    finally:
        db.close()


def test_mutator_produces_varied_statements():
    from hypothesis import find

    assert tokens('set jobs {a: "x y"} where id = $1') == ["set", "jobs", "{", "a", ":", '"x y"', "}", "where",
                                                          "id", "=", "$1"]
    assert find(mutated(), lambda t: t not in {" ".join(tokens(r)) for r in REAL})
