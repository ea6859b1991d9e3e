"""fenec-server's flags: a mistyped flag is refused (exit 2) with the flag it is closest to, the
flags kept for compatibility say in --help that they change nothing, and every default is the one
in the table (flags.py) that --help shows."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fenecdb_server import cli, flags
from fenecdb_server.http.auth import AuthDelay, configure
from fenecdb_server.http.config import Config
from fenecdb_server.http.protocol import Front
from fenecdb_server.replication import cluster, quorum
from fenecdb_server.replication.node import Node
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


def defaulted_reads(source: str) -> list[int]:
    """Lines that read a flag off the parsed command line with a default of their own
    (`opts.get("auth-delay", "100")`) rather than the table's (`given(opts, "--auth-delay")`)."""
    long_names = {flags.spelled(flag)[0][-1][2:] for flag, _, _ in flags.FLAGS}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in long_names:
            found.append(node.lineno)
    return found


def test_no_module_reads_a_flag_with_a_default_of_its_own() -> None:
    package = Path(flags.__file__).parent
    found = {p.relative_to(package).as_posix(): defaulted_reads(p.read_text(encoding="utf-8"))
             for p in sorted(package.rglob("*.py"))}
    assert not {k: v for k, v in found.items() if v}, "read it with flags.given: the table holds its default"
    assert defaulted_reads('opts.get("auth-delay", "100")\nopts.get("promote")\ngiven(opts, "--sync")\n') == [1]


def test_what_is_made_without_a_command_line_has_the_defaults_the_help_shows() -> None:
    """A default is written once, in the table: the HTTP service, the auth delay, the transport and
    replication made in process (tests, tools) take what `fenec-server` takes when given no flag."""
    default = flags.DEFAULTS
    config = Config()
    assert config.auth_delay_ms == int(default["--auth-delay"]) == AuthDelay().base_s * 1000
    assert config.max_statement_bytes == int(default["--max-statement-bytes"])
    assert (config.max_answer_rows, config.max_write_rows) == (int(default["--max-answer-rows"]),
                                                               int(default["--max-write-rows"]))
    assert config.idempotency_ttl_ms == int(default["--idempotency-ttl"]) * 1000
    front = Front(None, None, descriptors=0)
    assert (front.header_timeout, front.body_timeout) == (float(default["--header-timeout"]),
                                                         float(default["--body-timeout"]))
    assert cli.BUSY_POLL_DEFAULT_US == int(default["--busy-poll"])
    assert quorum.WAIT_S == float(default["--sync-replicas-wait"])
    assert cluster.DEFAULT_TTL == int(default["--lease-ttl"])
    # a replication node is made from the checked flags alone: it has no defaults of its own to drift
    # (read from its source: a compiled class's signature is not inspectable)
    source = (Path(flags.__file__).parent / "replication" / "node.py").read_text(encoding="utf-8")
    init = next(f for c in ast.parse(source).body if isinstance(c, ast.ClassDef) and c.name == Node.__name__
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    defaults = dict(zip([a.arg for a in init.args.kwonlyargs], init.args.kw_defaults, strict=True))
    assert all(defaults[p] is None for p in ("buffer_bytes", "sync_replicas", "sync_wait_s"))  # None: no default
    # every default is a value as it would be typed, read by the same check as a given one
    assert configure({}, {}).delay_ms == int(default["--auth-delay"])
    assert default["--jwt-max-age"] == "0"
