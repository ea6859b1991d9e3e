"""errors: every kind carries the status the spec names (fenecql.md §17, http.md §6)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fenecdb_server import FenecError
from fenecdb_server import errors as E


@pytest.mark.parametrize("kind,status", [
    ("query", 400), ("type", 400), ("auth", 401), ("denied", 403), ("notfound", 404), ("exists", 409),
    ("busy", 409), ("unmet", 412), ("toolarge", 413), ("conflict", 422), ("io", 500), ("unavailable", 503),
])
def test_kind_status(kind, status):
    e = FenecError(kind, "why")
    assert (e.kind, e.status, e.message, e.at) == (kind, status, "why", None)
    assert str(e) == "why"


def test_the_status_is_the_kinds_and_none_other():
    e = FenecError("unavailable", "closed", at=2)
    assert e.status == 503 and e.at == 2
    assert "503" in repr(e) and "closed" in repr(e)
    with pytest.raises(TypeError):
        FenecError("io", "x", status=503)  # type: ignore[call-arg]  # no raise site names a status
    assert E.STATUS == {k: FenecError(k, "x").status for k in E.STATUS}


def test_unknown_kind_is_refused():
    with pytest.raises(KeyError):
        FenecError("nonsense", "x")


def test_every_kinds_status_is_a_row_of_the_http_pages_error_table():
    page = (Path(__file__).resolve().parents[3] / "docs" / "http.md").read_text()
    rows = set(re.findall(r"^\| (\d{3}) \|", page, re.M))
    assert {str(s) for s in E.STATUS.values()} <= rows


def test_is_an_exception():
    with pytest.raises(FenecError):
        raise FenecError("query", "x")
