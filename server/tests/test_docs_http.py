"""docs/http.md runs as written: its `sh` blocks, in page order, against one fresh `fenec-server` (the one change:
port 8080 → a free one), each printing exactly the `text` block that follows it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "http.md"
PAIRS = 5


def pairs(text: str) -> list[tuple[str, str]]:
    return re.findall(r"```sh\n(.*?)```\s*```text\n(.*?)```", text, flags=re.S)


def test_every_sh_block_has_its_answer() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(pairs(text)) == PAIRS == text.count("```sh")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_page_runs_as_written(tmp_path: Path) -> None:
    server = subprocess.Popen([str(Path(sys.executable).parent / "fenec-server"), "--http", "127.0.0.1:0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            assert line, "the server stopped before it listened"
            if m := re.search(r"listening on: http://127\.0\.0\.1:(\d+)", line):
                port = m.group(1)
        assert port, "the server never said where it listens"
        for k, (script, expected) in enumerate(pairs(PAGE.read_text(encoding="utf-8")), 1):
            script = script.replace("localhost:8080", f"localhost:{port}")
            run = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, f"block {k}: {run.stdout}{run.stderr}"
            assert run.stdout == expected, f"block {k}:\n{run.stdout}"
    finally:
        server.terminate()
        server.wait(30)
