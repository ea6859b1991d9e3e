"""`gc_policy`: the jobs a server holds are kept out of the cycle collector's walks, and a cycle
that dies before a full collection is still collected. Run in a child process: the policy is the
process's, and the tests around this one must keep CPython's."""

from __future__ import annotations

import subprocess
import sys

CHILD = r'''
import gc, weakref
from fenecdb_server import Database, gc_policy

db = Database()
db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)")
put = lambda n: db.query("put jobs $1", [[{"payload": {"n": i}, "run_at": 1, "attempts": 0} for i in range(n)]])
put(50_000)
gc.collect()
before = len(gc.get_objects())
assert before > 100_000, before  # a stored job is tracked by the collector ...
gc_policy.apply()
walked = len(gc.get_objects())
assert walked < 20_000, walked  # ... and no longer walked once the policy is on
put(50_000)
gc.collect()
assert len(gc.get_objects()) < 20_000, len(gc.get_objects())  # the survivors of a full collection too
assert gc_policy.frozen() > 200_000, gc_policy.frozen()

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a
dead = weakref.ref(a)
del a, b
gc.collect()
assert dead() is None  # a cycle that died before the full collection is collected
assert db.query("get jobs count") == [{"count": 100_000}]
print("ok")
'''


def test_stored_jobs_are_not_walked_and_young_cycles_are_still_collected() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


BULK_CHILD = r'''
import asyncio, gc, json
from fenecdb_server import Database, gc_policy
from fenecdb_server.http.app import App, Config

db = Database()
db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)")
gc_policy.apply()
app = App(db, Config())

def post(docs):
    body = json.dumps({"query": "put jobs $1", "params": [docs]}).encode()
    sent = []
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": "POST", "path": "/query", "raw_path": b"/query", "query_string": b"",
             "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1)}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], len(body)

frozen = gc_policy.frozen()
status, size = post([{"payload": {"n": i}, "run_at": 1, "attempts": 0} for i in range(20_000)])
assert status == 200 and size > 64 << 10, (status, size)
assert gc_policy.frozen() - frozen > 40_000, gc_policy.frozen() - frozen  # the stored rows, frozen after
assert len(gc.get_objects()) < 20_000, len(gc.get_objects())  # and not walked again
assert gc.isenabled()  # the collector is back on once the put is done
status, _ = post([{"payload": {"n": 1}, "run_at": 1, "attempts": 0}])  # a small put: as any write
assert status == 200
assert db.query("get jobs count") == [{"count": 20_001}]
print("ok")
'''


def test_a_bulk_put_over_http_runs_with_the_collector_held_off_and_its_rows_frozen() -> None:
    out = subprocess.run([sys.executable, "-c", BULK_CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
