"""Compaction: the file becomes its snapshot plus every record written since the mark, while
writes go on; the swap holds the log's lock only briefly."""

from __future__ import annotations

import os
import threading

import pytest
from conftest import reopen
from fenecdb_server.errors import FenecError
from fenecdb_server.storage import Log
from fenecdb_server.storage.files import FaultyFiles


def test_compaction_keeps_the_snapshot_and_the_records_after_the_mark(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg = Log(path, sync="always")
    lg.open()
    for i in range(200):
        lg.append(b"job %d claimed again and again" % (i % 5))
    mark = lg.compaction_start()
    lg.append(b"after the mark")
    before = lg.stats()["file_bytes"]
    result = lg.compaction_finish(b"five live jobs", mark)
    assert result["bytes_before"] == before
    assert result["bytes_after"] == lg.stats()["file_bytes"] < before // 10
    # the new file is preallocated too: zeros after its records, a step of the log's size
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == lg.preallocate and not any(data[result["bytes_after"]:])
    lg.wait_durable(lg.append(b"after the swap"))
    stats = lg.stats()
    assert stats["records"] == 2
    lg.close()
    assert stats["file_bytes"] == os.path.getsize(path)  # a clean close trims the zeros
    assert reopen(path) == (b"five live jobs", [b"after the mark", b"after the swap"])


def test_a_snapshot_given_in_parts_is_written_as_the_one_they_make(tmp_path) -> None:
    # records.encode_snapshot hands over its parts unjoined; they are written a MiB at a time
    # (blocks that cut across parts), the header's length and crc32 those of the whole
    parts = [b"{", os.urandom(700_000), b"", os.urandom(900_000), b"x" * 5, os.urandom(1_500_000), b"}"]
    whole = b"".join(parts)
    for i, snapshot in enumerate([parts, whole]):
        path = str(tmp_path / f"db{i}.fenec")
        lg = Log(path, sync="off")
        lg.open()
        lg.append(b"dead")
        mark = lg.compaction_start()
        lg.append(b"after the mark")
        lg.compaction_finish(snapshot, mark)
        lg.close()
        assert reopen(path) == (whole, [b"after the mark"])
    with open(tmp_path / "db0.fenec", "rb") as a, open(tmp_path / "db1.fenec", "rb") as b:
        assert a.read() == b.read()


def test_a_second_compaction_replaces_the_first_snapshot(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg = Log(path, sync="off")
    lg.open()
    lg.append(b"a")
    lg.compaction_finish(b"S1", lg.compaction_start())
    lg.append(b"b")
    lg.compaction_finish(b"S2", lg.compaction_start())
    lg.append(b"c")
    lg.close()
    assert reopen(path) == (b"S2", [b"c"])


def test_only_one_compaction_at_a_time(tmp_path) -> None:
    lg = Log(str(tmp_path / "db.fenec"), sync="off")
    lg.open()
    mark = lg.compaction_start()
    with pytest.raises(FenecError, match="already running"):
        lg.compaction_start()
    lg.compaction_cancel()
    lg.compaction_finish(b"S", lg.compaction_start())
    assert mark is not None
    lg.close()


def test_writes_during_a_compaction_all_survive_in_order(tmp_path) -> None:
    # more than the 1 MiB catch-up threshold arrives while the side file is written
    path = str(tmp_path / "db.fenec")
    files = FaultyFiles()
    lg = Log(path, sync="always", files=files)
    lg.open()
    for i in range(100):
        lg.append(b"old %d" % i)
    write_lock = threading.Lock()
    with write_lock:
        mark = lg.compaction_start()
    stop = threading.Event()
    written: list[bytes] = []

    def writer() -> None:
        i = 0
        while not stop.is_set() or i < 50:
            payload = b"new %06d " % i + b"x" * 2000
            with write_lock:
                ticket = lg.append(payload)
                written.append(payload)
            lg.wait_durable(ticket)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    while len(written) < 600:  # about 1.2 MB after the mark before the side file starts
        threading.Event().wait(0.001)
    result = lg.compaction_finish(b"the snapshot", mark)
    stop.set()
    t.join()
    lg.close()
    snapshot, records = reopen(path)
    assert snapshot == b"the snapshot"
    assert records == written
    assert result["lock_us"] < 1_000_000


def test_a_leftover_side_file_is_removed_at_open(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    reopen(path)
    with open(path + ".compact", "wb") as f:
        f.write(b"half a compaction")
    assert reopen(path) == (None, [])
    assert not os.path.exists(path + ".compact")


class PausedCompaction(FaultyFiles):
    """Holds a compaction at its side file's first fsync (step 3) until told to go on."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go_on = threading.Event()

    def fsync(self, fd: int) -> None:
        if self._path(fd).endswith(".compact") and not self.entered.is_set():
            self.entered.set()
            self.go_on.wait(30)
        super().fsync(fd)


def test_a_second_server_refused_the_file_leaves_the_running_compaction_alone(tmp_path) -> None:
    """Issue 40, item 7: a second server on a file in use was refused, but deleted the side file
    first: the running server's compaction then failed (`No such file or directory`)."""
    from fenecdb_server import Database

    path = str(tmp_path / "db.fenec")
    files = PausedCompaction()
    db = Database(path, sync="always", files=files)
    db.query("create collection jobs (n int)")
    db.query("put jobs $1", [[{"n": i} for i in range(100)]])
    db.query("del jobs where n >= 50")
    done: list[dict] = []
    running = threading.Thread(target=lambda: done.append(db.compact()))
    running.start()
    assert files.entered.wait(30)  # the side file is written, not yet renamed over the file
    with pytest.raises(FenecError, match="in use"):
        Database(path)
    assert os.path.exists(path + ".compact")  # the refused one touched nothing
    files.go_on.set()
    running.join(30)
    assert done and done[0]["bytes_after"] < done[0]["bytes_before"], done
    assert not os.path.exists(path + ".compact")
    db.query("put jobs {n: 100}")
    db.close()
    again = Database(path)
    assert again.query("get jobs count") == [{"count": 51}]
    again.close()
