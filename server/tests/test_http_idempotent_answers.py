"""A keyed write keeps the engine's answers, not HTTP bytes (engine/idempotency.py), and HTTP renders
them after the write lock is let go. A retry is answered the same bytes as the first answer, with
`Idempotent-Replayed: true`, in the same process and after a restart (when the answers come back
from the file's JSON): rows with times, floats, nested json and text outside ASCII (an astral
character too), a claim, and a /batch whose answers are rows and counts. (A body cannot carry a
lone surrogate; in process one can: test_storage_old_files.py, test_storage_write_faults.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from test_http_e2e import Server

JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, score float)"
CLAIM = {"query": "set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
                  "where run_at <= now() order run_at limit 2 returning *", "params": ["w\u00e9:1"]}
BATCH = "\n".join(json.dumps(d) for d in (
    {"query": "put jobs {payload: {k: [1, 2.5, null, 'z\u00fc']}, run_at: now(), attempts: 0, score: 0.1}"},
    {"query": "set jobs {owner: 'w2'} where owner is null order run_at limit 1 returning id, payload, score"},
    {"query": "get jobs count"},
)).encode()


def test_a_replay_is_the_first_answer_byte_for_byte_before_and_after_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "q.fenec")
    s = Server("--file", path, "--sync", "always")
    try:
        with s.client() as c:
            assert c.post("/query", json={"query": JOBS}).status_code == 200
            for i in range(3):
                doc = {"query": "put jobs {payload: $1, run_at: now() - 1000, attempts: 0, score: $2}",
                       "params": [{"to": f"ad\u00e0{i}@example.com", "face": "x\U0001f600y", "n": i / 3}, 1e16 + i]}
                assert c.post("/query", content=json.dumps(doc).encode()).status_code == 200
            first = c.post("/query", json=CLAIM, headers={"Idempotency-Key": "/query-1"})
            assert first.status_code == 200 and len(first.json()) == 2, first.text
            assert "idempotent-replayed" not in first.headers
            one = c.post("/batch", content=BATCH, headers={"Idempotency-Key": "/batch-1"})
            assert one.status_code == 200 and one.json()["ok"] == 3, one.text
            replayed(c, first.content, one.content)
    finally:
        assert s.stop() == 0
    s = Server("--file", path, "--sync", "always")
    try:
        with s.client() as c:
            replayed(c, first.content, one.content)
    finally:
        assert s.stop() == 0


def replayed(c: httpx.Client, claim: bytes, batch: bytes) -> None:
    """Both retries are answered the first answers, replayed, and nothing runs again."""
    for path, req, answer in (("/query", {"json": CLAIM}, claim), ("/batch", {"content": BATCH}, batch)):
        again = c.post(path, headers={"Idempotency-Key": path + "-1"}, **req)
        assert (again.status_code, again.content) == (200, answer)
        assert again.headers["idempotent-replayed"] == "true"
    assert c.post("/query", json={"query": "get jobs count"}).json() == [{"count": 4}]
