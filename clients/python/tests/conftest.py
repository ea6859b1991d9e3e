"""Shared fixtures: a capture transport for unit tests (no server), and one live
`fenec-server` on a free loopback port for the tests that talk to a real one."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import fenecdb
import pytest
from capture_transport import Capture

ROOT = Path(__file__).resolve().parents[3]
SERVER = Path(sys.executable).with_name("fenec-server")
LISTENING = re.compile(r"listening on: (http://\S+)")


@pytest.fixture
def capture() -> Capture:
    return Capture()


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    proc = subprocess.Popen([str(SERVER), "--http", "127.0.0.1:0"], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            m = LISTENING.search(line)
            if m and not found:
                found.append(m.group(1).rstrip("/"))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(30)
    try:
        assert found, "fenec-server did not start"
        yield found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def queue(server_url: str) -> Iterator[str]:
    """A fresh job-queue collection on the live server, dropped afterwards."""
    name = f"jobs_{secrets.token_hex(4)}"
    with fenecdb.Client(server_url) as db:
        db.query(f"create collection {name} (payload json, run_at timestamp @sorted, owner text, "
                 "attempts int, error text)")
        yield name
        db.query(f"drop collection {name}")
