"""Small rooms: no module of the server package over 600 lines, no class over 300.

A newcomer reads a module whole; past these sizes a module holds more than one thing (STYLE.md
point 4) and wants splitting by what it holds, with a name that says so. The one kind of code
allowed to be longer is a dispatch table, and there is none over the limits today: every room
fits, and a room that grows past its limit is split, not excused.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fenecdb_server"
MODULE_LINES = 600
CLASS_LINES = 300


def _rooms() -> dict[str, int]:
    """Every module's and every class's length in lines, by `path` and `path:Class`."""
    sizes: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        text = path.read_text(encoding="utf-8")
        sizes[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                sizes[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return sizes


def test_no_module_or_class_is_past_its_limit() -> None:
    over = {}
    for room, lines in _rooms().items():
        limit = CLASS_LINES if ":" in room else MODULE_LINES
        if lines > limit:
            over[room] = lines
    assert not over, f"past {MODULE_LINES} lines a module or {CLASS_LINES} a class: {over}"

