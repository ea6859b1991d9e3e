"""Fault injection through the swappable file layer: a full disk, a failing fsync, crashes
in the middle of a compaction. Each checks what a user relies on: a refused write is 500,
every later write is refused, a failed fsync is never retried, the file stays whole."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from conftest import reopen
from fenecdb_server.errors import FenecError
from fenecdb_server.storage import Log, StorageFailed
from fenecdb_server.storage.files import FaultyFiles, SimulatedCrash


def open_log(path: str, sync: object = "always") -> tuple[Log, FaultyFiles, list[bytes]]:
    files = FaultyFiles()
    lg = Log(path, sync=sync, files=files)
    _, records = lg.open()
    return lg, files, records


def crash(lg: Log, files: FaultyFiles) -> None:
    """The process dies: no close, no final fsync; the kernel closes its descriptors."""
    if lg._syncer is not None:
        lg._syncer.stop()
    files.release()


def test_enospc_on_append_is_500_and_every_later_write_is_refused(tmp_path, caplog) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, _ = open_log(path)
    lg.wait_durable(lg.append(b"before"))
    files.fail("writev", errno.ENOSPC)
    with pytest.raises(StorageFailed) as first:
        lg.append(b"does not fit")
    assert first.value.status == 500 and first.value.kind == "io"
    assert "No space left on device" in first.value.message and "refused" in first.value.message
    assert lg.failed and lg.stats()["failed"] is True
    assert "sync error:" in caplog.text
    writes = files.calls["writev"]
    for _ in range(3):  # the disk has room again; the log still refuses, without trying
        with pytest.raises(StorageFailed, match="refused"):
            lg.append(b"after")
    assert files.calls["writev"] == writes
    with pytest.raises(StorageFailed, match="refused"):
        lg.compaction_start()
    lg.close()
    assert reopen(path) == (None, [b"before"])  # a restart takes writes again


def test_a_short_write_then_enospc_leaves_a_torn_tail_that_the_next_open_cuts(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, _ = open_log(path)
    lg.wait_durable(lg.append(b"kept"))
    size = lg.stats()["file_bytes"]
    files.fail("writev", errno.ENOSPC, partial=True)  # half the record reaches the file
    with pytest.raises(StorageFailed):
        lg.append(b"x" * 1000)
    with open(path, "rb") as f:
        assert any(f.read()[size:])  # in the preallocated region
    lg.close()
    assert reopen(path) == (None, [b"kept"])
    assert os.path.getsize(path) == size


def test_eio_on_fsync_fails_the_waiter_and_is_never_retried(tmp_path, caplog) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, _ = open_log(path)
    lg.wait_durable(lg.append(b"durable"))
    fsyncs = files.calls["datasync"]
    ticket = lg.append(b"written, never confirmed")
    files.fail("datasync", errno.EIO)
    with pytest.raises(StorageFailed) as caught:
        lg.wait_durable(ticket)
    assert caught.value.status == 500 and "Input/output error" in caught.value.message
    assert "refused" in caught.value.message
    assert files.calls["datasync"] == fsyncs + 1
    with pytest.raises(StorageFailed, match="refused"):  # the same waiter again: no retry
        lg.wait_durable(ticket)
    with pytest.raises(StorageFailed, match="refused"):
        lg.append(b"later")
    assert lg.sync() is False and lg.close() is True  # dirty, but no second fsync at close
    assert files.calls["datasync"] == fsyncs + 1 and files.calls["fsync"] == 1  # (open's)
    assert "sync error: fsync failed" in caplog.text


def test_eio_in_the_periodic_syncer_stops_writes(tmp_path) -> None:
    import time

    path = str(tmp_path / "db.fenec")
    lg, files, _ = open_log(path, sync=10)
    files.fail("datasync", errno.EIO)
    lg.wait_durable(lg.append(b"acknowledged at once"))
    deadline = time.monotonic() + 5
    while not lg.failed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lg.failed
    with pytest.raises(StorageFailed, match="refused"):
        lg.append(b"later")
    fsyncs = files.calls["datasync"]
    time.sleep(0.05)  # the syncer never retries
    assert files.calls["datasync"] == fsyncs
    lg.close()


def compacting(path: str, records: int = 20) -> tuple[Log, FaultyFiles, list[bytes], tuple[int, int]]:
    lg, files, _ = open_log(path)
    written = [f"record {i}".encode() for i in range(records)]
    for r in written:
        lg.append(r)
    mark = lg.compaction_start()
    return lg, files, written, mark


@pytest.mark.parametrize(
    ("op", "where"),
    [
        ("writev", ".compact"),  # mid side file (half the bytes written)
        ("fsync", ".compact"),  # the side file written, not yet synced
        ("rename", ".compact"),  # between the snapshot's fsync and the rename
    ],
)
def test_a_crash_before_the_rename_leaves_the_old_file_whole(tmp_path, caplog, op: str, where: str) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, written, mark = compacting(path)
    files.crash(op, path_endswith=where, partial=True)
    with pytest.raises(SimulatedCrash):
        lg.compaction_finish(b"SNAPSHOT of 20 records", mark)
    crash(lg, files)
    assert os.path.exists(path + ".compact")  # the dead process left its side file
    caplog.set_level(logging.WARNING, logger="fenecdb.storage")
    assert reopen(path) == (None, written)
    assert not os.path.exists(path + ".compact")
    assert "interrupted compaction" in caplog.text


def test_a_crash_after_the_rename_leaves_the_new_file_whole(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, written, mark = compacting(path)
    lg.append(b"written during the compaction")
    files.crash("fsync_dir")
    with pytest.raises(SimulatedCrash):
        lg.compaction_finish(b"SNAPSHOT", mark)
    crash(lg, files)
    assert reopen(path) == (b"SNAPSHOT", [b"written during the compaction"])


def test_a_failed_side_file_fsync_leaves_the_log_working(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, written, mark = compacting(path)
    files.fail("fsync", errno.EIO, path_endswith=".compact")
    with pytest.raises(FenecError, match="compaction failed, the data file is unchanged") as caught:
        lg.compaction_finish(b"SNAPSHOT", mark)
    assert caught.value.status == 500
    assert not lg.failed and not os.path.exists(path + ".compact")
    lg.wait_durable(lg.append(b"still taking writes"))
    again = lg.compaction_start()  # and a later compaction may run
    lg.compaction_finish(b"SNAPSHOT 2", again)
    lg.close()
    assert reopen(path) == (b"SNAPSHOT 2", [])


def test_enospc_while_writing_the_side_file_leaves_the_log_working(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, written, mark = compacting(path)
    files.fail("writev", errno.ENOSPC, path_endswith=".compact")
    with pytest.raises(FenecError, match="No space left"):
        lg.compaction_finish(b"S" * 10_000, mark)
    assert not lg.failed
    lg.append(b"after")
    lg.close()
    assert reopen(path) == (None, written + [b"after"])


def test_a_failed_directory_fsync_after_the_rename_stops_writes(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, written, mark = compacting(path)
    files.fail("fsync_dir", errno.EIO)
    with pytest.raises(StorageFailed, match="refused"):
        lg.compaction_finish(b"SNAPSHOT", mark)
    assert lg.failed
    with pytest.raises(StorageFailed, match="refused"):
        lg.append(b"later")
    lg.close()
    assert reopen(path) == (b"SNAPSHOT", [])


def test_a_crash_while_creating_the_file_is_recovered(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    files = FaultyFiles()
    files.crash("writev", partial=True)
    with pytest.raises(SimulatedCrash):
        Log(path, sync="always", files=files).open()
    files.release()
    assert 0 < os.path.getsize(path) < 16
    assert reopen(path) == (None, [])
    assert os.path.getsize(path) == 16


@pytest.mark.parametrize("error", [errno.EOPNOTSUPP, errno.ENOSPC])
def test_a_file_system_that_cannot_preallocate_grows_the_file_per_append(tmp_path, caplog, error: int) -> None:
    path = str(tmp_path / "db.fenec")
    lg, files, _ = open_log(path)
    files.fail("allocate", error)
    lg.wait_durable(lg.append(b"first"))
    assert not lg.failed and "not preallocating" in caplog.text
    for i in range(5):
        lg.wait_durable(lg.append(b"more %d" % i))
    assert files.calls["allocate"] == 1  # asked once, not again at every append
    assert os.path.getsize(path) == lg.stats()["file_bytes"]  # each append grew the file
    # a compaction's new file is not preallocated either, and the log goes on
    lg.compaction_finish(b"snapshot", lg.compaction_start())
    lg.wait_durable(lg.append(b"after"))
    assert files.calls["allocate"] == 1 and os.path.getsize(path) == lg.stats()["file_bytes"]
    lg.close()
    assert reopen(path) == (b"snapshot", [b"after"])
