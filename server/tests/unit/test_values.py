"""values and convert: conversion on write (fenecql.md §3.2), the total order (§3.4), truth (§9.6), time (§11.1)."""

from __future__ import annotations

import math

import pytest
from fenecdb_server import FenecError, convert
from fenecdb_server import values as V

TS = V.Ts(1777800000000)  # 2026-05-03T09:20:00Z


def refused(v, ftype, needle=None):
    with pytest.raises(FenecError) as ei:
        convert.coerce(v, ftype)
    assert ei.value.status == 400
    if needle:
        assert needle in ei.value.message
    return ei.value


# ---------------------------------------------------------------- §3.2 row by row

def test_bool_accepts_bool_only():
    assert convert.coerce(True, "bool") is True
    refused(1, "bool", "expected bool, found int")
    refused("true", "bool", "expected bool, found text")


def test_int_row():
    assert convert.coerce(7, "int") == 7
    got = convert.coerce(3.0, "int")
    assert got == 3 and type(got) is int
    got = convert.coerce(TS, "int")
    assert got == 1777800000000 and type(got) is int
    refused(2.5, "int", "expected int, found float")
    refused("3", "int", "expected int, found text")
    refused({"a": 1}, "int", "expected int, found object")
    refused(2**63, "int")
    assert convert.coerce(2**63 - 1, "int") == 2**63 - 1
    assert convert.coerce(-(2**63), "int") == -(2**63)


def test_float_row():
    assert convert.coerce(2.5, "float") == 2.5
    got = convert.coerce(4, "float")
    assert got == 4.0 and type(got) is float
    refused("1.5", "float", "expected float, found text")
    refused(math.nan, "float")
    refused(math.inf, "float")


def test_text_row():
    assert convert.coerce("ada", "text") == "ada"
    assert convert.coerce(TS, "text") == "2026-05-03T09:20:00Z"
    refused(1, "text", "expected text, found int")
    refused(1.5, "text")
    refused(True, "text", "found bool")


def test_bytes_row():
    assert convert.coerce(b"\x00\xff", "bytes") == b"\x00\xff"
    assert convert.coerce("é", "bytes") == "é".encode()
    refused(3, "bytes", "expected bytes, found int")


def test_timestamp_row():
    assert convert.coerce(TS, "timestamp") == TS
    got = convert.coerce(1789821296000, "timestamp")
    assert type(got) is V.Ts and got == 1789821296000
    assert convert.coerce("2026-09-19T12:34:56Z", "timestamp") == 1789821296000
    refused(1.5, "timestamp")
    refused("yesterday", "timestamp", "not a time")


def test_json_row():
    got = convert.coerce({"b": 1, "a": {"d": 2, "c": 3}}, "json")
    assert list(got) == ["a", "b"] and list(got["a"]) == ["c", "d"]
    assert convert.coerce(19.99, "json") == 19.99
    assert type(convert.coerce(3, "json")) is int
    assert convert.coerce([TS], "json") == ["2026-05-03T09:20:00Z"]
    assert convert.coerce(None, "json") is None
    refused(b"x", "json", "expected json, found bytes")
    refused(math.inf, "json")
    deep = 1
    for _ in range(70):
        deep = [deep]
    refused(deep, "json", "deeper")
    ok = 1
    for _ in range(64):
        ok = {"k": ok}
    convert.coerce(ok, "json")


def test_geo_row():
    assert convert.coerce([13.3, 38.1], "geo") == (13.3, 38.1)
    assert convert.coerce([180, -90], "geo") == (180.0, -90.0)
    refused([13.3], "geo")
    refused([38.1, 91], "geo", "out of range")
    refused([181, 0], "geo", "out of range")
    refused(["a", 1], "geo")
    refused([math.nan, 1], "geo")
    refused([True, 1], "geo")


