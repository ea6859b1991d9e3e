"""compile: arithmetic (fenecql.md §9.3), null logic (§9.4), truth in filters (§9.6), functions (§9.8)."""

from __future__ import annotations

import datetime as dt

import pytest
from fenecdb_server import FenecError, convert
from fenecdb_server import values as V
from fenecdb_server.plan import compile as C
from fenecdb_server.plan import operators as O
from fenecdb_server.plan.schema import FieldInfo, Schema
from fenecdb_server.ql.parser import parse

NOW = V.Ts(1777800000000)  # 2026-05-03T09:20:00Z, a Sunday
SCHEMA = Schema("t", {
    "i": FieldInfo("i", "int"), "f": FieldInfo("f", "float"), "s": FieldInfo("s", "text"),
    "t": FieldInfo("t", "timestamp"), "n": FieldInfo("n", "int"), "p": FieldInfo("p", "geo"),
    "l": FieldInfo("l", ("list", "int")), "j": FieldInfo("j", "json"), "b": FieldInfo("b", "bool"),
})
ROW = {"id": 1, "i": 7, "f": 2.5, "s": "Ada", "t": V.Ts(1777800000000), "n": None, "p": (13.36, 38.12),
       "l": [1, 2], "j": {"k": [1, 2], "o": {"x": 1}}, "b": True}


def ev(expr, params=(), row=ROW):
    e = parse(f"get t select {expr} as v")[0].select[0].expr
    return C.compile_expr(e, C.Ctx(SCHEMA))(row, C.Env(list(params), NOW))


def keeps(cond, params=(), row=ROW):
    e = parse(f"get t where {cond}")[0].where
    return C.compile_expr(e, C.Ctx(SCHEMA, where=True))(row, C.Env(list(params), NOW))


def refused(expr, *needles, params=()):
    with pytest.raises(FenecError) as ei:
        ev(expr, params)
    assert ei.value.status == 400, ei.value
    for n in needles:
        assert n in ei.value.message
    return ei.value


def ms(*args):
    return int(dt.datetime(*args, tzinfo=dt.UTC).timestamp() * 1000)


# ---------------------------------------------------------------- §9.3 arithmetic table

@pytest.mark.parametrize("expr,want", [
    ("7 + 2", 9), ("7 - 9", -2), ("7 * 3", 21),
    ("7 / 2", 3), ("-7 / 2", -3), ("7 / -2", -3), ("-7 / -2", 3),
    ("7 % 3", 1), ("-7 % 3", -1), ("7 % -3", 1), ("-7 % -3", -1),
    ("1 + 0.5", 1.5), ("0.5 * 4", 2.0), ("7 / 2.0", 3.5), ("7.5 % 2", 1.5), ("-7.5 % 2", -1.5),
    ('"a" + "b"', "ab"),
])
def test_arithmetic_table(expr, want):
    got = ev(expr)
    assert got == want and type(got) is type(want)


def test_int_kinds_stay_int_float_kinds_float():
    assert type(ev("i * 2")) is int
    assert type(ev("i * 2.0")) is float and ev("i * 2.0") == 14.0


def test_timestamp_arithmetic():
    later = ev("now() + 1000")
    assert type(later) is V.Ts and later == NOW + 1000
    assert type(ev("1000 + now()")) is V.Ts
    earlier = ev("now() - 1000")
    assert type(earlier) is V.Ts and earlier == NOW - 1000
    between = ev("now() - t", row={**ROW, "t": V.Ts(NOW - 45_000)})
    assert between == 45_000 and type(between) is int
    assert ev("now() + 2.0") == NOW + 2  # whole float: allowed
    refused("now() + 0.5", "whole")
    for bad in ("now() * 2", "now() / 2", "now() % 2", "1000 - now()", "2 * now()", "now() + now()",
                "now() * now()", "now() + 's'"):
        refused(bad)


@pytest.mark.parametrize("expr", ['"a" + 1', '1 + "a"', '"a" - "b"', '"a" * 2', "true + 1", "[1] + [2]",
                                  "b + 1", "l * 2"])
def test_other_pairs_refused(expr):
    refused(expr)


def test_null_spreads():
    for op in "+-*/%":
        assert ev(f"n {op} 1") is None
        assert ev(f"1 {op} n") is None
    assert ev("now() + n") is None
    assert ev('"a" + n') is None


