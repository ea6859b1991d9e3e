"""prepare: statements checked against the schema once: unknown names 404, paths into non-json 400,
`id` not patchable, columns rendered in their answer form, parameters counted, expiry folded in."""

from __future__ import annotations

import pytest
from fenecdb_server import FenecError
from fenecdb_server import values as V
from fenecdb_server.engine.prepare import columns, make_alive, prepare, render
from fenecdb_server.plan.compile import Ctx, Env
from fenecdb_server.plan.schema import FieldInfo, Schema
from fenecdb_server.ql.parser import parse

SCHEMA = Schema("jobs", {
    "t": FieldInfo("t", "timestamp"), "p": FieldInfo("p", "geo"), "b": FieldInfo("b", "bytes"),
    "l": FieldInfo("l", ("list", "timestamp")), "j": FieldInfo("j", "json"), "n": FieldInfo("n", "int"),
})
TTL = Schema("holds", {"at": FieldInfo("at", "timestamp", index="ttl", ttl_ms=1000), "k": FieldInfo("k", "text")})
SCHEMAS = {"jobs": SCHEMA, "holds": TTL}
NOW = V.Ts(1777800000000)


def prep(text):
    return prepare(parse(text)[0], SCHEMAS)


def refused(text, status, needle=None):
    with pytest.raises(FenecError) as ei:
        prep(text)
    assert ei.value.status == status, ei.value
    if needle:
        assert needle in ei.value.message
    return ei.value


def test_unknown_names_404():
    refused("get nosuch", 404, "no collection `nosuch`")
    refused("get jobs where nope = 1", 404, "nope")
    refused("get jobs select nope", 404)
    refused("set jobs {nope: 1}", 404)
    refused("put jobs {nope: 1}", 404)
    refused("del jobs order nope limit 1", 404)


def test_an_unknown_collection_gets_a_did_you_mean():
    # the same hint, worded the same, as an unknown field's
    assert refused("get jbos", 404).message == "no collection `jbos` (did you mean `jobs`?)"
    assert refused("get mail", 404).message == "no collection `mail`"  # nothing close: no hint


def test_paths_only_into_json():
    refused("set jobs {n.x: 1}", 400, "not json")
    refused("put jobs {t.x: 1}", 400)
    prep("set jobs {j.a.b: 1}")


def test_id_cannot_be_patched():
    refused("set jobs {id: 3}", 400, "`id`")
    prep("put jobs {id: 3}")


def test_render_all_columns_in_answer_form():
    cols = columns(SCHEMA, None, Ctx(SCHEMA))
    row = {"id": 4, "t": V.Ts(NOW + 5), "p": (13.5, 38.0), "b": b"\x01", "l": [V.Ts(0)], "j": {"a": 1}}
    assert render(cols, [row], Env([], NOW)) == [{"id": 4, "t": "2026-05-03T09:20:00.005Z", "p": [13.5, 38.0],
                                                   "b": [1], "l": ["1970-01-01T00:00:00Z"], "j": {"a": 1},
                                                   "n": None}]
    assert list(render(cols, [row], Env([], NOW))[0]) == ["id", "t", "p", "b", "l", "j", "n"]  # id first


def test_render_all_columns_of_a_row_holding_more_than_its_fields():
    """Answers are built from a blank row; a row with a key no field names (none should have one)
    still answers exactly the declared columns, in order."""
    cols = columns(SCHEMA, None, Ctx(SCHEMA))
    row = {"id": 4, "n": 3, "stray": 1}
    assert render(cols, [row, {"id": 5}], Env([], NOW)) == [
        {"id": 4, "t": None, "p": None, "b": None, "l": None, "j": None, "n": 3},
        {"id": 5, "t": None, "p": None, "b": None, "l": None, "j": None, "n": None}]


def test_render_named_columns():
    stmt = parse("get jobs select id, t, j.a, now() as at, p")[0]
    cols = columns(SCHEMA, stmt.select, Ctx(SCHEMA))
    row = {"id": 1, "t": None, "j": {"a": [1]}, "p": (1.0, 2.0)}
    assert render(cols, [row], Env([], NOW)) == [{"id": 1, "t": None, "j.a": [1], "at": "2026-05-03T09:20:00Z",
                                                  "p": [1.0, 2.0]}]


def test_expiry_folded_into_every_filter():
    p = prep("get holds where k = 'a'")
    env = Env([], NOW)
    assert p.query.filter({"id": 1, "k": "a", "at": V.Ts(NOW - 999)}, env)
    assert not p.query.filter({"id": 1, "k": "a", "at": V.Ts(NOW - 1000)}, env)
    assert p.query.filter({"id": 1, "k": "a", "at": None}, env)  # null never expires
    p = prep("get holds")
    assert not p.query.filter({"id": 1, "at": V.Ts(NOW - 1000)}, env)
    p = prep("get holds where expired()")
    assert p.query.filter({"id": 1, "at": V.Ts(NOW - 1000)}, env)
    assert prep("get jobs").query.filter is None


def test_make_alive():
    alive = make_alive(TTL)
    env = Env([], NOW)
    assert alive({"at": V.Ts(NOW - 999)}, env) and not alive({"at": V.Ts(NOW - 1000)}, env)
    assert make_alive(SCHEMA) is None


def test_where_value_read_as_truth():
    p = prep("get jobs where n")
    env = Env([], NOW)
    assert p.query.filter({"id": 1, "n": 2}, env) is True
    assert p.query.filter({"id": 1, "n": 0}, env) is False


def test_expired_without_ttl_400():
    refused("get jobs where expired()", 400, "@ttl")
