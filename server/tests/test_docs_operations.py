"""docs/operations.md runs as written: its `sh` blocks, in order, in an empty directory, with
`fenec-server` and `curl` on the PATH and the port 8080 changed to a free one; what they print
must be the page's `text` block, exactly (a compaction, a backup taken and restored, the access log)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_readme_access import blocks, free_port, run_as_a_user

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_operations_page_runs_as_written(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    port = str(free_port())
    script = "set -euo pipefail\n" + "\n".join(blocks(text, "sh")).replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    assert "8080" not in script
    (expected,) = blocks(text, "text")
    code, out, err = run_as_a_user(script, tmp_path, timeout=90)
    log = (tmp_path / "server.log").read_text() if (tmp_path / "server.log").exists() else ""
    assert code == 0, out + err + log
    assert out == expected, out + err + log
    assert (tmp_path / "backup.fenec").read_bytes().startswith(b"FENECLOG")
    assert "compacted on demand: " in log