def test_list_row():
    assert convert.coerce([1, 2.0], ("list", "int")) == [1, 2]
    assert convert.coerce(["2026-01-01"], ("list", "timestamp")) == [V.parse_time("2026-01-01")]
    refused(3, ("list", "int"), "expected [int], found int")
    refused([1, "x"], ("list", "int"))


@pytest.mark.parametrize("ftype", ["bool", "int", "float", "text", "bytes", "timestamp", "json", "geo",
                                   ("list", "int")])
def test_null_converts_to_every_type(ftype):
    assert convert.coerce(None, ftype) is None


# ---------------------------------------------------------------- §3.4 the total order

def order(*vals):
    return sorted(vals, key=V.sort_key)


def test_kinds_order():
    vals = [{"a": 1}, [1], "a", b"a", 1, True, None]
    got = order(*vals)
    assert got[0] is None and got[1] is True and got[2] == 1
    assert got[-1] == {"a": 1} and got[-2] == [1]
    # every number below every text, every bool below every number
    assert V.compare(10**18, "") < 0
    assert V.compare(True, -(2**63)) < 0
    assert V.compare(None, False) < 0
    assert V.compare("zzz", []) < 0
    assert V.compare([], {}) < 0


def test_numbers_across_kinds():
    assert V.equal(3, 3.0)
    assert V.compare(V.Ts(5), 5) == 0 and V.equal(V.Ts(5), 5.0)
    assert V.compare(2, 2.5) < 0 and V.compare(V.Ts(3), 2.5) > 0
    big = 2**53 + 1
    assert V.compare(big, 2**53) > 0          # exact past 2^53
    assert V.compare(big, float(2**53)) > 0   # int against float compared exactly
    assert not V.equal(big, float(2**53))


def test_kinds_never_equal():
    assert not V.equal(1, True)
    assert not V.equal(0, False)
    assert not V.equal("1", 1)
    assert V.equal(None, None) and not V.equal(None, 0)


def test_text_by_utf8_bytes():
    assert V.compare("Zeynep", "cem") < 0
    assert V.compare("z", "é") < 0
    assert V.compare("\uffff", "😀") < 0  # a code point past the BMP sorts after U+FFFF, as UTF-8 does
    assert V.equal("ab", b"ab") and V.compare(b"ab", "ac") < 0


def test_lists_then_length_objects_then_size():
    assert V.compare([1, 2], [1, 3]) < 0
    assert V.compare([1, 2], [1, 2, 0]) < 0
    assert V.compare([2], [1, 9, 9]) > 0
    assert V.compare({"a": 1}, {"a": 2}) < 0
    assert V.compare({"a": 9}, {"b": 0}) < 0
    assert V.compare({"a": 1}, {"a": 1, "b": 0}) < 0
    assert V.equal([1, 2.0], [1.0, 2])
    assert V.compare(False, True) < 0


def test_sort_key_agrees_with_compare():
    vals = [None, False, True, -3, 0, 2.5, V.Ts(7), "", "a", "é", b"b", [], [1], [1, 0], {}, {"a": 1}]
    for a in vals:
        for b in vals:
            c = V.compare(a, b)
            ka, kb = V.sort_key(a), V.sort_key(b)
            assert c == (ka > kb) - (ka < kb), (a, b)


# ---------------------------------------------------------------- §9.6 truth

@pytest.mark.parametrize("v,want", [
    (True, True), (False, False), (None, False), (0, False), (0.0, False), (1, True), (-0.5, True),
    (V.Ts(0), False), (TS, True), ("", False), ("x", True), (b"", False), (b"\x00", True),
    ([], False), ([0], True), ({}, False), ({"a": None}, True),
])
def test_truth(v, want):
    assert V.truthy(v) is want


# ---------------------------------------------------------------- time

