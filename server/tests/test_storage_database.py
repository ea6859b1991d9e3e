"""The storage promises seen through the `Database`: what the engine writes comes back after
a restart, a cut file opens to exactly the statements before the cut, a disk error is 500
and stops writes while reads go on, a compaction keeps every live document and id."""

from __future__ import annotations

import errno
import os

import pytest
from fenecdb_server import Database
from fenecdb_server.errors import FenecError
from fenecdb_server.storage.files import FaultyFiles
from fenecdb_server.storage.format import scan

SCHEMA = "create collection jobs (tag text, n int)"


def tags(db: Database) -> list[str]:
    return [r["tag"] for r in db.query("get jobs select tag order id")]


def test_every_statement_survives_a_restart(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    db = Database(path, sync="always")
    db.query(SCHEMA)
    db.query("put jobs [{tag: 'a', n: 1}, {tag: 'b', n: 2}]")
    db.query("set jobs {n: n + 10} where tag = 'a'")
    db.query("del jobs where tag = 'b'")
    db.batch([("put jobs {tag: 'c', n: 3}", None), ("put jobs {tag: 'd', n: 4}", None)])
    before = db.query("get jobs order id")
    db.close()
    again = Database(path, sync="always")
    assert again.query("get jobs order id") == before
    assert [r["n"] for r in before] == [11, 3, 4]
    again.query("put jobs {tag: 'e', n: 5}")
    assert again.query("get jobs select id where tag = 'e'") == [{"id": 5}]  # id 2 is never reused
    again.close()


def test_a_file_cut_at_any_record_boundary_opens_to_the_statements_before_it(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    db = Database(path, sync="off")
    db.query(SCHEMA)
    written = []
    for i in range(12):
        db.query("put jobs {tag: $1, n: $2}", [f"t{i}", i])
        written.append(f"t{i}")
    db.close()
    with open(path, "rb") as f:
        data = f.read()
    found = scan(data)
    assert len(found.records) == 13  # one record per statement
    ends = []
    pos = found.snapshot_end
    for r in found.records:
        pos += 12 + len(r)
        ends.append(pos)
    cut_path = str(tmp_path / "cut.fenec")
    for k, end in enumerate(ends[1:], start=1):
        for cut in (end, end + 5):  # at the boundary, and inside the next record
            if cut >= len(data):
                continue
            with open(cut_path, "wb") as f:
                f.write(data[:cut])
            cut_db = Database(cut_path, sync="off")
            assert tags(cut_db) == written[:k], cut
            cut_db.close()
            assert os.path.getsize(cut_path) == end


def test_enospc_answers_500_stops_writes_and_reads_go_on(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    files = FaultyFiles()
    db = Database(path, sync="always", files=files)
    db.query(SCHEMA)
    db.query("put jobs {tag: 'kept', n: 1}")
    files.fail("writev", errno.ENOSPC)
    with pytest.raises(FenecError) as caught:
        db.query("put jobs {tag: 'lost', n: 2}")
    assert caught.value.status == 500 and caught.value.kind == "io"
    assert tags(db) == ["kept"]  # the refused write was put back in memory too
    with pytest.raises(FenecError, match="refused") as later:
        db.query("set jobs {n: 5}")
    assert later.value.status == 500
    assert db.query("get jobs select n") == [{"n": 1}]
    db.close()
    again = Database(path, sync="always")
    assert tags(again) == ["kept"]
    again.query("put jobs {tag: 'after restart', n: 3}")  # a restart takes writes again
    again.close()


def test_eio_on_fsync_answers_500_and_is_never_retried(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    files = FaultyFiles()
    db = Database(path, sync="always", files=files)
    db.query(SCHEMA)
    files.fail("datasync", errno.EIO)
    with pytest.raises(FenecError) as caught:
        db.query("put jobs {tag: 'x', n: 1}")
    assert caught.value.status == 500
    fsyncs = files.calls["datasync"]
    with pytest.raises(FenecError, match="refused"):
        db.query("put jobs {tag: 'y', n: 2}")
    db.close()
    assert files.calls["datasync"] == fsyncs


def test_compaction_keeps_documents_and_the_next_id(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    db = Database(path, sync="always")
    db.query(SCHEMA)
    db.query("put jobs $1", [[{"tag": f"t{i}", "n": 0} for i in range(50)]])
    for _ in range(20):
        db.query("set jobs {n: n + 1} where n < 100")
    db.query("del jobs where n >= 0 and tag != 't1'")
    db.query("del jobs where tag = 't1' and n > 100")  # takes nothing
    before = db.storage_stats()["file_bytes"]  # records; the file holds preallocated zeros after
    db.compact()
    after = db.storage_stats()["file_bytes"]
    assert after < before // 5
    db.query("put jobs {tag: 'new', n: 0}")
    db.close()
    again = Database(path, sync="always")
    assert again.query("get jobs select id, tag, n order id") == [
        {"id": 2, "tag": "t1", "n": 20},
        {"id": 51, "tag": "new", "n": 0},
    ]
    again.close()
