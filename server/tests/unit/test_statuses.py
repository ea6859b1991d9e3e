"""Every HTTP status the server writes or reads is named: in the one table (errors.py's `STATUS` for
the engine's kinds, http/errors.py for the wire's), or, below HTTP, by the standard library's
`http.HTTPStatus`. This holds the whole package: the answers it makes (an `Answer`, a refusal, a
`(status, body)` pair), the statuses it compares (a ping's, a replica's, an etcd answer's) and the
ones the OpenAPI document lists."""

from __future__ import annotations

import ast
import http
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "fenecdb_server"
TABLES = {"errors.py", "http/errors.py"}
STATUSES = {int(s) for s in http.HTTPStatus if s >= 200}


# calls whose int argument is an answer's status
STATUS_CALLS = {"Answer", "Refusal", "Response", "respond", "_refuse", "render", "render_api", "render_close",
                "_write_answer", "JSONResponse"}


def _status(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value in STATUSES


def literal_statuses(source: str) -> list[int]:
    """Lines where a status is written as a number: an argument of an answer's call, a `(status,
    body)` pair, a `"status"` entry, compared with a `status` (a name or an attribute), or a
    dictionary key of three digits that is a status (an OpenAPI response)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in STATUS_CALLS and any(_status(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and _status(node.elts[0]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(isinstance(s, ast.Attribute) and s.attr in ("status", "status_code")
                        or isinstance(s, ast.Name) and s.id in ("status", "status_code") for s in sides)
            if named and any(isinstance(s, ast.Constant) and type(s.value) is int and s.value in STATUSES
                             for s in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and (k.value == "status" and _status(v) or isinstance(k.value, str)
                                                    and k.value.isdigit() and int(k.value) in STATUSES):
                    lines.append(node.lineno)
                    break
    return lines


def test_no_module_writes_a_status_as_a_number() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name not in TABLES:
            lines = literal_statuses(path.read_text(encoding="utf-8"))
            if lines:
                found[name] = lines
    assert not found, f"statuses written as numbers (name them): {found}"


def test_the_check_sees_a_compared_status_and_a_listed_one() -> None:
    source = ("if resp.status != 200: pass\nif status >= 500: pass\nr = {'404': {}}\n"
              "ok = {str(E.OK): {}}\nif n > 200: pass\n")
    assert literal_statuses(source) == [1, 2, 3]


def test_the_check_sees_a_status_an_answer_is_made_with() -> None:
    source = "Answer(404, b'')\nself._refusal = (414, body)\nd = {'status': 503}\nAnswer(E.OK, b'')\nx = (1, 2)\n"
    assert literal_statuses(source) == [1, 2, 3]
