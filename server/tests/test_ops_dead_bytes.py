"""Dead bytes and auto-compaction (server.md §1.2): the estimate of what a compaction would give
back is close to what it then gives back, auto-compaction fires on it past the ratio and the
floor (and not before), and a compaction shrinks the file and keeps every row and key."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from fenecdb_server import Database
from fenecdb_server.cli import compaction_due, start_background
from fenecdb_server.database import Idem

JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 50 returning id")

def record_bytes(path) -> int:
    """The data file's size less the zeros preallocated after its records (storage/log.py):
    the records end in a JSON payload's last byte, never a zero."""
    with open(path, "rb") as f:
        return len(f.read().rstrip(b"\0"))



def storage(db: Database) -> dict:
    return db.stats()["storage"]


def churn(db: Database, rounds: int = 10) -> None:
    """A queue's life: jobs put, claimed (each claim rewrites its job), half of them acked."""
    for r in range(rounds):
        db.query("put jobs $1", [[{"payload": {"to": f"user{r}-{i}@example.com"}, "run_at": 0, "attempts": 0}
                                  for i in range(60)]])
        taken = db.query(CLAIM, [f"worker-{r}"])
        for row in taken[:25]:
            db.query("del jobs where id = $1", [row["id"]])
        db.query("set jobs {error: 'timed out, retrying', owner: null} where owner = $1 and id % 2 = 0",
                 [f"worker-{r}"])


def snapshot_of(db: Database) -> list:
    return db.query("get jobs order id")



def churned(tmp_path, *rounds: int) -> tuple[str, Database]:
    """A data file of jobs put, claimed and acked by `churn`: (its path, the database open on it)."""
    path = str(tmp_path / "q.fenec")
    db = Database(path, sync="off")
    db.query(JOBS)
    churn(db, *rounds)
    return path, db

def test_the_estimate_matches_what_a_compaction_gives_back(tmp_path) -> None:
    path, db = churned(tmp_path)
    st = storage(db)
    assert st["file_bytes"] == record_bytes(path)
    assert st["reclaimable_bytes"] > st["file_bytes"] // 2  # most of a churned queue's file is dead
    estimated_live = st["file_bytes"] - st["reclaimable_bytes"]
    rows = snapshot_of(db)
    done = db.compact()
    real_live = record_bytes(path)
    assert done["bytes_after"] == real_live < done["bytes_before"]
    assert abs(estimated_live - real_live) <= real_live * 0.15, (estimated_live, real_live)
    after = storage(db)
    assert after["reclaimable_bytes"] <= after["file_bytes"] * 0.01  # just compacted: nothing dead
    assert snapshot_of(db) == rows
    db.close()
    again = Database(path, sync="off")
    assert snapshot_of(again) == rows
    again.close()


def test_a_file_with_no_rewrites_has_little_dead(tmp_path) -> None:
    """Puts only: a compaction gives back only the records' framing; the estimate says so."""
    path = str(tmp_path / "q.fenec")
    db = Database(path, sync="off")
    db.query(JOBS)
    for i in range(200):
        db.query("put jobs {payload: $1, run_at: now(), attempts: 0}", [{"n": i, "to": "x@example.com"}])
    st = storage(db)
    assert st["reclaimable_bytes"] < st["file_bytes"] * 0.35
    predicted = st["file_bytes"] - st["reclaimable_bytes"]
    db.compact()
    assert abs(predicted - record_bytes(path)) <= record_bytes(path) * 0.1
    db.close()


def test_the_estimate_is_the_same_after_a_restart(tmp_path) -> None:
    """Replaying the file (and loading its snapshot) rebuilds the same estimate."""
    path, db = churned(tmp_path, 4)
    db.compact()
    churn(db, 4)
    before = storage(db)
    db.close()
    again = Database(path, sync="off")
    after = storage(again)
    assert after["file_bytes"] == before["file_bytes"]
    assert abs(after["reclaimable_bytes"] - before["reclaimable_bytes"]) <= before["file_bytes"] * 0.02
    again.close()


