"""A put of literal documents runs as its shape (engine.py, ql/literals.py): texts that differ only in
their values share one parsed and prepared statement, the texts themselves take no room in the
statement cache, and each stores exactly the values it wrote."""

from __future__ import annotations

import pytest
from fenecdb_server import Database, FenecError

SCHEMA = "create collection jobs (payload json, run_at timestamp, attempts int, note text)"


def test_literal_puts_share_one_shape_and_store_their_own_values() -> None:
    db = Database()
    db.query(SCHEMA)
    for i in range(50):
        db.query(f'put jobs {{payload: {{to: "user{i}@example.com", n: {i}}}, run_at: 1000, attempts: {i % 3}}}')
    texts = db.engine.texts.texts()
    shapes = [t for t in texts if t.startswith("put jobs")]
    assert shapes == ["put jobs {payload: {to: $1, n: $2}, run_at: $3, attempts: $4}"]
    rows = db.query("get jobs order id")
    assert [r["payload"] for r in rows] == [{"n": i, "to": f"user{i}@example.com"} for i in range(50)]
    assert [r["attempts"] for r in rows] == [i % 3 for i in range(50)]


def test_a_shaped_put_converts_and_refuses_as_its_text() -> None:
    db = Database()
    db.query(SCHEMA)
    db.query("put jobs {run_at: 1000, attempts: 2, note: 'x', payload: [1, true, null, {b: 2, a: 1}]}")
    row = db.query("get jobs")[0]
    assert row["run_at"] == "1970-01-01T00:00:01Z"
    assert row["payload"] == [1, True, None, {"a": 1, "b": 2}]
    assert list(row["payload"][3]) == ["a", "b"]  # an object's keys sorted, from a literal as from a parameter
    with pytest.raises(FenecError) as literal:
        db.query("put jobs {attempts: 'many'}")
    with pytest.raises(FenecError) as param:
        db.query("put jobs {attempts: $1}", ["many"])
    assert (literal.value.status, literal.value.message) == (param.value.status, param.value.message)
