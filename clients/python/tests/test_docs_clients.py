"""docs/clients.md's `python` block ("Replicas and failover") runs against a live primary and its replica,
and prints what the `# ...` line under each `print(...)` says (the page's URLs replaced by the servers')."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from file_server import end, launch
from test_readme import BLOCK, printed_as_documented

PAGE = Path(__file__).resolve().parents[3] / "docs" / "clients.md"
PRIMARY, REPLICA = "http://127.0.0.1:8080", "http://127.0.0.1:8081"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[str, str]]:
    token = secrets.token_urlsafe(16)
    primary, p_url, _ = launch("--file", str(tmp_path / "p.fenec"), "--http", "127.0.0.1:0", "--sync", "always",
                               "--replication-token", token, timeout=60)
    try:
        replica, r_url, _ = launch("--file", str(tmp_path / "r.fenec"), "--http", "127.0.0.1:0",
                                   "--replica-of", p_url, "--replication-token", token, timeout=60)
        try:
            yield p_url, r_url
        finally:
            end(replica, 10)
    finally:
        end(primary, 10)


def test_the_replicas_example_runs(pair: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    (block,) = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    p_url, r_url = pair
    code = block.replace(REPLICA, r_url).replace(PRIMARY, p_url)
    exec(compile(code, "docs/clients.md python block", "exec"), {"__name__": "docs"})  # noqa: S102
    want = [line.replace(REPLICA, r_url).replace(PRIMARY, p_url) for line in printed_as_documented(block)]
    assert want == [p_url, "1"]
    assert capsys.readouterr().out.splitlines() == want
