"""Schemathesis over `/_openapi.json` against a live server, bounded for `make test`: a fixed,
derandomized run of EXAMPLES requests (positive and negative), no 5xx and every 4xx a JSON
`{"error": text}`. `make fuzz` runs the same for longer (schema_fuzz.py)."""

from __future__ import annotations

from typing import Any

import pytest
from schema_fuzz import SETUP, run
from test_http_e2e import Server, served

EXAMPLES = 1500


@pytest.fixture(scope="module")
def server() -> Any:
    with served("--max-connections", "0", setup=SETUP) as s:
        yield s


def test_schemathesis_finds_no_5xx(server: Server) -> None:
    report = run(server.url, EXAMPLES, derandomize=True)
    print("\n".join(report.lines()))
    assert report.sent >= EXAMPLES // 2, report.lines()  # most examples reach the server
    assert len(report.statuses) >= 4, report.lines()  # answers of several kinds: the run went deep enough
    assert report.server_errors == [], report.lines()
    assert report.bad_errors == [], report.lines()
