"""schema: which annotation fits which type (fenecql.md §4.3), field lookup, and the JSON round trip."""

from __future__ import annotations

import pytest
from fenecdb_server import FenecError
from fenecdb_server.plan.schema import FieldInfo, Schema, check_annotation

ALL = ["bool", "int", "float", "text", "bytes", "timestamp", "json", "geo", ("list", "int")]
FITS = {
    "hash": {"bool", "int", "float", "text", "bytes", "timestamp"},
    "unique": {"bool", "int", "float", "text", "bytes", "timestamp"},
    "sorted": {"int", "float", "timestamp", "text"},
    "ttl": {"timestamp"},
    "geo": {"geo"},
}


@pytest.mark.parametrize("index", sorted(FITS))
@pytest.mark.parametrize("ftype", ALL, ids=str)
def test_annotation_fits_type(index, ftype):
    if ftype in FITS[index]:
        check_annotation("c", "f", ftype, index, False)
    else:
        with pytest.raises(FenecError) as ei:
            check_annotation("c", "f", ftype, index, False)
        assert ei.value.status == 400 and "`f`" in ei.value.message


def test_the_spec_message_for_sorted_bool():
    with pytest.raises(FenecError) as ei:
        check_annotation("c", "flag", "bool", "sorted", False)
    assert "field `flag` is not int, float, timestamp, text or json, no ordered index can be built" in ei.value.message


@pytest.mark.parametrize("index,ok", [("hash", True), ("unique", True), ("sorted", True), ("geo", False),
                                      ("ttl", False)])
def test_paths_take_hash_unique_sorted_only(index, ok):
    if ok:
        check_annotation("c", "meta.lang", None, index, True)
    else:
        with pytest.raises(FenecError) as ei:
            check_annotation("c", "meta.lang", None, index, True)
        assert ei.value.status == 400


def sample():
    return Schema("jobs", {
        "run_at": FieldInfo("run_at", "timestamp", index="sorted"),
        "exp": FieldInfo("exp", "timestamp", index="ttl", ttl_ms=60_000),
        "tags": FieldInfo("tags", ("list", "text")),
        "kind": FieldInfo("kind", "text", required=True, index="hash"),
    }, {"meta.lang": "hash"})


def test_field_lookup_and_ttl_field():
    s = sample()
    assert s.field("kind").required
    assert s.ttl_field.name == "exp" and s.ttl_field.ttl_ms == 60_000
    with pytest.raises(FenecError) as ei:
        s.field("nope")
    assert ei.value.status == 404 and "`jobs` has no field `nope`" in ei.value.message
    assert Schema("x", {"a": FieldInfo("a", "int")}).ttl_field is None


def test_json_round_trip():
    s = sample()
    d = s.to_json()
    assert [f["type"] for f in d["fields"]] == ["timestamp", "timestamp", "[text]", "text"]
    back = Schema.from_json(d)
    assert back == s
    assert back.fields["tags"].type == ("list", "text")
