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
