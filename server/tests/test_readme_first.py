"""The root README's "A worker with curl" runs as written, on a server started the README's way: `make serve`
with a fresh FILE and a free PORT (its one change: 8080 → that port). What the `sh` block prints must be the
section's `text` block, exactly."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_readme_access import blocks, free_port

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## A worker with curl"


def section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start: end if end != -1 else len(text)]


def test_the_section_makes_the_queue_before_it_claims() -> None:
    (script,) = blocks(section(), "sh")
    order = [script.index(word) for word in ("create collection jobs", "put jobs", "Fenec-Wait", "del jobs")]
    assert order == sorted(order)


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("make") is None, reason="needs curl and make")
def test_the_first_example_runs_as_written_after_make_serve(tmp_path: Path) -> None:
    port = free_port()
    (script,) = blocks(section(), "sh")
    script = "set -euo pipefail\n" + script.replace("localhost:8080", f"127.0.0.1:{port}")
    assert "8080" not in script
    (expected,) = blocks(section(), "text")
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("FENEC_HTTP_TOKEN", "FENEC_JWT_SECRET", "MAKEFLAGS")}
    with log.open("w") as out:
        serve = subprocess.Popen(["make", "-s", "serve", f"PORT={port}", f"FILE={tmp_path / 'data.fenec'}"],
                                 cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # generous: the first `make serve` may install
        while f"listening on: http://127.0.0.1:{port}" not in log.read_text():
            assert serve.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        run = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout == expected, run.stdout + run.stderr
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(30)
    assert (tmp_path / "data.fenec").exists()
