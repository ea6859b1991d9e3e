"""The low-level transport is generated from the server's committed OpenAPI document; this fails
when regenerating it (scripts/generate_transport.py) would change anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "generate_transport.py"


def test_regenerating_the_transport_changes_nothing() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_query_route_is_sent_through_the_generated_transport() -> None:
    from fenecdb._transport.api.default import query
    from fenecdb._wire import Shared, Wire

    request = Wire(None, 30.0, None, Shared()).query("del jobs where id = $1", [1], wait=2, idempotency_key="k")
    made = query._get_kwargs(body=query.Statement(query="x"), fenec_wait="2000", idempotency_key="k")
    assert request.path == made["url"] == "/query"
    assert request.headers["Fenec-Wait"] == "2000" and request.headers["Idempotency-Key"] == "k"
