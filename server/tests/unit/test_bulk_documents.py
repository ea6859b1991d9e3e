"""A put of many documents converts them through a table of its fields' converters
(`engine/execute.py` `_bulk_documents`, from BULK_DOCS documents on); a put of a few, one field at
a time (`_document`). Random documents of every field type, good values and bad, unknown names,
paths into json and explicit ids: the two ways give the same rows, value for value and type for
type, or refuse with the same error."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from fenecdb_server import Database, FenecError
from fenecdb_server import values as V
from fenecdb_server.engine.puts import BULK_DOCS, _bulk_documents, _document
from fenecdb_server.plan.schema import FieldInfo, Schema

SCHEMA = Schema("jobs", {
    "payload": FieldInfo("payload", "json"),
    "run_at": FieldInfo("run_at", "timestamp", index="sorted"),
    "owner": FieldInfo("owner", "text"),
    "attempts": FieldInfo("attempts", "int"),
    "score": FieldInfo("score", "float"),
    "ok": FieldInfo("ok", "bool"),
    "blob": FieldInfo("blob", "bytes"),
    "tags": FieldInfo("tags", ("list", "text")),
    "at": FieldInfo("at", "geo"),
})

SCALARS: list[Any] = [None, True, False, 0, 1, -7, V.INT_MAX, V.INT_MIN, V.INT_MAX + 1, V.INT_MIN - 1, 1.5, -0.0,
                      math.inf, math.nan, 3.0, "", "text", "2026-12-04T06:00:00Z", "not a time", b"\x00b",
                      V.make_ts(1_700_000_000_000)]


def value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.55 or depth > 2:
        return rng.choice(SCALARS)
    if roll < 0.8:
        keys = rng.sample(["n", "b", "a", "zz", "k1", 1, "x.y"], rng.randint(0, 4))
        return {k: value(rng, depth + 1) for k in keys}
    return [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def document(rng: random.Random) -> dict:
    names = [*SCHEMA.fields, "id", "payload.n", "owner.x", "nope", "attempt"]
    if rng.random() < 0.6:  # the shape of a job: the common case, read without a call per value
        return {"payload": {"n": rng.randint(0, 10**6), "kind": "mail"}, "attempts": 0,
                "run_at": rng.choice([1_700_000_000_000, V.make_ts(5), "2026-12-04T06:00:00Z"])}
    return {name: value(rng) for name in rng.sample(names, rng.randint(0, 5))}


def typed(x: Any) -> Any:
    """A value with the type of every part kept, so 1 and True and a Ts differ (and nan equals nan)."""
    if type(x) is dict:
        return ("dict", [(k, typed(v)) for k, v in x.items()])
    if type(x) in (list, tuple):
        return (type(x).__name__, [typed(v) for v in x])
    if type(x) is float and math.isnan(x):
        return ("float", "nan")
    return (type(x).__name__, repr(x))


def outcome(fn: Any) -> Any:
    try:
        return ("rows", typed(fn()))
    except FenecError as e:
        return ("error", e.kind, e.message)


@pytest.mark.parametrize("seed", range(8))
def test_the_bulk_way_converts_exactly_as_the_one_by_one_way(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        docs = [document(rng) for _ in range(rng.randint(1, 24))]
        bulk = outcome(lambda: _bulk_documents(SCHEMA, docs))  # noqa: B023
        one = outcome(lambda: [_document(SCHEMA, d) for d in docs])  # noqa: B023
        assert bulk == one, docs


def test_a_bulk_put_and_a_small_one_store_and_refuse_alike() -> None:
    db = Database()
    db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)")
    docs = [{"payload": {"n": i, "b": "x"}, "run_at": 1_700_000_000_000 + i, "attempts": 0} for i in range(BULK_DOCS)]
    db.query("put jobs $1", [docs])
    for d in docs[:2]:
        db.query("put jobs $1", [d])
    rows = db.query("get jobs order id")
    assert [r["payload"] for r in rows] == [{"b": "x", "n": i} for i in range(BULK_DOCS)] + [{"b": "x", "n": 0},
                                                                                          {"b": "x", "n": 1}]
    assert rows[0]["run_at"] == rows[BULK_DOCS]["run_at"]
    bad = [*docs[:BULK_DOCS - 1], {"payload": 1, "attempts": "three"}]
    with pytest.raises(FenecError) as many:
        db.query("put jobs $1", [bad])
    with pytest.raises(FenecError) as few:
        db.query("put jobs $1", [bad[-1:]])
    assert many.value.message == few.value.message == "field `attempts`: expected int, found text"
    assert db.query("get jobs count") == [{"count": BULK_DOCS + 2}]  # nothing of a refused put written
