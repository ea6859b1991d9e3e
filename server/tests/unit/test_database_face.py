"""`Database` is a facade over the engine and its log: its public face is this list, no more.

HTTP, the CLI, the held-claim drivers and in-process callers use these names; a name that slips
in (an engine method reached through the database) or out fails here, and the engine's insides
are asked of `db.engine`."""

from __future__ import annotations

import ast
from pathlib import Path

from fenecdb_server import Database, database
from fenecdb_server.engine.engine import Engine
from fenecdb_server.engine.queues import Tally

FACE = {
    # statements and the file
    "query", "batch", "execute", "close", "compact", "backup", "backup_file", "backup_to",
    "stats", "storage_stats", "log", "failed", "path", "auto_compactions", "last_compaction",
    # what HTTP and the held claims read
    "seq", "closed", "read_only", "set_read_only", "now", "until", "look", "reading", "listen",
    "unlisten", "observe", "unobserve", "prepare_hold", "sweep", "collections", "collection",
    "keys", "schemas", "cached", "tally",
    # the queues' controls and the schedules (the metrics; the server's schedule timer)
    "controls", "schedules", "fire_due",
    # a replica's records, written to the file before the engine replays them (replication/follower.py)
    "ahead",
    # the engine itself, for tests and tools that read its caches
    "engine",
}


def test_the_database_composes_the_engine_and_shows_only_its_face() -> None:
    assert not issubclass(Database, Engine)
    db = Database()
    names = {n for n in dir(db) if not n.startswith("_")}
    assert names == FACE
    assert isinstance(db.engine, Engine)


def test_what_http_reads_is_typed_and_public() -> None:
    db = Database()
    db.query("create collection jobs (run_at timestamp @sorted, owner text)")
    assert db.cached("create collection jobs (run_at timestamp @sorted, owner text)") is True
    assert db.cached("get jobs") is False
    assert isinstance(db.tally, Tally)
    assert [s["name"] for s in db.schemas()] == ["jobs"]
    # typed where they are written (a compiled class keeps no annotations to inspect)
    source = ast.parse((Path(database.__file__).parent / "database.py").read_text(encoding="utf-8"))
    cls = next(n for n in source.body if isinstance(n, ast.ClassDef) and n.name == "Database")
    returns = {f.name: ast.unparse(f.returns) for f in cls.body if isinstance(f, ast.FunctionDef) and f.returns}
    assert returns["cached"] == "bool" and returns["tally"] == "Tally" and returns["schemas"] == "list[dict]"


# What HTTP may import from the layers below it: the database's face (database.py's `__all__`), and
# the layers that are not the database (the base modules, the access rules, held claims, replication).
HTTP_MAY_IMPORT = {"database", "errors", "values", "gc_policy", "pacing", "flags", "policy", "held", "replication"}


def lower_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of each import of a module of http/ from the package's other layers."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 2:
            out.append((node.lineno, node.module or ", ".join(a.name for a in node.names)))
    return out


def test_http_imports_the_engine_and_the_storage_only_through_the_database() -> None:
    http = Path(database.__file__).parent / "http"
    wrong = []
    for path in sorted(http.glob("*.py")):
        for line, module in lower_imports(path.read_text(encoding="utf-8")):
            if module.split(".")[0] not in HTTP_MAY_IMPORT:
                wrong.append(f"http/{path.name}:{line} imports ..{module}")
    assert not wrong, "HTTP reaches under the database's face:\n" + "\n".join(wrong)
    face = set(database.__all__)
    assert {"Result", "Rows", "Busy", "Idem", "Deferred", "StorageFailed"} <= face
    assert all(hasattr(database, name) for name in face)


def test_the_import_check_sees_an_engine_import() -> None:
    found = lower_imports("from ..engine.prepare import Rows\nfrom ..database import Rows\nfrom . import errors\n")
    assert found == [(1, "engine.prepare"), (2, "database")]


def by_name(source: str) -> list[int]:
    """Lines that read a database or an engine by name: `getattr`/`hasattr` on `db`, `database` or `engine`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args and ast.unparse(node.args[0]).split(".")[-1] in ("db", "database", "engine", "_db"):
            out.append(node.lineno)
    return out


def test_nothing_reads_the_database_by_name() -> None:
    """Its face is typed: a caller (HTTP, the command line, replication) calls what it needs, and
    mypy sees every call; `hasattr(db, "sweep")` hid a name from it."""
    root = Path(database.__file__).parent
    found = {p.relative_to(root).as_posix(): by_name(p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.py"))}
    assert not {k: v for k, v in found.items() if v}


def test_the_by_name_check_sees_one() -> None:
    assert by_name("hasattr(db, 'sweep')\ngetattr(self.db, 'cached')\ngetattr(e, 'message', e)\n") == [1, 2]
