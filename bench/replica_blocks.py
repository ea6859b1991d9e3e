"""How much of a replica's block of records nets out, by the block's size: a primary `Database` (in this
process, on a file) whose `--workers` workers each claim ten jobs and ack them in one block, again and again,
in turns (each acks what it holds and claims again, then the next: a claim's acks come `2 × --workers - 1`
records after it, as when the workers' requests interleave), and its records applied by `records.replay_all` in blocks of each
size, as a replica's follower applies them (replication/follower.py, `APPLY_MOST`). Prints, per block size,
the row changes applied a job (replayed a record at a time: two, the claim's image and the ack's delete; a
job claimed and acked in one block: one, its delete) and the row images among them (each one decoded and its
index keys moved). A count, not a time: it holds on a busy machine. It counts calls inside the engine, so it
runs on the sources:

    FENECDB_PURE_PYTHON=1 python bench/replica_blocks.py [--jobs 8000] [--workers 8] [--sizes 1,64,128,256]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from fenecdb_server import Database
from fenecdb_server.engine import records
from fenecdb_server.engine.collection import Collection
from fenecdb_server.engine.engine import Engine
from fenecdb_server.storage.log import Log

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning id")
ACK = "del jobs where id = $1 and owner = $2 require 1"


def primary_records(path: str, jobs: int, workers: int) -> tuple[list[bytes], int]:
    """The primary's records, and how many of them come before the first claim."""
    db = Database(path, sync="off")
    db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)")
    for at in range(0, jobs, 1000):
        db.query("put jobs $1", [[{"payload": {"n": n}, "run_at": 0, "attempts": 0} for n in range(at, at + 1000)]])
    load = db.seq
    held = {f"w{w}": db.query(CLAIM, [f"w{w}"]) for w in range(workers)}
    while any(held.values()):
        for owner, rows in held.items():  # in turns: each acks what it holds, then claims again
            if rows:
                db.batch([(ACK, [r["id"], owner]) for r in rows])
                held[owner] = db.query(CLAIM, [owner])
    db.close()
    log = Log(path, sync="off")
    recs = log.open()[1]
    log.close()
    return recs, load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sizes", default="64,128,256")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fenec-replica-blocks-") as where:
        path = os.path.join(where, "p.fenec")
        recs, load = primary_records(path, args.jobs, args.workers)
    out = {}
    for size in [int(s) for s in args.sizes.split(",")]:
        eng = Engine()
        records.replay_all(eng, recs[:load], [])
        counted = {"rows": 0, "images": 0}
        real = Collection.apply_net

        def counting(coll: Collection, rids: list, olds: list, news: list, counted: dict = counted,
                     real: Any = real) -> None:
            counted["rows"] += len(rids)
            counted["images"] += sum(n is not None for n in news)
            real(coll, rids, olds, news)

        Collection.apply_net = counting  # type: ignore[method-assign,assignment]
        try:
            for at in range(load, len(recs), size):
                records.replay_all(eng, recs[at:at + size], [])
        finally:
            Collection.apply_net = real  # type: ignore[method-assign]
        out[size] = {"row_changes_a_job": round(counted["rows"] / args.jobs, 3),
                     "images_a_job": round(counted["images"] / args.jobs, 3)}
    print(json.dumps({"jobs": args.jobs, "workers": args.workers, "records": len(recs) - load, "by_block": out}))


if __name__ == "__main__":
    main()
