"""A replica's cost a record applied: a primary (`fenec-server`, `--sync 250`) loaded with --jobs jobs,
each then claimed ten at a time and acked in one `/batch`; a replica `Database` in this process that
follows it (`replication/follower.py`) holds the load, then catches up the claims' and acks' records.
Prints the catch-up's CPU time (this process: the follower, its syncer) a record and a job.

`--callgrind`: this process is run under valgrind's callgrind, whose counters are zeroed as the follower
starts and dumped once it is level; the instructions a record are then in the dump's `summary:` line:

    valgrind --tool=callgrind --callgrind-out-file=/tmp/apply python bench/replica_apply.py --callgrind
    callgrind_annotate --inclusive=yes /tmp/apply.1 | grep -E "PROGRAM|records___replay"

    .venv/bin/python bench/replica_apply.py [--jobs 20000] [--callgrind]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from fenecdb_server import Database
from fenecdb_server.replication.follower import Follower
from fenecdb_server.replication.identity import Identity

TOKEN = "bench-token"
SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning id")
ACK = "del jobs where id = $1 and owner = $2 require 1"


def post(conn: http.client.HTTPConnection, path: str, data: str) -> object:
    conn.request("POST", path, body=data)
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, body
    return json.loads(body)


def primary_seq(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/_replication/status", headers={"authorization": f"Bearer {TOKEN}"})
    return int(json.loads(conn.getresponse().read())["seq"])


def level(db: Database, seq: int) -> None:
    end = time.monotonic() + 600
    while db.seq < seq:
        if time.monotonic() > end:
            raise RuntimeError("the replica did not catch up")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--callgrind", action="store_true", help="run under callgrind: zero and dump its counters")
    args = parser.parse_args()
    where = tempfile.mkdtemp(prefix="fenec-replica-apply-")
    proc = subprocess.Popen([sys.executable, "-m", "fenecdb_server.cli", "--http", "127.0.0.1:0", "--file",
                             os.path.join(where, "p.fenec"), "--sync", "250", "--replication-token", TOKEN,
                             "--auto-compact", "off"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    port = 0
    for raw in proc.stderr:
        m = re.search(rb"listening on: http://[\d.]+:(\d+)", raw)
        if m:
            port = int(m.group(1))
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            break
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        post(conn, "/query", json.dumps({"query": SCHEMA}))
        for at in range(0, args.jobs, 500):
            docs = ", ".join(f"{{payload: {i}, run_at: now(), attempts: 0}}" for i in range(at, min(args.jobs, at + 500)))
            post(conn, "/query", json.dumps({"query": f"put jobs [{docs}]"}))
        path = os.path.join(where, "r.fenec")
        db = Database(path, sync=250)
        follower = Follower(db, Identity(path), f"http://127.0.0.1:{port}", TOKEN)
        follower.start()  # the load, not counted
        level(db, primary_seq(port))
        follower.stop()
        k = 0
        while True:
            k += 1
            rows = post(conn, "/query", json.dumps({"query": CLAIM, "params": [f"w{k}"]}))
            if not rows:
                break
            assert isinstance(rows, list)
            post(conn, "/batch", "".join(json.dumps({"query": ACK, "params": [r["id"], f"w{k}"]}) + "\n" for r in rows))
        time.sleep(0.6)  # the primary's sync: every record on its disk, sent in one go
        target = primary_seq(port)
        follower = Follower(db, Identity(path), f"http://127.0.0.1:{port}", TOKEN)
        if args.callgrind:
            subprocess.run(["callgrind_control", "-z", str(os.getpid())], check=True, capture_output=True)
        cpu = time.process_time()
        follower.start()
        level(db, target)
        cpu = time.process_time() - cpu
        if args.callgrind:
            subprocess.run(["callgrind_control", "-d", str(os.getpid())], check=True, capture_output=True)
        follower.stop()
        n = follower.records
        print(json.dumps({"records": n, "jobs": args.jobs, "cpu_us_a_record": round(cpu / n * 1e6, 1),
                          "cpu_us_a_job": round(cpu / args.jobs * 1e6, 2)}))
        db.close()
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
