"""Record classes follow the one convention of the server README ("How a compiled module is written",
rule 1): a plain class with `__slots__`, or a dataclass; never a `NamedTuple` (built by a `__new__`
the interpreter runs every time), and never a generic dataclass (mypyc cannot build one with slots).
The whole package is held to it, compiled or not, so that a module can move into `setup.py`'s list."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "fenecdb_server"


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Call):
        return _name(node.func)
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def breaches(source: str, where: str) -> list[str]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node.func) == "namedtuple":
            out.append((node.lineno, "a namedtuple"))
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {_name(b) for b in node.bases}
        if "NamedTuple" in bases:
            out.append((node.lineno, f"{node.name} is a NamedTuple"))
        if any(_name(d) == "dataclass" for d in node.decorator_list) and (
                "Generic" in bases or any(isinstance(b, ast.Subscript) for b in node.bases)):
            out.append((node.lineno, f"{node.name} is a generic dataclass"))
    return [f"{where}:{line}: {what}" for line, what in sorted(out)]


def test_no_named_tuple_and_no_generic_dataclass_in_the_package() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        wrong += breaches(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix())
    assert not wrong, "records against the README's rule 1:\n" + "\n".join(wrong)


def test_the_check_sees_each_breach() -> None:
    planted = (
        "from typing import Generic, NamedTuple, TypeVar\n"
        "from collections import namedtuple\n"
        "from dataclasses import dataclass\n"
        "A = TypeVar('A')\n"
        "class P(NamedTuple):\n    x: int\n"
        "Q = namedtuple('Q', 'x')\n"
        "@dataclass(frozen=True, slots=True)\nclass R(Generic[A]):\n    x: A\n"
        "@dataclass(frozen=True, slots=True)\nclass S:\n    x: int\n"
        "class T(Generic[A]):\n    __slots__ = ('x',)\n"
    )
    assert [b.split(": ", 1)[1] for b in breaches(planted, "planted.py")] == [
        "P is a NamedTuple", "a namedtuple", "R is a generic dataclass"]
