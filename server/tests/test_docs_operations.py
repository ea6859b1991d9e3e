"""docs/operations.md runs as written: its `sh` blocks, in order, in an empty directory, with
`fenec-server` and `curl` on the PATH and the port 8080 changed to a free one; what they print
must be the page's `text` block, exactly (a compaction, a backup taken and restored, the access log)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme_access import blocks, free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_operations_page_runs_as_written(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    port = str(free_port())
    script = "set -euo pipefail\n" + "\n".join(blocks(text, "sh")).replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    assert "8080" not in script
    (expected,) = blocks(text, "text")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    for name in ("FENEC_HTTP_TOKEN", "FENEC_JWT_SECRET"):
        env.pop(name, None)
    proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    log = (tmp_path / "server.log").read_text() if (tmp_path / "server.log").exists() else ""
    assert proc.returncode == 0, out + err + log
    assert out == expected, out + err + log
    assert (tmp_path / "backup.fenec").read_bytes().startswith(b"FENECLOG")
    assert "compacted on demand: " in log
