"""docs/server.md names every flag `fenec-server --help` lists, and no flag the server does not have."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "server.md"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")


def test_the_page_names_every_flag_of_help_and_no_other() -> None:
    helped = subprocess.run([sys.executable, "-m", "fenecdb_server.cli", "--help"], capture_output=True,
                            text=True, timeout=60, check=True).stdout
    in_help = set(FLAG.findall(helped))
    documented = set(FLAG.findall(PAGE.read_text(encoding="utf-8")))
    assert in_help - documented == set(), "flags the page does not explain"
    assert documented - in_help == set(), "flags the page names that the server does not have"
