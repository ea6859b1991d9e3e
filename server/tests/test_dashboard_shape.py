"""The dashboard (http/dashboard/app.js) and the metrics (engine/queues.py) find the same queues:
app.js's `shapeOf`, run by node over `GET /collections`' shape of each schema below, answers what
`shape_of` answers for it (the ready-time field, and the done, error and queue fields)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fenecdb_server import Database
from fenecdb_server.engine.queues import shape_of
from fenecdb_server.http.routes import documented

APP_JS = Path(__file__).resolve().parents[1] / "src" / "fenecdb_server" / "http" / "dashboard" / "app.js"
SCHEMAS = [
    "payload json, run_at timestamp @sorted, owner text, attempts int",
    "queue text, run_at timestamp @sorted, owner text, attempts int, error text, done_at timestamp",
    "run_at timestamp, owner text, attempts int",
    "due timestamp @sorted, owner text, attempts int, done_at timestamp @sorted",
    "run_at int, due timestamp @sorted, owner text, attempts int",
    "run_at timestamp @sorted, attempts int",
    "run_at timestamp @sorted, owner int, attempts int",
    "a timestamp @sorted, b timestamp @sorted, owner text, attempts int",
    "due timestamp, owner text, attempts int",
    "queue int, error json, done_at text, run_at timestamp @sorted, owner text, attempts int",
]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_app_js_and_the_engine_agree_on_what_a_queue_is() -> None:
    source = APP_JS.read_text(encoding="utf-8")
    match = re.search(r"^function shapeOf\(c\) \{\n.*?^\}\n", source, flags=re.M | re.S)
    assert match, "app.js has no shapeOf"
    collections, expected = [], []
    for i, fields in enumerate(SCHEMAS):
        db = Database()
        db.query(f"create collection c{i} ({fields})")
        schema = db.collections[f"c{i}"].schema
        collections.append(documented(schema.to_json()))
        shape = shape_of(schema)
        expected.append(None if shape is None else
                        {"name": f"c{i}", "ready": shape.ready, "done": shape.done, "error": shape.error,
                         "queue": shape.queue})
    program = match.group(0) + f"console.log(JSON.stringify({json.dumps(collections)}.map(shapeOf)));"
    out = subprocess.run(["node", "-e", program], capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == expected
    assert sum(e is not None for e in expected) == 6
