"""`http/`'s shape, as the server README draws it: one request path whose transport knows nothing of
the application. (Its modules' sizes are held with the whole package's by tests/test_room_sizes.py,
its statuses by test_statuses.py, its reads of the database by test_database_face.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import fenecdb_server.http as package

HTTP = Path(package.__file__).resolve().parent
# The transport and what it shares with the application: the transport imports from these alone.
TRANSPORT = {"protocol", "connection", "cycle", "wire", "exchange", "routing"}
SHARED = TRANSPORT | {"errors", "limits", "auth", "tokens", "busy_poll"}


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


def test_the_transport_imports_nothing_of_the_application():
    wrong = {name: sorted(http_imports(tree) - SHARED) for name, tree in modules().items() if name in TRANSPORT}
    assert not any(wrong.values()), f"the transport imports the application: {wrong}"


def test_the_import_check_sees_an_import_of_the_application():
    assert http_imports(ast.parse("from .app import App\nfrom . import wire\nfrom ..flags import DEFAULTS\n")) \
        == {"app", "wire"}
