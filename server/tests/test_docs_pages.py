"""The reference pages of docs/ run: every `fenecql` block of each page below, statement by statement, on a fresh
in-memory database per page, with each `-- → x` answer checked (the conventions of docs/README.md, read by the
runner of test_docs_queues.py). The totals are exact on purpose: a page that loses a block, a statement or an
answer fails here rather than quietly checking less."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import TestClock
from test_docs_queues import check as check_plain
from test_docs_queues import fenecql_blocks, steps

# an indented line that starts a statement makes the lines one block (docs/README.md)
BLOCK_LINE = re.compile(r"\n\s+(?=(?:set|put|insert|get|del) )")
DOCS = Path(__file__).resolve().parents[2] / "docs"

# page: (blocks, statements, answers)
PAGES = {
    "fenecql.md": (20, 110, 87),
}


def check(answer: str, got: object, error: object) -> None:
    """docs/README.md's answers, where a JSON value may be text holding a `:` (a time): the value is read as
    JSON first, and only what follows it is the note."""
    if answer.startswith(("no row", "refused")):
        check_plain(answer, got, error)
        return
    value, _ = json.JSONDecoder().raw_decode(answer)
    check_plain(json.dumps(value).replace(":", "\\u003a"), got, error)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_blocks_run_with_their_answers(page: str) -> None:
    from fenecdb_server import Database, FenecError

    blocks = fenecql_blocks((DOCS / page).read_text(encoding="utf-8"))
    clock = TestClock()
    db = Database(clock=clock)
    ran = checked = 0
    try:
        for block in blocks:
            for step in steps(block):
                if step[0] == "later":
                    clock.advance(step[1])
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
                    pytest.fail(f"{page}: {text}\n  -- → {answer}\n  {e}")
                checked += 1
    finally:
        db.close()
    assert (len(blocks), ran, checked) == PAGES[page]


ROOT = DOCS.parent
GENERATED = {"queue-compare.md"}  # written by `make queue-compare` into bench/results/, not kept in git
MD_NAME = re.compile(r"[\w./-]*?([\w-]+\.md)\b")


def repo_pages() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if listed.returncode == 0 and listed.stdout.strip():
        return [ROOT / line for line in listed.stdout.split()]
    return [p for p in ROOT.rglob("*.md") if not {".venv", "node_modules", "target"} & set(p.parts)]


def test_no_doc_points_outside_the_repository() -> None:
    """Every page a README or doc names is in the repository (a user has nothing else), and none points at
    the developers' design notes."""
    pages = repo_pages()
    names = {p.name for p in pages}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(ROOT)
        assert "../shared" not in text and "shared/spec" not in text, where
        missing = set(MD_NAME.findall(text)) - names - GENERATED
        assert not missing, f"{where} names pages the repository does not have: {sorted(missing)}"


def test_the_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"| `{page.name}` |" in index, page.name
