"""What the comments, docstrings and the server README say is compiled is what setup.py compiles.

`server/setup.py`'s `COMPILED` is the one list of the modules mypyc builds. A comment that
calls a module compiled (`convert.py`, compiled; "this module is compiled") or says it is not
(which mypyc cannot build) is checked against it here, so the prose cannot drift from the build.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1]
PACKAGE = SERVER / "src" / "fenecdb_server"

MODULE = r"`?(?P<m>(?:\w+/)*\w+\.py)`?"
SAYS_COMPILED = [
    re.compile(MODULE + r",? \(?compiled\b"),  # `convert.py`, compiled / convert.py (compiled
    re.compile(MODULE + r" {2,}[\w ,']{0,40}\(compiled\b"),  # the README's picture: name, what, (compiled: ...)
]
SAYS_NOT = re.compile(MODULE + r"[^.;:\n]{0,60}?(?:which mypyc (?:cannot|does not) build|cannot be compiled"
                               r"|is not compiled|is never compiled)")
# "the protocol itself ..., which mypyc cannot build": a module of the text's own package named by its word
SAYS_NOT_WORD = re.compile(r"\b[Tt]he (?P<w>[a-z_]+)(?: itself)? [^.;:\n]{0,60}?(?:which mypyc (?:cannot|does not) "
                           r"build|cannot be compiled|is not compiled|is never compiled)")
SELF_COMPILED = re.compile(r"this module is compiled|^Compiled \(setup\.py\)|\bCompiled \(setup\.py\)"
                           r"|so that it is compiled")
SELF_NOT = re.compile(r"this module is not compiled|this module cannot be compiled")


def compiled() -> set[str]:
    tree = ast.parse((SERVER / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets):
            return {p.removeprefix("fenecdb_server/") for p in ast.literal_eval(node.value)}
    raise AssertionError("setup.py has no COMPILED list")


def modules() -> list[str]:
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def resolve(name: str, beside: str) -> str | None:
    """The package module a name in prose stands for: a path's suffix, else a file name, the one
    in the same package as the text when several share it."""
    found = [m for m in modules() if m == name or m.endswith("/" + name)]
    if len(found) > 1:
        here = [m for m in found if m.rsplit("/", 1)[0] == beside.rsplit("/", 1)[0]]
        found = here or found
    return found[0] if len(found) == 1 else None


def comments(path: Path) -> list[tuple[int, str]]:
    """A module's comments and docstrings, each with the line it starts on."""
    text = path.read_text(encoding="utf-8")
    parts: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            parts.append((tok.start[0], tok.string.lstrip("#").strip()))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                parts.append((node.body[0].lineno, doc))
    return parts


def prose(path: Path) -> str:
    """A module's comments and docstrings, each comment's lines joined into one text."""
    return " ".join(" ".join(part for _, part in comments(path)).split())


def disagreements(text: str, where: str, built: set[str]) -> list[str]:
    out = []
    for pattern in SAYS_COMPILED:
        for m in pattern.finditer(text):
            module = resolve(m.group("m"), where)
            if module is not None and module not in built:
                out.append(f"{where} calls {module} compiled: {m.group(0)!r}")
    for m in SAYS_NOT.finditer(text):
        module = resolve(m.group("m"), where)
        if module is not None and module in built:
            out.append(f"{where} says {module} is not compiled: {m.group(0)!r}")
    package = where.rsplit("/", 1)[0] + "/" if "/" in where else ""
    for m in SAYS_NOT_WORD.finditer(text):
        module = package + m.group("w") + ".py"
        if module in built:
            out.append(f"{where} says {module} is not compiled: {m.group(0)!r}")
    return out


def test_the_compiled_list_names_modules_that_exist() -> None:
    assert compiled() <= set(modules())


def test_comments_and_docstrings_agree_with_setup_py() -> None:
    built = compiled()
    wrong = []
    for module in modules():
        text = prose(PACKAGE / module)
        wrong += disagreements(text, module, built)
        if SELF_COMPILED.search(text) and module not in built:
            wrong.append(f"{module} says it is compiled; setup.py does not compile it")
        if SELF_NOT.search(text) and module in built:
            wrong.append(f"{module} says it is not compiled; setup.py compiles it")
    assert not wrong, "\n".join(wrong)


def test_the_server_readme_agrees_with_setup_py() -> None:
    text = (SERVER / "README.md").read_text(encoding="utf-8")
    wrong = disagreements(text, "README.md", compiled())
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_wrong_claim() -> None:
    built = {"convert.py"}
    assert disagreements("conversion in `convert.py`, compiled with the engine", "values.py", built) == []
    assert disagreements("the log (`storage/log.py`, compiled) appends", "x.py", built)
    assert disagreements("and convert.py, which mypyc cannot build, runs", "x.py", built)
    assert disagreements("The convert itself subclasses int, which mypyc cannot build", "values.py", built)
