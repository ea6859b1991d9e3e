"""docs/queues.md and docs/workers.md run: every `fenecql` block, statement by statement, with each
`-- → x` answer checked.

The pages' conventions are written down in docs/README.md. The totals below are exact on purpose: a page
that loses a block, a statement or an answer fails here rather than quietly checking less.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import TestClock

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = DOCS / "queues.md"

# page: (blocks, statements, answers)
PAGES = {
    "queues.md": (12, 56, 36),
    "workers.md": (7, 17, 16),
    "fenecql.md": (24, 147, 109),
}

ANSWER = re.compile(r"--\s*→\s*(.*?)\s*$")
LATER = re.compile(r"^--\s*(\d+)\s*(ms|s|m)\s+later\s*$")
PARAMS = re.compile(r"^--\s*params\s+(\[.*\])\s*$")
UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000}


def fenecql_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = [] if line.strip() == "```fenecql" else None
                if current is None:
                    # a block of another language: skip to its end
                    current = ["__skip__"]
            else:
                if current[:1] != ["__skip__"]:
                    blocks.append(current)
                current = None
            continue
        if current is not None:
            current.append(line)
    assert current is None, "an unclosed code block"
    return blocks


def steps(block: list[str]) -> list[tuple]:
    """A block as ("later", ms) / ("run", text, params, answer-or-None) steps."""
    out: list[tuple] = []
    params = None
    stmt: list[str] = []

    def flush() -> None:
        nonlocal params, stmt
        if stmt:
            text = "\n".join(stmt)
            m = ANSWER.search(text)
            answer = m.group(1) if m else None
            if m:
                text = text[: m.start()].rstrip()
            out.append(("run", text, params, answer))
            params, stmt = None, []

    for line in block:
        if not line.strip():
            continue
        if line[0].isspace():
            assert stmt, f"a continuation line with no statement: {line!r}"
            stmt.append(line)
            continue
        flush()
        bare = line.strip()
        if m := LATER.match(bare):
            out.append(("later", int(m.group(1)) * UNIT_MS[m.group(2)]))
        elif m := PARAMS.match(bare):
            params = json.loads(m.group(1))
        elif bare.startswith("--") or bare.startswith("#"):
            continue
        else:
            stmt.append(line)
    flush()
    return out


# An indented line that starts a statement puts it in one block with the line above (docs/README.md).
BLOCK_LINE = re.compile(r"\n\s+(?=(?:set|put|insert|get|del) )")


def check(answer: str, got, error) -> None:
    if not answer.startswith(("refused", "no row")):
        # a JSON value first: a text in double quotes may hold a `:` (a time); what follows it is the note
        value, _ = json.JSONDecoder().raw_decode(answer)
        answer = json.dumps(value).replace(":", "\\u003a")
    expected = answer.split(":", 1)[0].strip() if not answer.startswith("refused") else answer
    if answer.startswith("refused"):
        status = int(re.match(r"refused:\s*(\d+)", answer).group(1))
        assert error is not None, f"expected a refusal {status}, got {got!r}"
        assert error.status == status, f"expected status {status}, got {error!r}"
        return
    assert error is None, f"expected {answer!r}, got {error!r}"
    if expected == "no row":
        assert got == [], f"expected no row, got {got!r}"
        return
    value = json.loads(expected)
    if isinstance(got, dict):
        assert "affected" in got, f"expected a count, got {got!r}"
        assert got["affected"] == value
    else:
        assert isinstance(got, list) and got, f"expected a first row, got {got!r}"
        first = next(iter(got[0].values()))
        assert first == value, f"first value {first!r}, expected {value!r} (row {got[0]!r})"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_blocks_run_with_their_answers(page):
    from fenecdb_server import Database, FenecError

    blocks_total, statements_total, answers_total = PAGES[page]
    blocks = fenecql_blocks((DOCS / page).read_text(encoding="utf-8"))
    assert len(blocks) == blocks_total
    clock = TestClock()
    db = Database(clock=clock)
    ran = checked = 0
    try:
        for block in blocks:
            for step in steps(block):
                if step[0] == "later":
                    clock.advance(step[1])
                    db.fire_due()  # the schedules due by then fire, as the server's timer fires them
                    continue
                _, text, params, answer = step
                got, error = None, None
                try:
                    parts = BLOCK_LINE.split(text)
                    if len(parts) > 1:  # a block: the statements run together, as a /batch runs them
                        got = db.batch([(part, params) for part in parts])
                    else:
                        got = db.query(text, params)
                except FenecError as e:
                    error = e
                ran += 1
                if answer is None:
                    assert error is None, f"{text!r} was refused: {error!r}"
                    continue
                try:
                    check(answer, got, error)
                except AssertionError as e:
                    pytest.fail(f"{text}\n  -- → {answer}\n  {e}")
                checked += 1
    finally:
        db.close()
    assert (ran, checked) == (statements_total, answers_total)


def test_other_languages_are_kept_but_not_run():
    text = PAGE.read_text(encoding="utf-8")
    assert text.count("```sh") == 1 and text.count("```js") == 1
    assert "Fenec-Wait: 30000" in text and "for (;;)" in text


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_js_block_is_plain_javascript(tmp_path: Path) -> None:
    """The page's `js` block is what a user pastes into a `.mjs` file: node parses it as it is (no
    TypeScript annotations). Only parsed, not run: its loop claims forever."""
    block = re.search(r"```js\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    assert block is not None
    script = tmp_path / "worker.mjs"
    script.write_text(block.group(1), encoding="utf-8")
    checked = subprocess.run(["node", "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr


def test_the_runner_reads_the_page_conventions():
    block = [
        "-- params [1]",
        "put t {x: $1}   -- → 1: note",
        "-- 20 s later",
        "get t",
        "  where x = 1   -- → refused: 412",
    ]
    assert steps(block) == [
        ("run", "put t {x: $1}", [1], "1: note"),
        ("later", 20000),
        ("run", "get t\n  where x = 1", None, "refused: 412"),
    ]
