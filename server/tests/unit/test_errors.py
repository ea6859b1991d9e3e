"""errors: every kind carries the status the spec names (fenecql.md §17, http.md §6)."""

from __future__ import annotations

import pytest
from fenecdb_server import FenecError
from fenecdb_server import errors as E


@pytest.mark.parametrize("kind,status", [
    ("query", 400), ("type", 400), ("auth", 401), ("denied", 403), ("notfound", 404), ("exists", 409),
    ("unmet", 412), ("toolarge", 413), ("conflict", 422), ("io", 500),
])
def test_kind_status(kind, status):
    e = FenecError(kind, "why")
    assert (e.kind, e.status, e.message, e.at) == (kind, status, "why", None)
    assert str(e) == "why"


def test_status_override_and_at():
    e = FenecError("io", "closed", status=503, at=2)
    assert e.status == 503 and e.at == 2
    assert "503" in repr(e) and "closed" in repr(e)


def test_unknown_kind_is_refused():
    with pytest.raises(KeyError):
        FenecError("nonsense", "x")


def test_helpers():
    assert E.query_error("a").status == 400 and E.query_error("a").kind == "query"
    assert E.type_error("a").kind == "type"
    assert E.not_found("a").status == 404
    assert E.exists("a").status == 409


def test_is_an_exception():
    with pytest.raises(FenecError):
        raise FenecError("query", "x")