def test_deletes_and_swept_keys_become_dead_and_a_compaction_keeps_live_keys(tmp_path) -> None:
    path = str(tmp_path / "q.fenec")
    clock = [1_000_000]
    db = Database(path, sync="off", clock=lambda: clock[0])
    db.query(JOBS)
    for i in range(50):
        key = Idem(f"k{i}", hashlib.sha256(str(i).encode()).digest(), ttl_ms=1000 if i < 40 else 10**9)
        db.execute([("put jobs {payload: $1, run_at: now(), attempts: 0}", [{"n": i, "pad": "x" * 200}])],
                   idempotency=key)
    first = storage(db)["reclaimable_bytes"]
    db.query("del jobs where id <= 40")
    after_delete = storage(db)["reclaimable_bytes"]
    assert after_delete > first + 40 * 200  # the deleted rows' bytes are dead
    clock[0] += 1000 + 61_000  # the first 40 keys expired over a minute ago
    db.sweep()
    after_sweep = storage(db)["reclaimable_bytes"]
    assert after_sweep > after_delete + 40 * 64  # their stored answers too
    db.compact()
    assert storage(db)["reclaimable_bytes"] <= storage(db)["file_bytes"] * 0.02
    db.close()
    again = Database(path, sync="off", clock=lambda: clock[0])
    assert sorted(k for k, _ in again.keys.items()) == [f"k{i}" for i in range(40, 50)]
    assert again.query("get jobs count") == [{"count": 10}]
    again.close()


def test_compaction_is_due_past_the_ratio_and_the_floor_only(tmp_path) -> None:
    path, db = churned(tmp_path)
    st = storage(db)
    share = st["reclaimable_bytes"] / st["file_bytes"]
    assert compaction_due(db, share - 0.01, min_dead=1024)
    assert not compaction_due(db, share + 0.01, min_dead=1024)  # not dead enough a share
    assert not compaction_due(db, 0.1, min_dead=st["reclaimable_bytes"] + 1)  # under the floor
    assert not compaction_due(db, 0.1)  # the real floor is 64 MB
    assert not compaction_due(Database(), 0.1, min_dead=0)  # in memory: no file, nothing to do
    db.close()


@pytest.mark.sources  # a spy on the engine's walk (conftest)
def test_the_compaction_check_reads_the_storage_counts_and_never_walks_the_jobs(tmp_path, monkeypatch) -> None:
    """Run every few seconds on a live server: a pass over every job's state (`db.stats()`) there
    cost a million-job server most of a second of CPU each time."""
    from fenecdb_server.engine import queues

    path, db = churned(tmp_path)
    share = storage(db)["reclaimable_bytes"] / storage(db)["file_bytes"]
    walked = []
    real = queues.counts
    monkeypatch.setattr(queues, "counts", lambda *a: walked.append(1) or real(*a))
    assert compaction_due(db, share - 0.01, min_dead=1024)
    assert not compaction_due(db, share + 0.01, min_dead=1024)
    assert walked == []
    db.stats()  # what it used to call: the walk this test would have seen
    assert walked == [1]
    db.close()


def run_background(db: Database, path: str, ratio: str, seconds: float, **kw: object) -> None:
    async def main() -> None:
        tasks = start_background(db, ratio, path, **kw)
        await asyncio.sleep(seconds)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def test_auto_compaction_fires_shrinks_the_file_and_keeps_every_row(tmp_path, capsys) -> None:
    path = str(tmp_path / "q.fenec")
    db = Database(path, sync="always")
    db.query(JOBS)
    churn(db)
    rows = snapshot_of(db)
    size = record_bytes(path)
    run_background(db, path, "0.5", 0.5, every_s=0.05, min_dead=4096)
    assert db.auto_compactions == 1  # once: right after it, nothing is dead
    assert record_bytes(path) < size // 2
    assert storage(db)["auto_compactions"] == 1
    assert "compacted: " in capsys.readouterr().err
    assert snapshot_of(db) == rows
    db.query("put jobs {run_at: now(), attempts: 0}")
    db.close()
    again = Database(path, sync="off")
    assert snapshot_of(again)[:-1] == rows and len(snapshot_of(again)) == len(rows) + 1
    again.close()


def test_auto_compaction_waits_for_the_ratio_and_the_floor(tmp_path) -> None:
    path, db = churned(tmp_path)
    size = record_bytes(path)
    run_background(db, path, "0.5", 0.3, every_s=0.05)  # 64 MB floor: far from it
    run_background(db, path, "0.99", 0.3, every_s=0.05, min_dead=1024)  # ratio not reached
    run_background(db, path, "off", 0.3, every_s=0.05, min_dead=1024)
    assert db.auto_compactions == 0 and record_bytes(path) == size
    db.close()
