"""`http/`'s shape, as the server README draws it: one request path whose transport knows nothing of
the application, small modules, every status from the one table, the database read only through
its public methods."""

from __future__ import annotations

import ast
import http
from pathlib import Path

import fenecdb_server.http as package

HTTP = Path(package.__file__).resolve().parent
# The transport and what it shares with the application: the transport imports from these alone.
TRANSPORT = {"protocol", "connection", "cycle", "wire", "exchange", "routing"}
SHARED = TRANSPORT | {"errors", "limits", "auth", "tokens", "busy_poll"}
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300
# every status an answer can carry; a number among them written in http/ outside errors.py is a
# status written literally (the statuses are named once, in errors.py)
STATUSES = {int(s) for s in http.HTTPStatus if s >= 200}
# calls whose int argument is an answer's status
STATUS_CALLS = {"Answer", "Refusal", "Response", "respond", "_refuse", "render", "render_api", "render_close",
                "_write_answer", "JSONResponse"}


def modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(HTTP.glob("*.py"))}


def http_imports(tree: ast.Module) -> set[str]:
    """The modules of http/ that `tree` imports, at run time or for types alike."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def literal_statuses(tree: ast.Module) -> list[int]:
    """Line numbers where a status is written as a number: an argument of an answer's call, a
    comparison with a `.status`, a `(status, body)` pair."""
    lines = []

    def status(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int and node.value in STATUSES

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in STATUS_CALLS and any(status(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr in ("status", "status_code") for s in sides) \
                    and any(status(s) for s in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and status(node.elts[0]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "status" and status(v):
                    lines.append(node.lineno)
    return lines


def test_the_transport_imports_nothing_of_the_application():
    wrong = {name: sorted(http_imports(tree) - SHARED) for name, tree in modules().items() if name in TRANSPORT}
    assert not any(wrong.values()), f"the transport imports the application: {wrong}"


def test_no_module_of_http_is_over_600_lines_nor_a_class_over_300():
    big = []
    for p in sorted(HTTP.glob("*.py")):
        text = p.read_text(encoding="utf-8")
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            big.append(f"{p.name}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    big.append(f"{p.name}: class {node.name}, {size} lines")
    assert not big, big


def test_every_status_comes_from_the_one_table():
    found = {name: literal_statuses(tree) for name, tree in modules().items() if name != "errors"}
    assert not any(found.values()), f"statuses written as numbers (name them in errors.py): {found}"


def test_the_status_check_sees_a_literal_status():
    tree = ast.parse("Answer(404, b'')\nself._refusal = (414, body)\nif a.status == 401: pass\n")
    assert literal_statuses(tree) == [1, 2, 3]


def test_http_reads_the_database_through_its_methods_never_by_name():
    wrong = []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and node.args and "db" in ast.unparse(node.args[0]):
                wrong.append(f"{name}.py:{node.lineno}: {ast.unparse(node)}")
    assert not wrong, wrong