@pytest.mark.parametrize("text,ms", [
    ("2026-09-19", 1789776000000),
    ("2026-09-19T12:34:56", 1789821296000),
    ("2026-09-19 12:34:56", 1789821296000),
    ("2026-09-19T12:34", 1789821240000),
    ("2026-09-19T12:34:56Z", 1789821296000),
    ("2026-09-19T12:34:56z", 1789821296000),
    ("2026-09-19T12:34:56.789Z", 1789821296789),
    ("2026-09-19T12:34:56.7Z", 1789821296700),
    ("2026-09-19T12:34:56.789999Z", 1789821296789),  # finer digits truncated
    ("2026-09-19T15:34:56+03:00", 1789821296000),
    ("2026-09-19T15:34:56+0300", 1789821296000),
    ("2026-09-19T15:34:56+03", 1789821296000),
    ("2026-09-19T09:04:56-03:30", 1789821296000),
    ("2026-04-30T08:15:00+03:00", 1777526100000),
    ("1970-01-01T00:00:00Z", 0),
    ("1969-12-31T23:59:59.999Z", -1),
    ("2024-02-29", 1709164800000),
])
def test_parse_time_forms(text, ms):
    assert V.parse_time(text) == ms


@pytest.mark.parametrize("text", ["2026-02-29", "2026-13-01", "2026-04-31", "2026-01-01T24:00:00",
                                  "2026-01-01T12:60", "26-01-01", "yesterday", "", "2026-01-01T1:00",
                                  "2026-01-01T12:00:00+25:00"])
def test_parse_time_refusals(text):
    assert V.parse_time(text) is None


def test_format_leaves_out_zero_ms():
    assert V.format_time(1777800030000) == "2026-05-03T09:20:30Z"
    assert V.format_time(1789821296789) == "2026-09-19T12:34:56.789Z"
    assert V.format_time(1789821296007) == "2026-09-19T12:34:56.007Z"
    assert V.format_time(0) == "1970-01-01T00:00:00Z"
    assert V.format_time(-1) == "1969-12-31T23:59:59.999Z"


def test_format_parse_round_trip_over_the_whole_range():
    # ± about 2.9e8 years: the 64-bit ms range, both ends
    for ms in (V.TS_MAX, V.TS_MIN, 0, -86_400_000 * 365 * 3000 + 123, 253402300799999, 1777800000001):
        text = V.format_time(ms)
        assert V.parse_time(text) == ms, text
    year = int(V.format_time(V.TS_MAX).split("-")[0])
    assert 2.9e8 < year < 2.93e8
    assert V.format_time(V.TS_MIN).startswith("-2")


def test_timestamp_out_of_range_refused():
    with pytest.raises(FenecError) as ei:
        convert.coerce(2**63, "timestamp")
    assert ei.value.status == 400


def test_answer_values():
    assert V.answer_value(TS) == "2026-05-03T09:20:00Z"
    assert V.answer_value((13.3, 38.1)) == [13.3, 38.1]
    assert V.answer_value(b"\x01\x02") == [1, 2]
    assert V.answer_value([TS, None]) == ["2026-05-03T09:20:00Z", None]


def test_hashable_keeps_bools_apart():
    assert V.hashable(True) != V.hashable(1)
    assert V.hashable([1, {"a": 2}]) == V.hashable([1, {"a": 2}])
    hash(V.hashable({"a": [1, 2]}))


def nest_objects(n, innermost):
    v = innermost
    for _ in range(n):
        v = {"k": v}
    return v


def test_json_64_levels_of_objects_accepted_65_refused():
    convert.coerce(nest_objects(64, 1), "json")
    refused(nest_objects(65, 1), "json", "deeper")


def test_json_65_levels_refused_whatever_the_innermost_holds():
    refused(nest_objects(64, {}), "json", "deeper")  # 65 objects
    refused(nest_objects(64, []), "json", "deeper")
    refused(nest_objects(63, [[]]), "json", "deeper")
    refused(nest_objects(63, [[1, 2]]), "json", "deeper")
    assert convert.coerce(nest_objects(63, {}), "json") == nest_objects(63, {})  # 64 objects
    assert convert.coerce(nest_objects(63, [None]), "json") == nest_objects(63, [None])
    refused(nest_objects(63, [{}]), "json", "deeper")  # 63 objects, a list, an object


