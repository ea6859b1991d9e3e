"""What an operator reads over HTTP from a real `fenec-server` on a file: `GET /collections` in
exactly http.md's shape, and `/_metrics`' queue depth per collection (ready, leased, delayed,
dead, the oldest ready job's age) and byte gauges (file, live, reclaimable, resident memory)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_http_e2e import Server, q

QUEUE = "create collection mail (payload json, run_at timestamp @sorted, owner text, attempts int)"

def record_bytes(path) -> int:
    """The data file's size less the zeros preallocated after its records (storage/log.py):
    the records end in a JSON payload's last byte, never a zero."""
    with open(path, "rb") as f:
        return len(f.read().rstrip(b"\0"))



@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("ops") / "ops.fenec"
    s = Server("--file", str(path), "--sync", "always")
    with s.client() as c:
        yield s, c, path
    assert s.stop() == 0


def metrics(c: httpx.Client) -> dict[str, float]:
    r = c.get("/_metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_collections_answer_exactly_the_documented_shape(served: Any) -> None:
    _, c, _ = served
    assert q(c, "create collection locks (name text @unique, owner text required, at timestamp @ttl(30s), "
                "meta json, tags [text])").status_code == 200
    assert q(c, "create index on locks (meta.lang) @hash").status_code == 200
    r = c.get("/collections")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json; charset=utf-8"
    locks = next(col for col in r.json() if col["name"] == "locks")
    assert locks == {"name": "locks", "fields": [
        {"name": "name", "type": "text", "index": "unique", "required": False},
        {"name": "owner", "type": "text", "index": None, "required": True},
        {"name": "at", "type": "timestamp", "index": "ttl", "required": False},
        {"name": "meta", "type": "json", "index": None, "required": False},
        {"name": "tags", "type": "[text]", "index": None, "required": False},
    ]}
    for col in r.json():
        assert list(col) == ["name", "fields"]
        for f in col["fields"]:
            assert list(f) == ["name", "type", "index", "required"]
    assert c.head("/collections").headers["content-length"] == str(len(r.content))


def test_queue_depth_gauges_count_each_state(served: Any) -> None:
    _, c, _ = served
    assert q(c, QUEUE).status_code == 200
    q(c, "put mail [{run_at: now() - 5000, attempts: 0}, {run_at: now() - 1000, attempts: 0}, "
         "{run_at: now(), attempts: 0}, {run_at: now() - 1, attempts: 0}, {run_at: now() - 1, attempts: 0}]")
    q(c, "put mail [{run_at: now() + 600000, attempts: 0}, {run_at: null, attempts: 3}]")  # delayed, dead
    taken = q(c, "set mail {owner: 'w1', run_at: now() + 30000} where run_at <= now() and run_at > now() - 3000 "
                 "order run_at limit 2 returning id").json()
    assert len(taken) == 2  # leased
    m = metrics(c)
    assert m['fenec_queue_ready{collection="mail"}'] == 3
    assert m['fenec_queue_leased{collection="mail"}'] == 2
    assert m['fenec_queue_delayed{collection="mail"}'] == 1
    assert m['fenec_queue_dead{collection="mail"}'] == 1
    assert m['fenec_documents{collection="mail"}'] == 7
    assert 5.0 <= m['fenec_queue_oldest_ready_seconds{collection="mail"}'] < 60
    assert 'fenec_queue_ready{collection="locks"}' not in m  # no run_at: not a queue


def test_byte_gauges_follow_the_file(served: Any) -> None:
    _, c, path = served
    start = metrics(c)
    q(c, "create collection blobs (body text, n int)")
    q(c, "put blobs $1", [{"body": "x" * 500, "n": i} for i in range(100)])
    m = metrics(c)
    assert m["fenec_file_bytes"] == record_bytes(path)  # --sync always: every byte is written
    assert 100 * 500 <= m['fenec_data_bytes{collection="blobs"}'] < 100 * 600
    before = m["fenec_reclaimable_bytes"]
    for _ in range(3):
        q(c, "set blobs {n: n + 1}")  # every row rewritten: 3 x 50 KB dead
    m = metrics(c)
    assert m["fenec_file_bytes"] == record_bytes(path)
    assert m["fenec_reclaimable_bytes"] >= before + 3 * 100 * 500
    assert m["fenec_reclaimable_bytes"] < m["fenec_file_bytes"]
    assert m["fenec_auto_compactions_total"] == 0
    assert m["fenec_storage_failed"] == 0
    # --sync always, one client: the create, the put and 3 sets, each synced before its answer
    assert m["fenec_log_records_total"] - start["fenec_log_records_total"] == 5
    assert m["fenec_log_syncs_total"] - start["fenec_log_syncs_total"] == 5
    rss = m["process_resident_memory_bytes"]
    assert 10 * 2**20 < rss < 4 * 2**30  # a Python server: tens of MB, not a made-up number


def test_resident_memory_is_the_server_process_own(served: Any) -> None:
    server, c, _ = served
    statm = Path(f"/proc/{server.proc.pid}/statm").read_text().split()
    theirs = int(statm[1]) * os.sysconf("SC_PAGE_SIZE")
    ours = metrics(c)["process_resident_memory_bytes"]
    assert abs(ours - theirs) < 32 * 2**20  # the same process, read moments apart


def test_an_in_memory_server_has_no_file_gauges() -> None:
    s = Server()
    try:
        with s.client() as c:
            text = c.get("/_metrics").text
        assert "fenec_file_bytes" not in text and "fenec_reclaimable_bytes" not in text
        assert re.search(r"^process_resident_memory_bytes \d+$", text, re.M)
    finally:
        assert s.stop() == 0
