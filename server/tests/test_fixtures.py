"""Statement → answer fixtures, one file per section of the FenecQL spec (`fixtures/*.fql`).

File format (line based; the files read like the spec's own examples):

    -- reset                    a fresh in-memory database and clock (every file starts with one)
    -- clock +20 s              move the test clock on (`ms`, `s`, `m`, `h`, `d`); it starts at
                                2026-05-03T09:20:00Z, epoch ms 1777800000000, as the spec's examples do
    -- params [1, "w1"]         the parameters of the next statement (a JSON array)
    -- block                    the statements up to the next expectation run as one block (`Database.batch`),
                                each with its own `-- params` line if it has parameters
    <statement>                 starts on a line that is not indented; indented lines continue it
    -- → count 2                the statement answers {"affected": 2}
    -- → rows [{"id": 1}]       it answers exactly these rows (JSON; key order, and int against float, matter)
    -- → near [{"d": 166274.2578}]   the same, numbers compared to within 0.001
    -- → error 404 has no field the statement (or block) is refused with this status, and the message
                                contains the text after the status (optional)
    -- → error 412 at 0 unmet:  a refused block: also the failing statement's index
    -- → message created        a schema statement's answer {"message": ...} containing the text (optional)
    -- → results [...]          a block's answers, exactly (JSON)

An expectation may also end the statement's last line (`put t {n: 2.5}   -- → error 400`). A statement with
no expectation is set-up: it must succeed, and it is not counted as a case. Any other comment line is
ignored. Cases of a file run in order on one database, so later cases see earlier writes; a failure is
reported with its file and line, and the other cases of the file still run.

Every case follows the text of `fenecql.md`; where the spec leaves a behaviour open and proposes nothing,
there is no case.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from conftest import TestClock

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FILES = sorted(FIXTURES.glob("*.fql"))
MIN_CASES = 250

EXPECT = re.compile(r"--\s*→\s*(.*?)\s*$")
CLOCK = re.compile(r"^--\s*clock\s*\+\s*(\d+)\s*(ms|s|m|h|d)\s*$")
PARAMS = re.compile(r"^--\s*params\s+(.*)$")
UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Case:
    def __init__(self, line: int, statements: list[tuple[str, list | None]], block: bool, expect: str):
        self.line, self.statements, self.block, self.expect = line, statements, block, expect


def parse(path: Path) -> list:
    """The file as steps: ("reset",), ("clock", ms), ("setup", line, text, params) and Case objects."""
    steps: list = []
    pending: list[tuple[str, list | None]] = []  # statements waiting for an expectation
    stmt: list[str] = []
    stmt_line = 0
    params = None
    block = False
    block_line = 0

    def close_statement() -> None:
        nonlocal stmt, params
        if stmt:
            pending.append(("\n".join(stmt), params))
            stmt, params = [], None

    def flush_setup() -> None:
        # statements with no expectation are set-up, unless they are part of an open block
        nonlocal pending
        close_statement()
        if not block:
            for text, p in pending:
                steps.append(("setup", stmt_line, text, p))
            pending = []

    def expectation(expect: str, line: int) -> None:
        nonlocal pending, block
        close_statement()
        assert pending, f"{path.name}:{line}: an expectation with no statement"
        if block:
            steps.append(Case(block_line, pending, True, expect))
        else:
            for text, p in pending[:-1]:
                steps.append(("setup", line, text, p))
            steps.append(Case(stmt_line, [pending[-1]], False, expect))
        pending, block = [], False

    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        if raw[0].isspace():
            bare = raw.strip()
            if bare.startswith("--") and EXPECT.match(bare) and stmt:
                expectation(EXPECT.match(bare).group(1), number)
                continue
            assert stmt, f"{path.name}:{number}: a continuation line with no statement"
            stmt.append(raw)
            continue
        bare = raw.strip()
        if bare.startswith("--"):
            if m := EXPECT.match(bare):
                expectation(m.group(1), number)
            elif bare == "-- reset":
                flush_setup()
                steps.append(("reset",))
            elif m := CLOCK.match(bare):
                flush_setup()
                steps.append(("clock", int(m.group(1)) * UNITS[m.group(2)]))
            elif m := PARAMS.match(bare):
                close_statement()
                params = json.loads(m.group(1))
            elif bare == "-- block":
                flush_setup()
                block, block_line = True, number
            continue
        # a new statement
        if block:
            close_statement()
        else:
            flush_setup()
        stmt, stmt_line = [raw], number
        # an expectation at the end of the statement's own line
        m = re.search(r"--\s*→\s*(.*?)\s*$", raw)
        if m:
            stmt = [raw[: m.start()].rstrip()]
            expectation(m.group(1), number)
    flush_setup()
    assert not block, f"{path.name}: a block with no expectation"
    return steps


def same(got, want, near: bool = False) -> bool:
    """Strict JSON equality: int is not float, bool is not int, and object keys keep their order."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if near and isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(got, want, rel_tol=0, abs_tol=1e-3)
    if isinstance(want, float):
        return type(got) is float and got == want
    if isinstance(want, int):
        return type(got) is int and got == want
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            same(g, w, near) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict):
        return isinstance(got, dict) and list(got) == list(want) and all(
            same(got[k], want[k], near) for k in want)
    return type(got) is type(want) and got == want


