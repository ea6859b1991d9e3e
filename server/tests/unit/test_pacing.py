"""A statement of more than PACE_ROWS rows works them PACE_ROWS at a time, handing the GIL over
between two chunks (pacing.py): a claim, a put, a block, a scan, a record and the queue counters.
Each answers, writes and stores what it did in one piece: the same rows as the same statement cut
into statements of fewer rows than a chunk on a twin database, on a clock that stands still.
And a get asked for in `pieces` answers its rows unrendered (`Rows`), each slice rendered as the
statement saw it, whatever is written after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fenecdb_server import Database
from fenecdb_server.engine.prepare import Rows
from fenecdb_server.pacing import PACE_ROWS

NOW = 1_777_800_000_000
N = 2 * PACE_ROWS + 500  # three chunks, the last one short
SCHEMA = ("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, "
          "key text @unique, queue text @hash)")


def claim(limit: int) -> str:
    return ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
            f"where run_at <= now() order run_at limit {limit} returning *")


def loaded(path: Path | None = None, schema: str = SCHEMA) -> Database:
    db = Database(str(path) if path is not None else None, clock=lambda: NOW)
    db.query(schema)
    docs = [{"payload": {"n": i}, "run_at": i, "attempts": 0, "key": f"k{i}", "queue": "q" if i % 2 else "r"}
            for i in range(N)]
    assert db.query("put jobs $1", [docs]) == {"affected": N}
    return db


def rows(db: Database) -> list[dict[str, Any]]:
    return db.query("get jobs order id")  # type: ignore[no-any-return]


@pytest.mark.parametrize("schema", [SCHEMA, SCHEMA.replace(" @unique", "")])
def test_a_claim_of_many_rows_is_the_claims_of_a_few(schema: str) -> None:
    paced, twin = loaded(schema=schema), loaded(schema=schema)
    got = paced.query(claim(N), ["w"])
    parts: list[Any] = []
    while len(parts) < N:
        parts += twin.query(claim(PACE_ROWS // 4), ["w"])
    assert got == parts and len(got) == N
    assert rows(paced) == rows(twin)
    assert paced.query(claim(10), ["x"]) == []  # the index moved every row: none is ready
    assert paced.query("get jobs where queue = 'q' and owner = 'w' count") == [{"count": N // 2}]


def test_a_put_and_a_block_of_many_are_the_puts_of_a_few() -> None:
    paced, twin = loaded(), loaded()
    docs = [{"attempts": i, "key": f"new{i}"} for i in range(N)]
    assert paced.query("put jobs $1", [docs]) == {"affected": N}
    assert paced.batch([("put jobs {attempts: $1}", [i]) for i in range(N)]) == [{"affected": 1}] * N
    for at in range(0, N, 100):
        twin.query("put jobs $1", [docs[at:at + 100]])
    for i in range(N):
        twin.query("put jobs {attempts: $1}", [i])
    assert rows(paced) == rows(twin)
    assert paced.query("get jobs where attempts = 7 count") == [{"count": 2}]  # the scan, in chunks


def test_a_record_of_many_rows_reads_back_as_written(tmp_path: Path) -> None:
    db = loaded(tmp_path / "paced.fenec")
    db.query(claim(N), ["w"])
    before = rows(db)
    db.close()
    again = Database(str(tmp_path / "paced.fenec"), clock=lambda: NOW)
    assert rows(again) == before
    again.close()


def test_a_get_in_pieces_renders_what_it_saw() -> None:
    db = loaded()
    whole = db.query("get jobs order run_at")
    result = db.execute([("get jobs order run_at", None)], pieces=PACE_ROWS)
    answer = result.answers[0]
    assert type(answer) is Rows and len(answer) == N
    db.query(claim(N), ["w"])  # every row rewritten after the get picked them
    db.query("del jobs where attempts = 1 limit 10")
    seen = [row for at in range(0, N, PACE_ROWS) for row in answer.slice(at, at + PACE_ROWS)]
    assert seen == whole
    few = db.execute([("get jobs limit 5", None)], pieces=PACE_ROWS).answers[0]
    assert type(few) is list and len(few) == 5  # up to `pieces` rows: rendered at once
    block = db.execute([("get jobs", None), ("get jobs limit 1", None)], block=True, pieces=PACE_ROWS)
    assert type(block.answers[0]) is list  # a block's answers are rendered whole
