"""The server README's "A claim, from the socket to the sorted index": three hops, each a file, and
every file, class, function and name it cites is in the package, in the file the hop names, so a
newcomer following it never reaches a name that was renamed or moved."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1]
PACKAGE = SERVER / "src" / "fenecdb_server"
SECTION = "### A claim, from the socket to the sorted index"


def section() -> str:
    text = (SERVER / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    return text[start:re.compile(r"\n##+ ").search(text, start + len(SECTION)).start()]  # to the next heading


def names_in(path: Path) -> set[str]:
    """What a module defines or assigns: classes, functions, methods, attributes and module names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    return found


def module_of(word: str) -> Path | None:
    """`exchange` or `http/protocol.py` -> the package's module of that name (None: not one)."""
    if word.endswith(".py"):
        found = sorted(PACKAGE.rglob(word.rsplit("/", 1)[-1]))
        found = [p for p in found if p.relative_to(PACKAGE).as_posix().endswith(word)]
    else:
        found = sorted(PACKAGE.rglob(f"{word}.py"))
    return found[0] if len(found) == 1 else None


def missing(text: str) -> list[str]:
    """The cited names of `text` the package does not have: a file path that is no module, a
    `module.name` or `Class.name` not defined there, a bare name defined nowhere."""
    everywhere = set().union(*(names_in(p) for p in PACKAGE.rglob("*.py")))
    classes = {node.name: node for p in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(p.read_text("utf-8")))
               if isinstance(node, ast.ClassDef)}
    wrong = []
    for cited in re.findall(r"`([^`]+)`", text):
        for word in re.findall(r"@?[\w/.]+", cited):
            word = word.rstrip(".")
            if word.startswith("@"):  # an annotation of FenecQL (`@sorted`)
                continue
            if word.endswith(".py"):
                if module_of(word) is None:
                    wrong.append(word)
            elif "." in word:
                owner, _, name = word.rpartition(".")
                owner = owner.rpartition(".")[2]  # `exchange.Service.handle`: the class
                module = module_of(owner)
                if owner in classes:
                    defined = {n.name for n in ast.walk(classes[owner]) if isinstance(
                        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
                    if name not in defined:
                        wrong.append(word)
                elif module is None or name not in names_in(module):
                    wrong.append(word)
            elif word.isidentifier() and word not in everywhere and not re.fullmatch(r"[A-Z]+|[a-z]+_at", word):
                wrong.append(word)  # a bare name (a method, a constant) defined nowhere
    return wrong


def test_the_claim_takes_three_hops_each_a_file() -> None:
    hops = re.findall(r"^(\d)\. \*\*[^*]+\*\* \(`([^`]+)`", section(), re.M)
    assert [n for n, _ in hops] == ["1", "2", "3"]
    assert all(module_of(path.split(" ")[0]) is not None for _, path in hops), hops


def test_every_name_the_path_cites_is_where_it_says() -> None:
    assert missing(section()) == []


def test_the_check_sees_a_renamed_method_and_a_moved_file() -> None:
    assert missing("`App.serve_later`, `http/gone.py`, `wire.render_api`, `exchange.Service.handle`, `run_set`, "
                   "`_gone_read`, `@sorted`") == ["App.serve_later", "http/gone.py", "_gone_read"]
