"""The primary's CPU per record sent to a replica, for two wire formats of the stream.

`framed`: the log's own framing (12-byte header: length, CRC-32 of the payload, CRC-32 of the
header; then the payload), computed again for each record sent. `kept`: the same bytes, as
`replication/feed.py` sends them now: each record kept framed as the log wrote it (its header's
CRCs computed once, by the log), the frames joined. `ndjson`: the spec's proposal, one
line `{"seq":n,"record":"<base64>"}` a record. Both are timed on the records a real workload
writes: a claim of ten and its ten acks, and puts of one job, taken from an in-process
`Database` on a file (its records as the log holds them), encoded in batches as a stream sends
them, best of --runs.

    .venv/bin/python bench/replication_framing.py [--records 20000] [--runs 5]
"""

from __future__ import annotations

import argparse
import base64
import os
import tempfile
import time

from fenecdb_server import Database
from fenecdb_server.storage.format import record_header
from fenecdb_server.storage.log import Log

SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")


def workload(n: int) -> list[tuple[int, bytes]]:
    """The (change, payload) of about `n` records: puts, claims of ten, acks by id."""
    with tempfile.TemporaryDirectory() as where:
        db = Database(os.path.join(where, "b.fenec"), sync="off")
        db.query(SCHEMA)
        for i in range(n // 3):
            db.query("put jobs {payload: $1, run_at: now(), attempts: 0}", [{"to": f"user{i}@example.com"}])
        while db.log is not None and db.log.appended < n:
            got = db.query(CLAIM, ["w1:1"])
            if not got:
                break
            for row in got:
                db.query("del jobs where id = $1 and owner = $2 require 1", [row["id"], "w1:1"])
        db.close()
        back = Log(os.path.join(where, "b.fenec"), sync="off")
        _, payloads = back.open()
        back.close()
    return [(i + 1, p) for i, p in enumerate(payloads)]


def framed(records: list[tuple[int, bytes]]) -> bytes:
    return b"".join(record_header(p) + p for _, p in records)


def kept(records: list[tuple[int, bytes]]) -> bytes:
    """`records`' payloads already framed (`main` frames them once, as the log does)."""
    return b"".join(frame for _, frame in records)


def ndjson(records: list[tuple[int, bytes]]) -> bytes:
    return b"".join(b'{"seq":%d,"record":"%s"}\n' % (seq, base64.b64encode(p)) for seq, p in records)


def timed(encode: object, records: list[tuple[int, bytes]], batch: int, runs: int) -> tuple[float, int]:
    assert callable(encode)
    best = float("inf")
    size = 0
    for _ in range(runs):
        size = 0
        began = time.process_time()
        for at in range(0, len(records), batch):
            size += len(encode(records[at:at + batch]))
        best = min(best, time.process_time() - began)
    return best / len(records) * 1e6, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    records = workload(args.records)
    payload = sum(len(p) for _, p in records)
    print(f"{len(records)} records, {payload / len(records):.0f} payload bytes each on average")
    frames = [(seq, record_header(p) + p) for seq, p in records]
    for batch in (1, 100):
        for name, encode, given in (("framed", framed, records), ("kept", kept, frames), ("ndjson", ndjson, records)):
            us, size = timed(encode, given, batch, args.runs)
            print(f"  {name:7} batch {batch:>3}: {us:.2f} us a record, {size / len(records):.0f} bytes a record")


if __name__ == "__main__":
    main()