def test_overflow_refused_never_wrapped():
    refused(f"{2**63 - 1} + 1", "overflow")
    refused(f"{-(2**63)} - 1", "overflow")
    refused(f"{-(2**63)} / -1", "overflow")
    refused("3037000500 * 3037000500", "overflow")
    assert ev(f"{2**63 - 2} + 1") == 2**63 - 1
    refused("1e308 * 10", "finite")


def test_division_by_zero():
    for expr in ("1 / 0", "1 % 0", "1.0 / 0", "1 % 0.0"):
        refused(expr, "division by zero")


def test_exact_big_int_division():
    big = 2**62 + 1
    assert ev(f"{big} / 3") == big // 3


# ---------------------------------------------------------------- §9.4 null logic

@pytest.mark.parametrize("cond,want", [
    ("n = null", True), ("n != null", False), ("n = 1", False), ("n != 1", True), ("i != null", True),
    ("n < 1", False), ("n <= 1", False), ("n > 1", False), ("n >= 1", False), ("1 > n", False),
    ("not (n <= 1)", True), ("n is null", True), ("n is not null", False), ("i is null", False),
    ("i = 7.0", True), ("i = true", False), ("i = \"7\"", False), ("i < \"a\"", True),
    ("s ~ \"DA\"", True), ("s ~ \"\"", True), ("i ~ \"7\"", False), ("s ~ n", False),
    ("l has 2", True), ("l has 3", False), ("j.k has 1", True), ("s has \"A\"", False), ("n has 1", False),
    ("i in [1, 7]", True), ("i in []", False), ("n in [null]", True), ("i in [7.0]", True),
    ("t >= \"2026-05-03\"", True), ("t = \"2026-05-03T12:20:00+03:00\"", True), ("t < \"nonsense\"", True),
    ("true and n", False), ("n or i", True), ("not n", True), ("not \"\"", True), ("s and l", True),
    ("[] or 0", False),
])
def test_conditions(cond, want):
    assert V.truthy(keeps(cond)) is want


def test_and_or_stop_early():
    assert V.truthy(keeps("false and 1 / 0 = 1")) is False
    assert V.truthy(keeps("true or 1 / 0 = 1")) is True


def test_case_only_takes_the_branch():
    assert ev("case when i = 0 then null else 14 / i end") == 2
    assert ev("case when i = 7 then 0 else 1 / 0 end") == 0
    assert ev("case when false then 1 end") is None
    assert ev("case when n then 1 when s then 2 else 3 end") == 2


# ---------------------------------------------------------------- §9.8 functions

def test_coalesce_greatest_least():
    assert ev("coalesce(n, null, 3, 4)") == 3
    assert ev("coalesce(n)") is None
    assert ev("greatest(1, n, 3.5, 2)") == 3.5
    assert ev("least(n, 4, 2)") == 2
    assert ev("greatest(n, n)") is None
    assert ev('greatest(1, "a")') == "a"  # by the total order: text above numbers


def test_lower_upper_len():
    assert ev('lower("ÇAĞ")') == "çağ"
    assert ev('upper("straße")') == "STRASSE"
    assert ev("lower(n)") is None
    refused("lower(1)")
    assert ev('len("çağ")') == 3
    assert ev('len("😀")') == 1
    assert ev("len(l)") == 2
    assert ev("len(n)") is None
    refused("len(5)")


def test_timestamp_function():
    assert ev('timestamp("2026-05-03T09:20:00Z")') == NOW
    assert type(ev("timestamp(0)")) is V.Ts
    refused('timestamp("soon")')
    refused("timestamp(1.5)")


def test_unknown_function_and_arity():
    refused("nosuch(1)", "unknown function")
    refused("now(1)")
    refused("distance(p)")
    refused("coalesce()")


