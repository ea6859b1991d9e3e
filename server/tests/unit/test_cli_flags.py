"""fenec-server's flags: a mistyped flag is refused (exit 2) with the flag it is closest to, and the
flags kept for compatibility say in --help that they change nothing."""

from __future__ import annotations

import pytest
from fenecdb_server import cli, flags
from fenecdb_server.replication.options import checked


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



def test_every_row_of_the_table_is_a_help_line_and_parsed_with_or_without_its_value() -> None:
    """One table spells each flag's names and whether it takes a value: --help prints it, the parser
    reads it, the replication flags included."""
    lines = cli.help_text().splitlines()
    names = set()
    for flag, _, text in flags.FLAGS:
        assert any(line.startswith(f"  {flag} ") and text in line for line in lines), flag
        spelled, takes_value = flags.spelled(flag)
        names.update(spelled)
        key = "help" if spelled[-1] == "--help" else spelled[-1][2:]
        for name in spelled:
            assert cli.parse([name, "x"] if takes_value else [name]) == {key: "x" if takes_value else True}, name
    assert {"-f", "--file", "--sync", "--promote", "--replica-of", "--lease-ttl", "-h", "--help"} <= names
    assert names == flags.VALUE_FLAGS | flags.SWITCHES


def test_a_replication_flag_not_given_takes_the_default_the_help_shows() -> None:
    shown = {line.split()[0]: line.rsplit("[", 1)[1].rstrip("]") for line in cli.help_text().splitlines()
             if line.startswith("  --") and line.endswith("]")}
    member = {"replication-token": "t", "etcd": "http://127.0.0.1:2379", "cluster": "c",
              "advertise": "http://127.0.0.1:8081"}
    got = checked(member, "x.fenec", 250)
    assert got is not None
    assert got.buffer_bytes == int(shown["--replication-buffer"]) << 20
    assert got.sync_replicas == int(shown["--sync-replicas"])
    assert got.sync_wait_s == float(shown["--sync-replicas-wait"])
    assert got.lease_ttl == int(shown["--lease-ttl"])
