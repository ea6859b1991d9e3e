"""A put's literal values are prepared to the values its rows store (engine/prepare.py `Doc`): each
literal, and each object or list of literals, converted to its field's type once, when the
statement is prepared. Random documents of literals of every kind, written into fields of every
type, into paths, into `id` and into names the schema lacks, good values and bad: written out as
literals they store the same rows (value for value, type for type) as the same documents with
each value a parameter (converted at the run, as every value used to be), or are refused with the
same error. A prepared put that runs again writes rows that share no object or list."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from fenecdb_server import Database, FenecError
from fenecdb_server.engine.engine import PREPARE_OUTSIDE

SCHEMA = ("create collection jobs (payload json, run_at timestamp, owner text, attempts int, score float, "
          "ok bool, tags [text], at geo)")
FIELDS = ["payload", "run_at", "owner", "attempts", "score", "ok", "tags", "at"]

SCALARS: list[Any] = [None, True, False, 0, 1, -7, 2**63 - 1, -2**63, 1.5, -0.0, 3.0, 1e300, "", "text",
                      "it's \"quoted\"\n", "2026-12-04T06:00:00Z", "not a time", 1_700_000_000_000]


def value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.55 or depth > 2:
        return rng.choice(SCALARS)
    if roll < 0.8:
        return {k: value(rng, depth + 1) for k in rng.sample(["n", "b", "a", "zz", "k1", "x y"], rng.randint(0, 4))}
    return [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def document(rng: random.Random) -> dict:
    if rng.random() < 0.5:  # the shape of a job
        return {"payload": {"to": f"user{rng.randint(0, 99)}@example.com", "n": rng.randint(0, 10**6)},
                "attempts": 0 if rng.random() < 0.9 else "2",
                "run_at": rng.choice([1_700_000_000_000, "2026-12-04T06:00:00Z"])}
    names = [*FIELDS, "payload.n", "payload.deep.er"]
    if rng.random() < 0.05:
        names.append(rng.choice(["owner.x", "nope"]))  # refused when it is prepared
    if rng.random() < 0.1:
        names.append("id")
    doc = {name: value(rng) for name in rng.sample(names, rng.randint(0, 5))}
    for name, good in (("tags", ["a", "b"]), ("at", [1.5, 45]), ("ok", True), ("owner", "me"), ("score", 2.5),
                       ("run_at", 1_700_000_000_000), ("attempts", 3)):
        if name in doc and rng.random() < 0.8:
            doc[name] = good
    return doc


def literal(v: Any) -> str:
    """`v` as FenecQL writes it."""
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if type(v) in (int, float):
        return repr(v)
    if type(v) is str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if type(v) is dict:
        return "{" + ", ".join(f"{literal(k)}: {literal(x)}" for k, x in v.items()) + "}"
    return "[" + ", ".join(literal(x) for x in v) + "]"


def written(docs: list[dict]) -> tuple[str, str, list[Any]]:
    """The put with its values as literals (long enough not to be read as its shape, which would
    make each literal a parameter), and the same put with each value a parameter."""
    lits = ", ".join("{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in d.items()) + "}" for d in docs)
    params: list[Any] = []
    pieces = []
    for d in docs:
        parts = []
        for k, v in d.items():
            params.append(v)
            parts.append(f"{literal(k)}: ${len(params)}")
        pieces.append("{" + ", ".join(parts) + "}")
    text = f"put jobs [{lits}]"
    return text + " " * max(0, PREPARE_OUTSIDE - len(text)), f"put jobs [{', '.join(pieces)}]", params


def typed(x: Any) -> Any:
    """A value with the type of every part kept, so 1 and True and a timestamp differ."""
    if type(x) is dict:
        return ("dict", [(k, typed(v)) for k, v in x.items()])
    if type(x) in (list, tuple):
        return (type(x).__name__, [typed(v) for v in x])
    if type(x) is float and math.isnan(x):
        return ("float", "nan")
    return (type(x).__name__, repr(x))


def outcome(db: Database, text: str, params: list[Any]) -> Any:
    before = set(db.collections["jobs"].rows)
    try:
        db.query(text, params)
    except FenecError as e:
        return ("error", e.kind, e.message)
    rows = db.collections["jobs"].rows
    return ("rows", [typed({k: v for k, v in rows[i].items() if k != "id"}) for i in sorted(set(rows) - before)])


@pytest.mark.parametrize("seed", range(6))
def test_literal_documents_store_and_refuse_as_their_values_given_as_parameters(seed: int) -> None:
    rng = random.Random(seed)
    by_literals, by_params = Database(), Database()
    for db in (by_literals, by_params):
        db.query(SCHEMA)
    for _ in range(60):
        docs = [document(rng) for _ in range(rng.randint(1, 6))]
        for d in docs:
            if "id" in d:
                d["id"] = rng.choice([10**6 + rng.randint(0, 9), "7", -1, 2.0])
        lit_text, param_text, params = written(docs)
        got = outcome(by_literals, lit_text, [])
        assert got == outcome(by_params, param_text, params), docs


def test_literal_documents_are_prepared_once_to_their_values() -> None:
    """The values of a put of literals are converted when it is prepared, not at each run: a run
    of the prepared statement converts nothing but what a run alone knows (`now()`)."""
    db = Database()
    db.query("create collection jobs (payload json, run_at timestamp, attempts int, note text)")
    text = "put jobs [" + ", ".join(
        f'{{payload: {{to: "user{i}@example.com", n: {i}, tags: ["a", {i}]}}, run_at: now(), attempts: 0, note: "n"}}'
        for i in range(40)) + "]"
    assert PREPARE_OUTSIDE <= len(text)
    db.query(text)
    p = db.engine.catalog.prepared(text, db.engine.texts.parse(text)[0])
    assert p.docs is not None and len(p.docs) == 40
    assert [(d.fixed["payload"], d.fixed["attempts"], d.fixed["note"]) for d in p.docs[:2]] == [
        ({"n": 0, "tags": ["a", 0], "to": "user0@example.com"}, 0, "n"),
        ({"n": 1, "tags": ["a", 1], "to": "user1@example.com"}, 0, "n")]
    assert all([t.name for t, _, _ in d.worked] == ["run_at"] for d in p.docs)


def test_a_prepared_put_run_again_writes_rows_of_their_own() -> None:
    db = Database()
    db.query("create collection jobs (payload json, tags [text])")
    text = "put jobs [" + ", ".join(f'{{payload: {{a: {{b: [{i}]}}}}, tags: ["x"]}}' for i in range(120)) + "]"
    assert PREPARE_OUTSIDE <= len(text)
    db.query(text)
    db.query(text)  # the statement prepared once, run twice
    rows = db.collections["jobs"].rows
    first, again = rows[1], rows[121]
    assert first["payload"] == again["payload"] == {"a": {"b": [0]}}
    assert first["payload"] is not again["payload"]
    assert first["payload"]["a"] is not again["payload"]["a"]
    assert first["payload"]["a"]["b"] is not again["payload"]["a"]["b"]
    assert first["tags"] is not again["tags"]