def test_json_holds_64_bit_integers_only_as_an_int_field_does():
    for v in (2**63, -(2**63) - 1, 2**64, 10**30):
        refused(v, "json", "out of range (64-bit)")
        refused({"a": [1, v]}, "json", "out of range (64-bit)")
        refused(v, "int", "out of range (64-bit)")
    assert convert.coerce({"hi": 2**63 - 1, "lo": -(2**63)}, "json") == {"hi": 2**63 - 1, "lo": -(2**63)}


def test_a_year_of_thousands_of_digits_is_out_of_range_not_a_crash():
    huge = "9" * 5000 + "-01-01"
    refused(huge, "timestamp", "out of range")
    refused("-" + huge, "timestamp", "out of range")
    assert V.parse_time(huge) > V.TS_MAX and V.parse_time("-" + huge) < V.TS_MIN
    assert V.parse_time("1" + "0" * 11 + "-01-01") > V.TS_MAX  # 12 digits: still read exactly
    assert V.parse_time("292278994-08-17T07:12:55.807Z") == V.TS_MAX


def test_numbers_too_large_for_a_float_are_type_errors():
    refused(10**400, "float", "too large")
    refused([10**5000, 0], "geo", "out of range")
    refused([0, -(10**30)], "geo", "out of range")


def test_objects_compare_member_by_member_in_key_order_whatever_order_they_came_in():
    # A json parameter keeps its sender's key order; stored objects are sorted (§3.3). `=` and the
    # order compared members in arrival order, so {k: 1, h: "x"} never equalled the stored object.
    assert V.equal({"k": 1, "h": "x"}, {"h": "x", "k": 1})
    assert V.compare({"b": 1, "a": 2}, {"a": 2, "b": 1}) == 0
    assert V.compare({"b": 1, "a": 1}, {"a": 2}) < 0  # a: 1 < a: 2 decides
    assert V.compare({"b": 0, "a": 2}, {"a": 2}) > 0  # same first member: the larger object is above
    assert V.equal([{"z": 1, "y": [1, {"q": 1, "p": 2}]}], [{"y": [1, {"p": 2, "q": 1}], "z": 1}])


def test_objects_with_keys_that_are_not_text_are_refused_or_ordered_never_a_crash():
    refused({1: "a", "b": 2}, "json", "object key of kind int")
    refused({"a": {(1, 2): 1}}, "json", "object key")
    assert V.compare({1: "a", "b": 2}, {"b": 2}) != 0  # ordered (by the key's text), no TypeError


def test_read_path_follows_objects_and_stops_at_anything_else() -> None:
    doc = {"run_at": 5, "payload": {"to": {"addr": "ada@example.com"}, "n": [1]}}
    assert V.read_target(doc, "run_at") == 5
    assert V.read_target(doc, "payload.to.addr") == "ada@example.com"
    assert V.read_target(doc, "payload.to.none") is None  # a missing key
    assert V.read_target(doc, "payload.n.0") is None  # a list is no object
    assert V.read_target(doc, "run_at.x") is None  # nor a number
    assert V.read_target(doc, "absent.x") is None
    assert V.read_path({"a": {"b": 1}}, ("a", "b")) == 1
    assert V.read_path(7, ()) == 7


def test_read_path_tells_an_absent_key_from_null_when_asked() -> None:
    claims = {"org": {"id": None}, "sub": "w-7"}
    assert V.read_path(claims, ("org", "id"), V.MISSING) is None  # present, null
    assert V.read_path(claims, ("org", "name"), V.MISSING) is V.MISSING
    assert V.read_path(claims, ("sub", "x"), V.MISSING) is V.MISSING  # a step that is no object
    assert V.read_path(claims, ("org", "name")) is None  # by default absent reads as null
