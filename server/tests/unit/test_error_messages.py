"""Errors a user can act on: a syntax error names the words a user types (never the grammar's own terminal
names) and the nearest keyword to a typo; an unknown field suggests the nearest field; a value refused by its
field's type names the field."""

from __future__ import annotations

import re

import pytest
from fenecdb_server import Database, FenecError

INTERNAL = re.compile(r"`(?:add_op|mul_op|cmp_op|semi|claim|neg_num|decimal|int|string|name|path|param|[A-Z_]{2,})`")


@pytest.fixture()
def db():
    d = Database()
    d.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
    d.query("put jobs {run_at: now(), attempts: 0}")
    yield d
    d.close()


def refusal(db: Database, text: str, params=None) -> str:
    with pytest.raises(FenecError) as e:
        db.query(text, params)
    return e.value.message


@pytest.mark.parametrize(("text", "word"), [
    ("get jobs wher id = 1", "where"),
    ("get jobs where id = 1 lmit 2", "limit"),
    ("gte jobs", "get"),
    ("get jobs order run_at dsc", "desc"),
    ("put jobs {attempts: 1} requir 1", "require"),
    ("create colection x (a int)", "collection"),
    ("set jobs {owner: 'w'} whre id = 1", "where"),
])
def test_a_typo_of_a_keyword_is_named(db: Database, text: str, word: str) -> None:
    msg = refusal(db, text)
    assert f"(did you mean `{word}`?)" in msg, msg


@pytest.mark.parametrize("text", [
    "get jobs where id = 1 lmit 2", "get jobs where attempts + ", "get jobs where id = 1 and", "gte jobs",
    "get jobs select id, where id = 1", "put jobs {attempts: 1} requir 1", "get jobs where attempts * * 2",
    "get jobs where (attempts", "get jobs order", "set jobs {a: } where id = 1", "del jobs where id = = 1",
    "get jobs where id in 3", "put jobs {a: 1} if", "get jobs limit x", "get jobs where payload. = 1",
])
def test_syntax_errors_name_no_grammar_internals(db: Database, text: str) -> None:
    msg = refusal(db, text)
    assert msg.startswith("position "), msg
    assert not INTERNAL.search(msg), msg


def test_the_clause_words_come_first_and_statements_once(db: Database) -> None:
    msg = refusal(db, "get jobs wher id = 1")
    assert msg.index("`where`") < msg.index("another statement")
    assert "`put`" not in msg and "`delete`" not in msg
    first = refusal(db, "gte jobs")
    for word in ("get", "put", "set", "del"):
        assert f"`{word}`" in first


def test_an_unknown_field_suggests_the_nearest(db: Database) -> None:
    assert refusal(db, "get jobs where atempts = 1").endswith("has no field `atempts` (did you mean `attempts`?)")
    assert "did you mean" not in refusal(db, "get jobs where zzz = 1")


@pytest.mark.parametrize(("text", "params"), [
    ("put jobs {attempts: 'x'}", None),
    ("put jobs $1", [{"attempts": "x"}]),
    ("set jobs {attempts: 'x'} where id = 1", None),
    ("set jobs {owner: 'w', run_at: now() + 1000, attempts: 'x'} where run_at <= now() order run_at limit 1", None),
])
def test_a_refused_value_names_its_field(db: Database, text: str, params) -> None:
    assert refusal(db, text, params) == "field `attempts`: expected int, found text"
    assert db.query("get jobs select attempts") == [{"attempts": 0}], "nothing was written"


def test_a_time_that_is_not_a_time_names_its_field(db: Database) -> None:
    assert refusal(db, "put jobs {run_at: 'soon'}").startswith("field `run_at`: expected timestamp")


@pytest.mark.parametrize(("text", "owed"), [
    ("get jobs where attempts in [1, 2", "expected `]` to close `[`"),  # said `)` before
    ("get jobs where attempts in [1, (2", "expected `)` to close `(`"),
    ("get jobs where attempts = (1 + [2", "expected `]` to close `[`"),
    ("put jobs {attempts: 1", "expected `}` to close `{`"),
    ('get jobs where owner = "[" and (attempts = 1', "expected `)` to close `(`"),
])
def test_an_unclosed_bracket_is_named_by_the_one_still_open(db: Database, text: str, owed: str) -> None:
    assert owed in refusal(db, text)
