"""The builder's Python side: what the shared vectors cannot say (immutability, where an error is
raised, Python values). The text rules themselves are held by conformance/builder.json
(test_vectors.py)."""

from __future__ import annotations

import array
import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest
from fenecdb import BuilderError, FenecError, collection, expr, inc, not_, or_, raw


def test_a_step_leaves_the_query_it_was_called_on_untouched() -> None:
    base = collection("jobs").where("queue", "mail")
    a = base.where("owner", None).order("run_at").limit(5)
    b = base.select("id").offset(2)
    assert base.to_fenecql() == ("get jobs where queue = $1", ["mail"])
    assert a.to_fenecql() == ("get jobs where queue = $1 and owner is null order run_at asc limit 5", ["mail"])
    assert b.to_fenecql() == ("get jobs select id where queue = $1 offset 2", ["mail"])


def test_one_base_query_serves_many_threads() -> None:
    base = collection("jobs").where(raw("run_at <= now()"))

    def chain(i: int) -> tuple[str, list[object]]:
        return base.where("n", i).to_fenecql()

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(chain, range(200)))
    assert got == [("get jobs where run_at <= now() and n = $1", [i]) for i in range(200)]


def test_a_refusal_is_raised_at_the_step_that_is_wrong() -> None:
    q = collection("jobs")
    with pytest.raises(BuilderError) as e:
        q.order("id", "sideways")
    assert str(e.value) == "order direction must be 'asc' or 'desc': sideways"
    with pytest.raises(BuilderError, match=r"raw\(\): more `\?` placeholders than parameters"):
        raw("a = ? and b = ?", 1)
    with pytest.raises(BuilderError, match="invalid collection name"):
        collection("no spaces")


def test_a_builder_error_is_a_fenec_error_with_status_zero() -> None:
    with pytest.raises(FenecError) as e:
        collection("jobs").limit(-1)
    assert e.value.status == 0 and e.value.code == "builder" and e.value.at is None
    assert str(e.value) == "limit must be a non-negative integer: -1"


def test_python_values_become_json_parameters() -> None:
    naive = dt.datetime(2025, 3, 1, 8, 0, 0, 123456)
    aware = dt.datetime(2025, 3, 1, 11, 0, tzinfo=dt.timezone(dt.timedelta(hours=3)))
    text, params = collection("t").to_insert({
        "a": naive, "b": aware, "c": dt.date(2025, 3, 1), "v": array.array("f", [0.5, 2.0]),
        "t": (1, 2), "j": {"when": naive, "n": [1, 2.5]},
    })
    assert text == "put t {a: $1, b: $2, c: $3, v: $4, t: $5, j: $6}"
    assert params == ["2025-03-01T08:00:00.123Z", "2025-03-01T08:00:00.000Z", "2025-03-01T00:00:00.000Z",
                      [0.5, 2.0], [1, 2], {"when": "2025-03-01T08:00:00.123Z", "n": [1, 2.5]}]
    assert type(params[4][0]) is int


def test_a_value_the_wire_cannot_carry_is_refused() -> None:
    with pytest.raises(BuilderError, match="cannot send a value of type object"):
        collection("t").where("a", object())


def test_conditions_compose_from_python_calls() -> None:
    cond = or_({"state": "open"}, not_({"owner": None}), raw("attempts < ?", 3))
    assert collection("t").where(cond).to_fenecql() == (
        "get t where state = $1 or not (owner is null) or attempts < $2", ["open", 3])


def test_inc_and_expr_are_checked_when_made() -> None:
    assert inc().by == 1
    with pytest.raises(BuilderError, match="inc\\(\\) takes a number: null"):
        inc(float("nan"))
    with pytest.raises(BuilderError, match="expr\\(\\): too many parameters given"):
        expr("now()", 1)


def test_returning_accepts_one_field_name_as_text() -> None:
    assert collection("t").where("id", 1).to_delete(returning="payload")[0] == \
        "del t where id = $1 returning payload"


def test_where_takes_one_to_three_arguments() -> None:
    with pytest.raises(TypeError):
        collection("t").where()
    with pytest.raises(TypeError):
        collection("t").where("a", "=", 1, 2)
