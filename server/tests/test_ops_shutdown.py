"""Shutdown and storage failure as an operator sees them: `Database.close()` says whether the way
out had to fsync and the shutdown line follows it (server.md §6); a failed fsync leaves its write's
outcome unknown, refuses every later write with 500 while reads go on, and a restart shows
exactly what the file holds."""

from __future__ import annotations

import errno
import time

import pytest
from fenecdb_server import Database
from fenecdb_server.cli import shut_down
from fenecdb_server.errors import FenecError
from fenecdb_server.storage.files import FaultyFiles

SCHEMA = "create collection jobs (tag text, n int)"


def tags(db: Database) -> list[str]:
    return [r["tag"] for r in db.query("get jobs select tag order id")]


@pytest.mark.parametrize("sync", ["off", 60_000])
def test_close_says_it_synced_when_writes_were_waiting(tmp_path, sync) -> None:
    files = FaultyFiles()
    db = Database(str(tmp_path / "d.fenec"), sync=sync, files=files)
    db.query(SCHEMA)
    db.query("put jobs {tag: 'a', n: 1}")
    fsyncs = files.calls["datasync"]
    assert db.close() is True
    assert files.calls["datasync"] == fsyncs + 1  # the way out fsynced once
    assert db.close() is False  # already closed


def test_close_says_nothing_was_pending_when_every_write_was_synced(tmp_path) -> None:
    files = FaultyFiles()
    db = Database(str(tmp_path / "d.fenec"), sync="always", files=files)
    db.query(SCHEMA)
    db.query("put jobs {tag: 'a', n: 1}")
    fsyncs = files.calls["datasync"]
    assert db.close() is False
    assert files.calls["datasync"] == fsyncs
    fresh = Database(str(tmp_path / "e.fenec"), sync="off")
    assert fresh.close() is False  # opened, nothing written
    assert Database().close() is False  # in memory


def test_the_shutdown_line_follows_close(tmp_path, capsys) -> None:
    db = Database(str(tmp_path / "d.fenec"), sync="off")
    db.query(SCHEMA)
    assert shut_down(db) == 0
    assert capsys.readouterr().err == "shutting down: writes were pushed to disk\n"
    db = Database(str(tmp_path / "d.fenec"), sync="always")
    db.query("put jobs {tag: 'a', n: 1}")
    assert shut_down(db) == 0
    assert capsys.readouterr().err == "shutting down: no pending writes\n"
    assert shut_down(Database()) == 0
    assert capsys.readouterr().err == "shutting down: no pending writes\n"


def test_a_failed_last_fsync_is_a_sync_error_and_exit_1(tmp_path, capsys) -> None:
    files = FaultyFiles()
    db = Database(str(tmp_path / "d.fenec"), sync="off", files=files)
    db.query(SCHEMA)
    files.fail("datasync", errno.EIO)
    assert shut_down(db) == 1
    err = capsys.readouterr().err
    assert err.startswith("sync error: ") and "Input/output error" in err


def test_after_an_earlier_disk_failure_the_line_does_not_claim_the_writes_are_on_disk(tmp_path, capsys) -> None:
    files = FaultyFiles()
    db = Database(str(tmp_path / "d.fenec"), sync="always", files=files)
    db.query(SCHEMA)
    files.fail("datasync", errno.EIO)
    with pytest.raises(FenecError):
        db.query("put jobs {tag: 'a', n: 1}")
    fsyncs = files.calls["fsync"]
    assert shut_down(db) == 0
    assert files.calls["fsync"] == fsyncs  # never retried, not even on the way out
    err = capsys.readouterr().err
    assert "pushed to disk" not in err and "disk refused a write earlier" in err


def failed_fsync(path: str) -> tuple[Database, int]:
    """A database under `always` whose second write's fsync fails; returns it and the file size
    the last good fsync covered."""
    files = FaultyFiles()
    db = Database(path, sync="always", files=files)
    db.query(SCHEMA)
    db.query("put jobs {tag: 'durable', n: 1}")
    synced = db.storage_stats()["file_bytes"]  # (the file holds preallocated zeros after)
    files.fail("datasync", errno.EIO)
    with pytest.raises(FenecError) as caught:
        db.query("put jobs {tag: 'unknown', n: 2}")
    e = caught.value
    assert e.status == 500 and "outcome is unknown" in e.message and "refused" in e.message
    return db, synced


def test_a_failed_fsync_refuses_later_writes_and_reads_go_on(tmp_path) -> None:
    db, _ = failed_fsync(str(tmp_path / "d.fenec"))
    # The write whose fsync failed stays visible in memory: the server cannot take it back
    # without lying the other way (the OS may well have written it).
    assert tags(db) == ["durable", "unknown"]
    for write in ("put jobs {tag: 'later', n: 3}", "set jobs {n: 9}", "del jobs", "create collection other (a int)"):
        with pytest.raises(FenecError, match="refused") as caught:
            db.query(write)
        assert caught.value.status == 500
    assert db.query("get jobs select n order id") == [{"n": 1}, {"n": 2}]
    assert db.failed and db.stats()["failed"] is True
    db.close()


def test_a_restart_shows_what_the_file_holds_after_a_failed_fsync(tmp_path) -> None:
    path = str(tmp_path / "d.fenec")
    db, synced = failed_fsync(path)
    db.close()
    with open(path, "rb") as f:
        image = f.read()
    # The OS kept the unsynced bytes: the write is there after a restart.
    again = Database(path, sync="always")
    assert tags(again) == ["durable", "unknown"]
    again.query("put jobs {tag: 'after restart', n: 3}")  # a restart takes writes again
    again.close()
    # The OS dropped them (what a failed fsync allows): the write is gone, whole.
    with open(path, "wb") as f:
        f.write(image[:synced])
    again = Database(path, sync="always")
    assert tags(again) == ["durable"]
    again.close()


def test_a_failed_periodic_sync_refuses_the_next_write(tmp_path) -> None:
    files = FaultyFiles()
    db = Database(str(tmp_path / "d.fenec"), sync=5, files=files)
    db.query(SCHEMA)
    files.fail("datasync", errno.EIO)
    db.query("put jobs {tag: 'acked', n: 1}")  # answered before the syncer ran: --sync 5 risks it
    deadline = time.monotonic() + 5
    while not db.failed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert db.failed and "Input/output error" in db.failed
    assert db.stats()["failed"] is True
    with pytest.raises(FenecError, match="refused") as caught:
        db.query("put jobs {tag: 'later', n: 2}")
    assert caught.value.status == 500
    assert tags(db) == ["acked"]
    db.close()
