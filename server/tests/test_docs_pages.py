"""The docs as a whole: no page points outside the repository, and the index lists every page. (Each page's
`fenecql` blocks run in test_docs_queues.py, its `sh` blocks in the test named by the page.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

ROOT = DOCS.parent
GENERATED = {"queue-compare.md"}  # written by `make queue-compare` into bench/results/, not kept in git
PARTIAL = "queue-compare-"  # a run of some of its parts (`--only`: queue-compare-<parts>.md), beside it
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
        missing = {n for n in set(MD_NAME.findall(text)) - names - GENERATED if not n.startswith(PARTIAL)}
        assert not missing, f"{where} names pages the repository does not have: {sorted(missing)}"


def test_the_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"| `{page.name}` |" in index, page.name
