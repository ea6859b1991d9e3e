"""The bytecodes one claim of ten runs through the HTTP service, in process: the direct path's
`App.handle` from the transport's `Request` and body to its `Answer`, the engine's run included.

As `bench/claim_bytecodes.py` counts the engine's part (`Database.query`), this counts the
service's: run on the sources (FENECDB_PURE_PYTHON=1; compiled modules run no bytecodes), it says
what a change to `http/` moved, whatever the machine's load. `--src` runs another checkout's
`server/src`.

    FENECDB_PURE_PYTHON=1 .venv/bin/python bench/handle_bytecodes.py [--jobs 10000] [--src DIR] [--json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from collections import Counter
from typing import Any

from opcode_count import traced  # run as a script: bench/ is on the path

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--src", default=None, help="a server/src to import the server from")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args()
    if args.src:
        sys.path.insert(0, os.path.abspath(args.src))
    from fenecdb_server import Database
    from fenecdb_server.http.app import App, Config

    fixed = Database().now()
    db = Database(clock=lambda: fixed)
    db.query(SCHEMA)
    db.query("put jobs $1", [[{"payload": {"n": i}, "run_at": fixed - 1000, "attempts": 0} for i in range(args.jobs)]])
    app = App(db, Config(version="b"))
    handle: Any = app.handle
    # the service takes the transport's Request; a checkout from before it (`--src`) took the ASGI scope
    takes_scope = "scope" in inspect.signature(handle).parameters

    def request(owner: str) -> tuple[Any, bytes]:
        body = json.dumps({"query": CLAIM, "params": [owner]}).encode()
        headers = [(b"host", b"b"), (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if takes_scope:
            return {"type": "http", "http_version": "1.1", "method": "POST", "path": "/query", "raw_path": b"/query",
                    "query_string": b"", "headers": headers, "client": ("127.0.0.1", 1)}, body
        from fenecdb_server.http.exchange import Head, Request

        return Request("POST", "/query", b"/query", Head(headers), "127.0.0.1"), body

    import asyncio

    async def run() -> tuple[int, int, Counter[str]]:
        for i in range(5):
            handle(*request(f"warm:{i}"))
        req, body = request("w1")
        # the request's duration stands still, as the database's clock does: the metrics' walk of
        # their latency buckets would otherwise count the tracer's own slowness
        import time

        time.perf_counter = lambda: 0.0
        answer, ran = traced(handle, req, body)
        assert answer is not None and answer.status == 200, answer
        return ran.ops, ran.calls, ran.where

    ops, calls, where = asyncio.run(run())
    if args.json:
        print(json.dumps({"bytecodes": ops, "calls": calls}))
        return 0
    print(f"App.handle of a claim of 10 over {args.jobs} ready jobs: {ops} bytecodes in {calls} calls")
    for name, n in where.most_common(None if os.environ.get("ALL") else 15):
        print(f"  {n:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
