"""The server README's "Access: a job-queue setup" runs as written: its `sh` blocks, in order, in an
empty directory, with `fenec-server` and `curl` on the PATH; the one thing changed is the port
(8081 → a free one). What they print must be the README's `text` block, exactly."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Access: a job-queue setup"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start: end if end != -1 else len(text)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_section_has_the_whole_setup() -> None:
    text = section()
    script = "\n".join(blocks(text, "sh"))
    for needed in ("jobs.policy", "jwt.secret", "--mint-token", "--policy", "--jwt-secret-file", "curl",
                   '"role":"worker"', '"role":"producer"', "del jobs"):
        assert needed in script, needed
    assert len(blocks(text, "text")) == 1


def run_page(text: str, port: str, cwd: Path, timeout: float) -> tuple[str, str]:
    """A page's `sh` blocks run in order as one script (run_as_a_user), on a free port for the one it
    names; it must exit 0 and print the page's one `text` block. Returns (the free port, the server's
    log: `server.log`, which the page's server writes)."""
    free = str(free_port())
    script = "set -euo pipefail\n" + "\n".join(blocks(text, "sh")).replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
    assert port not in script
    (expected,) = blocks(text, "text")
    code, out, err = run_as_a_user(script, cwd, timeout=timeout)
    log = (cwd / "server.log").read_text() if (cwd / "server.log").exists() else ""
    assert code == 0, out + err + log
    assert out == expected, out + err + log
    return free, log


def run_as_a_user(script: str, cwd: Path, timeout: float) -> tuple[int, str, str]:
    """A page's shell script, run as a user runs it: the venv's `fenec-server` on the PATH, no token in the
    environment, in a session of its own whose processes (the script's server too, should the script have
    stopped before its `kill`) are killed after it."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    for name in ("FENEC_HTTP_TOKEN", "FENEC_JWT_SECRET"):
        env.pop(name, None)
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_access_setup_runs_as_written(tmp_path: Path) -> None:
    port, log = run_page(section(), "8081", tmp_path, timeout=60)
    assert "listening on: http://127.0.0.1:" + port in log and "[token]" in log
    assert (tmp_path / "q.fenec").exists()
