"""The README's install, as a user does it from a fresh clone: `pip install ./clients/python` into a new
virtual environment, from a copy of this folder as git holds it (no build artefacts, no egg-info), then
`import fenecdb` from that environment alone, against the live server. It needs the network for PyPI only
(setuptools to build, orjson); pip's cache makes a second run fast."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # clients/python
README = HERE / "README.md"
ARTEFACTS = shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__", ".pytest_cache", ".tmp")

USE = """
import fenecdb, sys
assert fenecdb.__file__.startswith(sys.prefix), fenecdb.__file__  # the installed copy, not the sources
with fenecdb.Client(sys.argv[1]) as db:
    db.query("create collection installed (payload json, run_at timestamp @sorted, owner text, attempts int)")
    worker = fenecdb.Worker(db, "installed", wait=0)
    assert worker.enqueue({"to": "ada@example.com"}) == 1
    [job] = worker.claim()
    assert job.payload == {"to": "ada@example.com"} and job.ack()
    assert db.collection("installed").count() == 0
    db.query("drop collection installed")
print("ok", fenecdb.__name__)
"""


@pytest.mark.slow
def test_the_readme_install_works_from_a_fresh_clone(tmp_path: Path, server_url: str) -> None:
    [command] = re.findall(r"^pip install (\./clients/python)\b", README.read_text(encoding="utf-8"), re.M)
    clone = tmp_path / "clone"
    shutil.copytree(HERE, clone / "clients" / "python", ignore=ARTEFACTS)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    installed = subprocess.run([python, "-m", "pip", "install", "-q", command], cwd=clone, env=env,
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    used = subprocess.run([python, "-c", USE, server_url], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert used.returncode == 0, used.stdout + used.stderr
    assert used.stdout.splitlines() == ["ok fenecdb"]