@pytest.mark.parametrize("iv,start", [
    ("1ms", None),
    ("15m", (2026, 5, 3, 9, 15)),
    ("7s", None),
    ("1h", (2026, 5, 3, 9)),
    ("3h", (2026, 5, 3, 9)),
    ("1d", (2026, 5, 3)),
    ("1w", (2026, 4, 27)),  # the Monday before
    ("2w", None),
    ("1mo", (2026, 5, 1)),
    ("3mo", (2026, 4, 1)),  # quarters from January 1970
    ("5mo", None),
    ("1y", (2026, 1, 1)),
    ("4y", (2026, 1, 1)),  # 1970 + 56
])
def test_bucket_every_unit(iv, start):
    got = ev(f"bucket(t, {iv})", row={**ROW, "t": V.Ts(NOW + 123)})
    assert type(got) is V.Ts
    t = NOW + 123
    if start is not None:
        assert got == ms(*start)
    assert got <= t
    if iv == "1ms":
        assert got == t
    if iv == "7s":
        assert got % 7000 == 0 and t - got < 7000
    if iv == "2w":
        monday = ms(1970, 1, 5)
        assert (got - monday) % (14 * 86_400_000) == 0 and t - got < 14 * 86_400_000
        assert dt.datetime.fromtimestamp(got / 1000, dt.UTC).weekday() == 0
    if iv == "5mo":
        d = dt.datetime.fromtimestamp(got / 1000, dt.UTC)
        assert d.day == 1 and d.hour == 0 and ((d.year - 1970) * 12 + d.month - 1) % 5 == 0


def test_bucket_months_by_calendar_and_before_1970():
    # months are calendar months, not 30 days: the last ms of February stays in February
    feb_end = ms(2024, 3, 1) - 1
    assert O.bucket(V.Ts(feb_end), (1, "mo")) == ms(2024, 2, 1)
    assert O.bucket(V.Ts(ms(1969, 12, 31, 23)), (1, "y")) == ms(1969, 1, 1)
    assert O.bucket(V.Ts(ms(1969, 12, 31, 23)), (1, "mo")) == ms(1969, 12, 1)
    assert O.bucket(V.Ts(ms(1970, 1, 4, 23)), (1, "w")) == ms(1969, 12, 29)  # a Monday
    assert O.bucket(V.Ts(-1), (1, "d")) == -86_400_000


def test_bucket_intervals_and_kinds():
    assert ev("bucket(1777800000123, 1000)") == 1777800000000
    assert type(ev("bucket(1777800000123, 1000)")) is int  # an int answers an int
    assert ev("bucket(t, $1)", params=["15m"]) == ms(2026, 5, 3, 9, 15)
    assert ev("bucket(t, $1)", params=[60000]) == NOW
    assert ev("bucket(n, 1d)") is None
    refused("bucket(t, $1)", params=["fortnight"])
    refused("bucket(t, $1)", params=[0])
    refused('bucket("x", 1d)')


def test_distance_palermo_catania():
    palermo, catania = [13.361389, 38.115556], [15.087269, 37.502669]
    got = ev(f"distance({palermo}, {catania})")
    assert abs(got - 166274.2578) < 0.001
    assert ev(f"distance({palermo}, {palermo})") == 0.0
    assert ev("distance(p, n)") is None
    refused("distance([1], [2, 3])")
    refused("distance([200, 0], [0, 0])")


def test_within_boxes_edges_and_antimeridian():
    assert O.within((13.3, 38.1), [13, 38, 14, 39])
    assert O.within((13.0, 38.0), [13, 38, 14, 39])  # edges included
    assert O.within((14.0, 39.0), [13, 38, 14, 39])
    assert not O.within((14.01, 38.5), [13, 38, 14, 39])
    assert not O.within((13.5, 39.01), [13, 38, 14, 39])
    # a box whose west is east of its east crosses the antimeridian
    assert O.within((179.5, 0.0), [170, -5, -170, 5])
    assert O.within((-179.5, 0.0), [170, -5, -170, 5])
    assert O.within((180.0, 0.0), [170, -5, -170, 5])
    assert not O.within((0.0, 0.0), [170, -5, -170, 5])
    assert not O.within(None, [0, 0, 1, 1])
    with pytest.raises(FenecError):
        O.within((0.0, 0.0), [0, 0, 1])
    assert keeps("within(p, [13, 38, 14, 39])") is True


def test_expired_only_in_where_and_needs_ttl():
    with pytest.raises(FenecError) as ei:
        keeps("expired()")
    assert ei.value.status == 400 and "@ttl" in ei.value.message
    with pytest.raises(FenecError):
        ev("expired()")


