"""fenec-server's flags: a mistyped flag is refused (exit 2) with the flag it is closest to, and the
flags kept for compatibility say in --help that they change nothing."""

from __future__ import annotations

import pytest
from fenecdb_server import cli


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(argv) == 2
    return capsys.readouterr().err


def test_a_mistyped_flag_gets_a_did_you_mean_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(["--fiel", "jobs.fdb"], capsys).startswith("unknown flag: --fiel (did you mean `--file`?)\n")
    assert refused(["--max-conections=5"], capsys).startswith(
        "unknown flag: --max-conections=5 (did you mean `--max-connections`?)\n")
    assert refused(["--zzzz"], capsys).startswith("unknown flag: --zzzz\nusage:")  # nothing close: no hint


def test_the_compatibility_flags_say_they_change_nothing() -> None:
    lines = {line.split()[0]: line for line in cli.help_text().splitlines() if line.startswith("  --no-")}
    assert set(lines) == {"--no-mmap", "--no-checkpoint"}
    for line in lines.values():
        assert "accepted for compatibility; no effect" in line
        assert "vector" not in line  # FenecQL has no vector indexes
    assert cli.parse(["--no-mmap", "--no-checkpoint"]) == {"no-mmap": True, "no-checkpoint": True}
