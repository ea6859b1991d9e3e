"""The Python packages build as a user's `pip wheel` builds them, with clean metadata: an SPDX license
expression (the root LICENSE's), classifiers, a home page, the package data, and no development extras."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def built_metadata(folder: Path, out: Path) -> tuple[dict[str, list[str]], list[str]]:
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(folder)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        msg = Parser().parsestr(z.read(meta).decode())
    fields: dict[str, list[str]] = {}
    for key, value in msg.items():
        fields.setdefault(key, []).append(value)
    return fields, names


@pytest.mark.slow
@pytest.mark.parametrize(("folder", "name", "data"), [
    ("server", "fenecdb-server", "fenecdb_server/ql/grammar.lark"),
    ("clients/python", "fenecdb-client", "fenecdb/py.typed"),
])
def test_the_wheel_has_clean_metadata(tmp_path: Path, folder: str, name: str, data: str) -> None:
    fields, names = built_metadata(ROOT / folder, tmp_path)
    assert fields["Name"] == [name]
    assert fields["License-Expression"] == ["Apache-2.0"]
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert "Typing :: Typed" in fields["Classifier"] and "Topic :: Database" in fields["Classifier"]
    assert any(url.startswith("Homepage, https://") for url in fields["Project-URL"])
    assert "Provides-Extra" not in fields, "test tools are not an extra of the package"
    assert data in names
    assert not any(n.startswith(("tests/", "server/tests")) for n in names)
    if folder == "server" and (shutil.which("cc") or shutil.which("gcc")) and not os.environ.get("FENECDB_PURE_PYTHON"):
        # the engine compiled (setup.py; FENECDB_PURE_PYTHON asks it not to), with the runtime its modules
        # share, beside the sources
        assert any(n.startswith("fenecdb_server/engine/engine.") and n.endswith(".so") for n in names), names
        assert any(n.endswith(".so") and "__mypyc" in n and "/" not in n for n in names), names
        assert "fenecdb_server/engine/engine.py" in names