def test_depth_limit_at_compile():
    keeps("(" * 511 + "i = 7" + ")" * 511)
    with pytest.raises(FenecError) as ei:
        keeps("not " * 600 + "b")
    assert ei.value.status == 400 and "too deep" in ei.value.message


def test_paths_read_null_where_they_lead_nowhere():
    assert ev("j.o.x") == 1
    assert ev("j.nope.deeper") is None
    assert ev("j.k.x") is None  # a list on the way
    with pytest.raises(FenecError) as ei:
        ev("s.x")
    assert ei.value.status == 400
    with pytest.raises(FenecError) as ei:
        ev("nosuch")
    assert ei.value.status == 404


def test_bucket_zero_interval_is_400():
    from fenecdb_server import Database

    db = Database(clock=lambda: int(NOW))
    db.query("create collection z (n int)")
    db.query("put z {n: 1}")
    for text in ("get z select bucket(now(), 0m) as b", "set z {n: bucket(now(), 0ms)}"):
        with pytest.raises(FenecError) as ei:
            db.query(text)
        assert ei.value.status == 400 and "above zero" in ei.value.message
    assert db.query("get z select n") == [{"n": 1}]  # the refused set wrote nothing


@pytest.mark.parametrize("iv", [0, -5, 0.0, -1.5e3, "0m", "0ms", " 0d ", "-1m"])
def test_bucket_interval_parameters_above_zero(iv):
    refused("bucket(t, $1)", params=[iv])


@pytest.mark.parametrize("iv", ["²m", "1.5m", "15 m", "15M", "m", "", "9" * 5000 + "ms", True, None, [1]])
def test_bucket_odd_intervals_are_400(iv):
    refused("bucket(t, $1)", "bucket takes an interval", params=[iv])


def test_bucket_interval_forms():
    assert ev("bucket(t, $1)", params=[60000.0]) == NOW
    assert ev("bucket(t, $1)", params=[" 1h "]) == ms(2026, 5, 3, 9)
    refused("bucket(t, $1)", params=[60000.5])


def test_bucket_past_the_64_bit_range_is_400():
    # A bucket far wider than the time starts far before it: past the timestamp or int range.
    for t in (V.Ts(-1), -1, V.Ts(V.TS_MIN)):
        for iv in ("10000000000000000000ms", "1000000000000000d", "1000000000000000y", "1000000000000000w"):
            with pytest.raises(FenecError) as ei:
                O.bucket(t, O.interval(iv))
            assert ei.value.status == 400 and "range" in ei.value.message, (t, iv)
    assert O.bucket(1, O.interval("1000000000000000y")) == 0  # after 1970: it starts at the epoch
    assert ev("bucket($1, 1000000000000d)", params=[5]) == 0
    refused("bucket($1, 1000000000000d)", "range", params=[-5])
    refused("bucket($1, 1d)", "range", params=[2**64 - 1])  # an over-64-bit int from a client


def test_numbers_too_large_for_floats_are_400():
    refused("$1 + 0.5", "too large", params=[10**400])
    refused("$1 * 1.0", "too large", params=[-(10**400)])
    refused("distance($1, [0, 0])", "out of range", params=[[10**400, 0]])
    refused("$1 + 1", "64 bits", params=[2**64 - 1])
    refused("$1 - now()", "range", params=[V.Ts(V.TS_MIN)])
    refused("now() + $1", "range", params=[V.TS_MAX])
    refused("now() - $1", "range", params=[10**400])
    refused("now() + $1", "whole", params=[0.5])
    refused("$1 % $2", "finite", params=[float("inf"), -1])  # math.fmod raised ValueError
    refused("$1 - $2", "64-bit", params=[V.Ts(V.TS_MAX), V.Ts(V.TS_MIN)])  # ms between, past 64 bits


