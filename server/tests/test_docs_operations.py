"""docs/operations.md runs as written: its `sh` blocks, in order, in an empty directory, with
`fenec-server` and `curl` on the PATH and the port 8080 changed to a free one; what they print
must be the page's `text` block, exactly (a compaction, a backup taken and restored, the access log)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_readme_access import blocks, free_port, run_as_a_user, run_page

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_operations_page_runs_as_written(tmp_path: Path) -> None:
    _port, log = run_page(DOC.read_text(encoding="utf-8"), "8080", tmp_path, timeout=90)
    assert (tmp_path / "backup.fenec").read_bytes().startswith(b"FENECLOG")
    assert "compacted on demand: " in log


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_replication_section_runs_as_written(tmp_path: Path) -> None:
    """Its `bash` blocks (the page's `sh` blocks are the test above's) on two free ports, printing
    its `output` block exactly: a sync replica, a write read back with Fenec-After, a refusal, the
    lag, a SIGKILL of the primary and a promotion."""
    section = DOC.read_text(encoding="utf-8").split("## Replication", 1)[1].split("\n## ", 1)[0]
    primary, replica = str(free_port()), str(free_port())
    script = "set -euo pipefail\n" + "\n".join(blocks(section, "bash")).replace(
        "127.0.0.1:8080", f"127.0.0.1:{primary}").replace("127.0.0.1:8081", f"127.0.0.1:{replica}").replace(
        'curl -s "http://127.0.0.1:$1/', 'curl -s "http://127.0.0.1:$(port $1)/')
    script = script.replace("q() {", f"port() {{ case $1 in 8080) echo {primary};; *) echo {replica};; esac; }}\nq() {{")
    (expected,) = blocks(section, "output")
    code, out, err = run_as_a_user(script, tmp_path, timeout=120)
    logs = "".join((tmp_path / n).read_text() for n in ("primary.log", "replica.log") if (tmp_path / n).exists())
    assert code == 0, out + err + logs
    assert out == expected, out + err + logs
