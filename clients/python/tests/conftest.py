"""Shared fixtures: a capture transport for unit tests (no server), and one live
`fenec-server` on a free loopback port for the tests that talk to a real one (or, with
FENEC_TEST_URL set, the server at that address, started by someone else: the wire corpus records
the live tests through its proxy so, conformance/wire/README.md)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import fenecdb
import pytest
from capture_transport import Capture
from file_server import end, launch

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def capture() -> Capture:
    return Capture()


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    given = os.environ.get("FENEC_TEST_URL")
    if given:
        yield given.rstrip("/")
        return
    proc, url, _reader = launch("--http", "127.0.0.1:0", timeout=30, cwd=ROOT)
    try:
        yield url
    finally:
        end(proc, 10)


@pytest.fixture
def queue(server_url: str) -> Iterator[str]:
    """A fresh job-queue collection on the live server, dropped afterwards."""
    name = f"jobs_{secrets.token_hex(4)}"
    with fenecdb.Client(server_url) as db:
        db.query(f"create collection {name} (payload json, run_at timestamp @sorted, owner text, "
                 "attempts int, error text)")
        yield name
        db.query(f"drop collection {name}")
