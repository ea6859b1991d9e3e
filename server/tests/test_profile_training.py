"""The profile-guided build's training run (server/profile_training.py, run by `make venv` and `make
serve` between the two compiles) plays its whole worker's life against this build's server and
ends with the servers' clean exits: a training that stopped working would leave every later build
unguided, with only a warning line in the install's output."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

SERVER_DIR = Path(__file__).resolve().parents[1]


def training() -> object:
    spec = importlib.util.spec_from_file_location("profile_training", SERVER_DIR / "profile_training.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_training_plays_its_worker_life_to_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    server = Path(sys.executable).parent / "fenec-server"
    if not server.exists():
        found = shutil.which("fenec-server")
        assert found, "no fenec-server beside this interpreter or on PATH"
        server = Path(found)
    code = training().main(["--server", str(server)])  # type: ignore[attr-defined]
    err = capsys.readouterr().err
    assert code == 0, err
    assert "profile training: done" in err