def judge(case: Case, got, error) -> str | None:
    """None when the answer meets the expectation, else what went wrong."""
    kind, _, rest = case.expect.partition(" ")
    rest = rest.strip()
    if kind == "error":
        if error is None:
            return f"expected error {rest}, got {got!r}"
        m = re.match(r"(\d+)(?:\s+at\s+(\d+))?\s*(.*)$", rest)
        status, at, text = int(m.group(1)), m.group(2), m.group(3)
        if error.status != status:
            return f"expected status {status}, got {error.status}: {error.message!r}"
        if at is not None and error.at != int(at):
            return f"expected at {at}, got at {error.at}: {error.message!r}"
        if text and text not in error.message:
            return f"expected a message containing {text!r}, got {error.message!r}"
        return None
    if error is not None:
        return f"expected {case.expect!r}, refused: {error.status} {error.message!r}"
    if kind == "count":
        want = {"affected": int(rest)}
        return None if same(got, want) else f"expected {want!r}, got {got!r}"
    if kind in ("rows", "near", "results"):
        want = json.loads(rest)
        return None if same(got, want, near=kind == "near") else f"expected {want!r}, got {got!r}"
    if kind == "message":
        if not (isinstance(got, dict) and list(got) == ["message"] and isinstance(got["message"], str)):
            return f"expected a message, got {got!r}"
        return None if rest in got["message"] else f"expected a message containing {rest!r}, got {got!r}"
    raise AssertionError(f"line {case.line}: unknown expectation {case.expect!r}")


def run_file(path: Path) -> tuple[int, list[str]]:
    from fenecdb_server import Database, FenecError

    clock = TestClock()
    db = Database(clock=clock)
    failures: list[str] = []
    cases = 0
    try:
        for step in parse(path):
            if isinstance(step, Case):
                cases += 1
                got, error = None, None
                try:
                    if step.block:
                        got = db.batch(step.statements)
                    else:
                        text, params = step.statements[0]
                        got = db.query(text, params)
                except FenecError as e:
                    error = e
                except Exception as e:  # anything else is a crash, never a refusal
                    failures.append(f"{path.name}:{step.line}: crashed with {e!r}")
                    continue
                why = judge(step, got, error)
                if why:
                    texts = " ; ".join(t for t, _ in step.statements)
                    failures.append(f"{path.name}:{step.line}: {texts}\n    {why}")
            elif step[0] == "reset":
                db.close()
                clock = TestClock()
                db = Database(clock=clock)
            elif step[0] == "clock":
                clock.advance(step[1])
            else:
                _, line, text, params = step
                try:
                    db.query(text, params)
                except Exception as e:
                    failures.append(f"{path.name}:{line}: set-up statement failed: {text}\n    {e!r}")
    finally:
        db.close()
    return cases, failures


def count_cases(path: Path) -> int:
    return sum(isinstance(s, Case) for s in parse(path))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_fixture_file(path: Path):
    cases, failures = run_file(path)
    assert cases > 0
    assert not failures, f"{len(failures)} of {cases} cases failed:\n" + "\n".join(failures)


def test_enough_cases_in_all():
    total = sum(count_cases(p) for p in FILES)
    assert len(FILES) >= 19
    assert total >= MIN_CASES, total


def test_format_reader(tmp_path):
    sample = tmp_path / "probe.fql"
    text = (
        "-- reset\n"
        "create collection t (n int)\n"
        "-- params [2]\n"
        "put t {n: $1}   -- → count 1\n"
        "get t\n"
        "  where n = 2\n"
        "-- → rows [{\"id\": 1, \"n\": 2}]\n"
        "-- clock +2 s\n"
        "-- block\n"
        "put t {n: 1}\n"
        "-- params [1]\n"
        "del t where id = $1 require 5\n"
        "-- → error 412 at 1 unmet: \n"
    )
    sample.write_text(text, encoding="utf-8")
    steps = parse(sample)
    kinds = [s[0] if isinstance(s, tuple) else "case" for s in steps]
    assert kinds == ["reset", "setup", "case", "case", "clock", "case"]
    assert steps[2].statements == [("put t {n: $1}", [2])] and steps[2].expect == "count 1"
    assert steps[3].statements == [("get t\n  where n = 2", None)]
    assert steps[4] == ("clock", 2000)
    assert steps[5].block and steps[5].statements == [("put t {n: 1}", None), ("del t where id = $1 require 5", [1])]
    assert steps[5].expect == "error 412 at 1 unmet:"
    assert same([{"a": 1, "b": 2.0}], [{"a": 1, "b": 2.0}])
    assert not same([{"b": 2.0, "a": 1}], [{"a": 1, "b": 2.0}])
    assert not same(1, 1.0) and not same(True, 1)
