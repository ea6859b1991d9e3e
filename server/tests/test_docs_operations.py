"""docs/operations.md runs as written: its `sh` blocks, in order, in an empty directory, with
`fenec-server` and `curl` on the PATH and the port 8080 changed to a free one; what they print
must be the page's `text` block, exactly (a compaction, a backup taken and restored, the access log)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_readme_access import run_page

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_operations_page_runs_as_written(tmp_path: Path) -> None:
    _port, log = run_page(DOC.read_text(encoding="utf-8"), "8080", tmp_path, timeout=90)
    assert (tmp_path / "backup.fenec").read_bytes().startswith(b"FENECLOG")
    assert "compacted on demand: " in log