def test_a_field_of_lists_or_objects_compares_by_the_total_order():
    # `field <= value` took a shortcut for two values of one Python type, and lists holding mixed
    # kinds or objects raised TypeError (a 500) instead of ordering by §3.4 rule 6.
    row = {**ROW, "j": [1, "x"], "l": [1, 2]}
    assert keeps("j <= $1", params=[["y", 2]], row=row) is True  # 1 < "y": numbers below text
    assert keeps("j <= $1", params=[[1, 2]], row=row) is False
    assert keeps("j <= j", row=row) is True
    assert keeps("l <= $1", params=[[1, "a"]], row=row) is True
    obj = {**ROW, "j": {"a": 1}}
    assert keeps("j <= $1", params=[{"a": 2}], row=obj) is True
    assert keeps("j <= $1", params=[{"a": 0}], row=obj) is False
    assert keeps("j <= $1", params=[{"a": 1}], row=obj) is True
    assert keeps("b <= $1", params=[False]) is False and keeps("b <= $1", params=[True]) is True
    assert keeps("t <= $1", params=[int(NOW)]) is True and keeps("t <= $1", params=[int(NOW) - 1]) is False


def test_time_text_of_thousands_of_digits_is_no_crash():
    huge = "9" * 5000 + "-01-01"
    assert keeps("t < $1", params=[huge]) is True
    assert keeps("t = $1", params=[huge]) is False
    assert keeps("t > $1", params=["-" + huge]) is True
    refused("timestamp($1)", "range", params=[huge])


def test_object_literals_have_sorted_keys():
    assert ev("{b: 1, a: 2} = {a: 2, b: 1}") is True
    assert list(ev("{b: 1, a: 2}")) == ["a", "b"]


def test_and_chain_links_count_one_level_each():
    assert keeps(" and ".join(["i = 7"] * 511)) is True
    assert keeps(" or ".join(["i = 8"] * 510 + ["i = 7"])) is True
    for op in (" and ", " or "):
        with pytest.raises(FenecError) as ei:
            keeps(op.join(["i = 7"] * 512))
        assert ei.value.status == 400 and "too deep" in ei.value.message


def test_and_chain_far_past_the_limit_is_400():
    with pytest.raises(FenecError) as ei:
        keeps(" and ".join(["i = 7"] * 600))
    assert ei.value.status == 400 and "too deep" in ei.value.message


@pytest.mark.parametrize("expr, want", [
    ("i + 1", "int"), ("1 + i", "int"), ("i - n * 2", "int"), ("now()", "timestamp"), ("now() + 30000", "timestamp"),
    ("now() - 5", "timestamp"), ("t + 1", "timestamp"), ("7", "int"), ("'x'", "text"), ("s", "text"), ("true", "bool"),
    ("$1", None), ("i + 1.5", None), ("f + 1", None), ("i + $1", None), ("t - t", None), ("j", None),
    ("coalesce(i, 0) + 1", None), ("1 - now()", None),
])
def test_static_type_names_only_kinds_the_schema_fixes(expr, want):
    e = parse(f"get t select {expr} as v")[0].select[0].expr
    assert C.static_type(e, SCHEMA) == want


@pytest.mark.parametrize("row", [ROW, {**ROW, "i": None}, {**ROW, "i": V.INT_MAX - 1}, {**ROW, "i": V.INT_MIN}])
def test_a_value_of_a_static_type_is_its_own_conversion(row):
    """What lets a patch skip converting it (engine/prepare._plain): coerce changes nothing."""
    for expr in ("i + 1", "i - 1", "now() + 30000", "t + 1", "s"):
        e = parse(f"get t select {expr} as v")[0].select[0].expr
        try:
            v = C.compile_expr(e, C.Ctx(SCHEMA))(row, C.Env([], NOW))
        except FenecError:
            continue  # an overflow is raised the same way whether converted or not
        got = convert.coerce(v, C.static_type(e, SCHEMA))
        assert got == v and type(got) is type(v)


def test_the_short_additions_answer_as_the_general_one():
    """`now() + n` and `field + n` skip the dispatch on kinds, never its answers or errors."""
    assert ev("i + 1") == 8 and type(ev("i + 1")) is int
    assert ev("f + 1") == 3.5
    assert ev("n + 1") is None
    assert ev("now() + 1000") == V.Ts(NOW + 1000) and type(ev("now() + 1000")) is V.Ts
    with pytest.raises(FenecError) as ei:
        ev("i + 1", row={**ROW, "i": V.INT_MAX})
    assert "overflow" in ei.value.message
    refused("s + 1", "cannot apply")
    refused("b + 1", "cannot apply")
    refused("now() + 9223372036854775807", "timestamp")
