"""The log file: records round-trip, a torn tail is cut, corruption refuses with its offset."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import fenecdb_server.storage as storage
import fenecdb_server.storage.format as storage_format
import pytest
from conftest import reopen
from fenecdb_server import Database
from fenecdb_server.errors import FenecError
from fenecdb_server.storage import CorruptLog, Log, StorageFailed
from fenecdb_server.storage.files import FaultyFiles
from fenecdb_server.storage.format import FILE_HEADER_SIZE, RECORD_HEADER_SIZE, file_header, record_header
from fenecdb_server.storage.preallocation import PREALLOCATE


def payloads(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    # sizes 0..300, some larger, so cuts land in headers and in long payloads alike
    return [rng.randbytes(rng.choice([0, 1, 5, 40, 300, 5000])) for _ in range(n)]


def write_log(path: str, records: list[bytes], sync: object = "off") -> list[int]:
    """Write `records` through a Log; return the offset where each record starts (and the end)."""
    lg = Log(path, sync=sync)
    assert lg.open() == (None, [])
    starts = []
    for r in records:
        starts.append(lg.stats()["file_bytes"])
        lg.append(r)
    starts.append(lg.stats()["file_bytes"])
    lg.close()
    return starts  # type: ignore[return-value]


def test_public_surface_is_exactly_the_agreed_names() -> None:
    assert sorted(storage.__all__) == ["CorruptLog", "Log", "OsFiles", "StorageFailed", "describe", "parse_policy"]
    for name in storage.__all__:
        assert hasattr(storage, name)
    assert issubclass(StorageFailed, FenecError) and issubclass(CorruptLog, FenecError)


def test_records_come_back_in_order_across_reopens(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    first = payloads(50)
    write_log(path, first)
    lg = Log(path, sync="always")
    snapshot, got = lg.open()
    assert snapshot is None and got == first
    more = [b"one more", b""]
    for r in more:
        lg.wait_durable(lg.append(r))
    lg.close()
    assert reopen(path) == (None, first + more)


def test_a_new_file_starts_with_the_header_only(tmp_path) -> None:
    path = str(tmp_path / "new.fenec")
    assert reopen(path) == (None, [])
    with open(path, "rb") as f:
        assert f.read() == file_header()


def test_record_framing_is_length_crc_and_header_crc(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    write_log(path, [b"abc"])
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"FENECLOG"
    assert data[FILE_HEADER_SIZE:] == record_header(b"abc") + b"abc"
    assert len(data) == FILE_HEADER_SIZE + RECORD_HEADER_SIZE + 3


def cut_points(starts: list[int], rng: random.Random) -> list[int]:
    points = set(starts)
    for a, b in zip(starts, starts[1:], strict=False):
        points.add(a + 1)  # inside the header
        points.add(min(a + RECORD_HEADER_SIZE, b - 1))  # header whole, payload missing
        if b - a > 2:
            points.add(rng.randrange(a + 1, b))  # anywhere inside
    points.update(range(0, FILE_HEADER_SIZE + 1, 5))  # inside the file header
    return sorted(points)


def whole_log(tmp_path) -> tuple[list[bytes], list[int], bytes]:
    """30 records written and closed: (records, where each starts and the end, the file's bytes)."""
    whole = str(tmp_path / "whole.fenec")
    records = payloads(30)
    starts = write_log(whole, records)
    with open(whole, "rb") as f:
        data = f.read()
    assert len(data) == starts[-1]  # closed: no preallocated zeros
    return records, starts, data


def test_every_cut_opens_to_the_records_before_it_and_truncates_there(tmp_path, caplog) -> None:
    records, starts, data = whole_log(tmp_path)
    rng = random.Random(3)
    path = str(tmp_path / "cut.fenec")
    caplog.set_level(logging.WARNING, logger="fenecdb.storage")
    for cut in cut_points(starts, rng):
        with open(path, "wb") as f:
            f.write(data[:cut])
        caplog.clear()
        kept = sum(1 for s in starts[1:] if s <= cut)  # records wholly before the cut
        boundary = starts[kept] if cut >= FILE_HEADER_SIZE else FILE_HEADER_SIZE
        assert reopen(path) == (None, records[:kept]), cut
        assert os.path.getsize(path) == boundary, cut
        if FILE_HEADER_SIZE < cut != boundary and any(data[boundary:cut]):
            # (an empty record's header starts with 8 zero bytes: cut inside them, what is
            # left reads as preallocated zeros, the log's end, and no torn tail is logged)
            assert "torn tail" in caplog.text and f"offset {boundary}" in caplog.text
        # and appending after the cut lands right at the boundary
        lg = Log(path, sync="off")
        lg.open()
        lg.append(b"next")
        lg.close()
        assert reopen(path) == (None, records[:kept] + [b"next"]), cut


def test_zeros_after_the_last_record_are_a_torn_tail(tmp_path) -> None:
    # what a power loss can leave: the file grew, the blocks were never written
    path = str(tmp_path / "db.fenec")
    records = payloads(5)
    write_log(path, records)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b"\x00" * 4096)
    assert reopen(path) == (None, records)
    assert os.path.getsize(path) == size


def test_a_flipped_byte_anywhere_but_the_last_record_refuses_with_its_offset(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    records = [b"alpha", b"", b"a longer payload of the third record", b"delta", b"last"]
    starts = write_log(path, records)
    with open(path, "rb") as f:
        data = f.read()
    for at in range(len(data)):
        bad = bytearray(data)
        bad[at] ^= 0x41
        with open(path, "wb") as f:
            f.write(bad)
        if at < FILE_HEADER_SIZE:
            with pytest.raises(CorruptLog) as caught:
                reopen(path)
            assert caught.value.offset == 0
        elif at < starts[-2]:  # a record with another after it
            which = max(i for i, s in enumerate(starts) if s <= at)
            with pytest.raises(CorruptLog) as caught:
                reopen(path)
            assert caught.value.offset == starts[which], at
            assert f"offset {starts[which]}" in caught.value.message
            assert caught.value.status == 500
            assert os.path.getsize(path) == len(data)  # refused, not cut
        else:  # the last record: indistinguishable from a torn write, cut
            assert reopen(path) == (None, records[:-1]), at


def test_a_bad_record_with_a_valid_record_after_it_is_refused_not_dropped(tmp_path) -> None:
    # zeros where a record was (a block the OS never wrote) with a whole record after it:
    # cutting there would drop a valid record, so opening refuses
    path = str(tmp_path / "db.fenec")
    starts = write_log(path, [b"a" * 30, b"b" * 30, b"c" * 30])
    with open(path, "r+b") as f:
        f.seek(starts[1])
        f.write(b"\x00" * (starts[2] - starts[1]))
    with pytest.raises(CorruptLog, match=f"offset {starts[1]}.*valid record follows at {starts[2]}"):
        reopen(path)


def test_garbage_with_no_valid_record_after_a_bad_record_is_a_torn_tail(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    starts = write_log(path, [b"x" * 100, b"y" * 100])
    with open(path, "r+b") as f:
        f.seek(starts[1] + 3)
        f.write(b"garbage where the header and payload of the last record were being written")
    assert reopen(path) == (None, [b"x" * 100])
    assert os.path.getsize(path) == starts[1]


def test_not_a_log_file_is_refused(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    with open(path, "wb") as f:
        f.write(b"SQLite format 3\x00" + b"\x01" * 100)
    with pytest.raises(CorruptLog, match="not a FenecDB data file"):
        reopen(path)
    with open(path, "wb") as f:
        f.write(b"hello")
    with pytest.raises(CorruptLog, match="offset 0"):
        reopen(path)


def test_a_newer_format_version_is_refused(tmp_path) -> None:
    import struct
    import zlib

    start = b"FENECLOG" + struct.pack("<I", 9)
    path = str(tmp_path / "db.fenec")
    with open(path, "wb") as f:
        f.write(start + struct.pack("<I", zlib.crc32(start)))
    with pytest.raises(CorruptLog, match="version 9"):
        reopen(path)


def test_a_snapshot_record_after_the_first_record_is_corruption(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    with open(path, "wb") as f:
        f.write(file_header() + record_header(b"w") + b"w" + record_header(b"s", snapshot=True) + b"s")
    with pytest.raises(CorruptLog, match="snapshot"):
        reopen(path)


def test_a_second_opener_is_refused_while_the_first_holds_the_file(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    first = Log(path, sync="off")
    first.open()
    with pytest.raises(FenecError, match="in use by another process"):
        Log(path, sync="off").open()
    first.close()
    assert reopen(path) == (None, [])


def test_a_closed_log_refuses_appends(tmp_path) -> None:
    lg = Log(str(tmp_path / "db.fenec"), sync="off")
    lg.open()
    assert lg.close() is False
    with pytest.raises(StorageFailed, match="refused"):
        lg.append(b"late")


@pytest.mark.parametrize("bad", ["sometimes", "0", 0, -5, "", True, 2.5])
def test_a_bad_sync_policy_is_refused(tmp_path, bad: object) -> None:
    with pytest.raises(ValueError, match="--sync expects off, always or <ms>"):
        Log(str(tmp_path / "db.fenec"), sync=bad)


@pytest.mark.parametrize(("given", "policy"), [("always", "always"), ("on", "always"), ("off", "off"),
                                               ("none", "off"), ("250", 250), (40, 40)])
def test_sync_policy_spellings(given: object, policy: object) -> None:
    assert storage.parse_policy(given) == policy


# -- preallocation: the zeros after the records, and records torn inside them ---------------


def crashed(path: str, records: list[bytes]) -> int:
    """Write `records` under `always` through a preallocating log, then "die" (no close, so no
    trim): the file keeps its preallocated zeros. Answer where the records end."""
    files = FaultyFiles()
    lg = Log(path, sync="always", files=files)
    lg.open()
    for r in records:
        lg.wait_durable(lg.append(r))
    end = lg.stats()["file_bytes"]
    files.release()
    return int(end)


def test_a_file_is_preallocated_and_a_clean_close_trims_it(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    lg = Log(path, sync="always")
    lg.open()
    lg.wait_durable(lg.append(b"one"))
    assert os.path.getsize(path) == PREALLOCATE  # reserved ahead: the append did not grow it
    for i in range(400):  # 4.4 MB more: the next step is reserved as the first runs out
        lg.append(b"%d" % i + bytes(11_000))
    assert os.path.getsize(path) == 2 * PREALLOCATE
    end = lg.stats()["file_bytes"]
    lg.close()
    assert os.path.getsize(path) == end  # a closed file is its records alone
    assert reopen(path)[1][0] == b"one"


def test_zeros_after_the_records_are_the_end_kept_and_appended_into(tmp_path, caplog) -> None:
    path = str(tmp_path / "db.fenec")
    records = payloads(20)
    end = crashed(path, records)
    size = os.path.getsize(path)
    assert size == PREALLOCATE and end < size
    caplog.set_level(logging.WARNING, logger="fenecdb.storage")
    files = FaultyFiles()
    lg = Log(path, sync="always", files=files)
    assert lg.open() == (None, records)
    assert "torn tail" not in caplog.text and files.calls["truncate"] == 0
    assert os.path.getsize(path) == size  # the zeros are kept, no new step reserved
    lg.wait_durable(lg.append(b"next"))
    assert files.calls["allocate"] == 0 and lg.stats()["file_bytes"] == end + RECORD_HEADER_SIZE + 4
    files.release()
    assert reopen(path) == (None, records + [b"next"])


def test_a_record_torn_at_any_byte_inside_the_preallocated_zeros_is_cut(tmp_path, caplog) -> None:
    # the last write reached the disk up to some byte, the rest of the region is still zeros
    records, starts, data = whole_log(tmp_path)
    rng = random.Random(5)
    path = str(tmp_path / "torn.fenec")
    caplog.set_level(logging.WARNING, logger="fenecdb.storage")
    for cut in [c for c in cut_points(starts, rng) if c > FILE_HEADER_SIZE]:
        with open(path, "wb") as f:
            f.write(data[:cut] + bytes(PREALLOCATE - cut))
        caplog.clear()
        kept = sum(1 for s in starts[1:] if s <= cut)
        boundary = starts[kept]
        assert reopen(path) == (None, records[:kept]), cut
        if any(data[boundary:cut]):
            assert f"torn tail of {PREALLOCATE - boundary} bytes at offset {boundary}" in caplog.text, cut
        else:
            assert "torn tail" not in caplog.text  # nothing but zeros there: the end
        with open(path, "rb") as f:
            after = f.read()
        assert after[:boundary] == data[:boundary] and not any(after[boundary:])


def test_a_header_whose_payload_is_still_zeros_is_a_torn_tail(tmp_path, caplog) -> None:
    path = str(tmp_path / "db.fenec")
    end = crashed(path, [b"acknowledged"])
    lost = b"in flight at the crash"
    with open(path, "r+b") as f:  # the header reached the disk, the payload's block did not
        f.seek(end)
        f.write(record_header(lost))
    caplog.set_level(logging.WARNING, logger="fenecdb.storage")
    assert reopen(path) == (None, [b"acknowledged"])
    assert f"at offset {end}" in caplog.text and "payload fails its check" in caplog.text
    assert os.path.getsize(path) == end


def test_garbage_after_the_zeros_is_a_torn_tail_but_a_record_there_refuses(tmp_path, caplog) -> None:
    path = str(tmp_path / "db.fenec")
    end = crashed(path, [b"a", b"b"])
    with open(path, "r+b") as f:
        f.seek(end + 100_000)
        f.write(b"\x13\x37 not a record \xff" * 3)
    caplog.set_level(logging.WARNING, logger="fenecdb.storage")
    assert reopen(path) == (None, [b"a", b"b"])
    assert f"at offset {end} (zeros, then bytes that hold no valid record)" in caplog.text
    # a whole valid record past the zeros: a write would be dropped, so the file is refused
    end = crashed(path, [b"a", b"b"])
    with open(path, "r+b") as f:
        f.seek(end + 100_000)
        f.write(record_header(b"c") + b"c")
    with pytest.raises(CorruptLog) as caught:
        reopen(path)
    assert caught.value.offset == end and f"valid record follows at {end + 100_000}" in caught.value.message


@pytest.mark.sources  # replaces a function of format.py, which is compiled
def test_megabytes_of_zeros_are_skipped_not_searched_byte_by_byte(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "db.fenec")
    end = crashed(path, [b"a"])
    with open(path, "r+b") as f:  # garbage at the very end: the search crosses all the zeros
        f.seek(PREALLOCATE - 40)
        f.write(b"\x01" * 40)
    tried = []
    real = storage_format.valid_record_at
    monkeypatch.setattr(storage_format, "valid_record_at", lambda *a: tried.append(a[2]) or real(*a))
    assert reopen(path) == (None, [b"a"])
    assert 0 < len(tried) <= 60, len(tried)  # the 40 nonzero bytes and the 11 before, not 4 MB
    assert os.path.getsize(path) == end


def test_a_file_written_by_the_server_before_preallocation_opens(tmp_path) -> None:
    # made by the previous release's storage code: file header, a snapshot record (a
    # compaction ran), write records after it, no zeros
    fixture = Path(__file__).parent / "fixtures" / "before-preallocation.fenec"
    path = tmp_path / "old.fenec"
    path.write_bytes(fixture.read_bytes())
    db = Database(str(path), sync="always")
    try:
        assert db.query("get jobs select tag, n order id") == [
            {"tag": "kept", "n": 2}, {"tag": "after the compaction", "n": 1}, {"tag": "last", "n": 3}]
        db.query("put jobs {tag: 'new', n: 4}")
    finally:
        db.close()
    again = Database(str(path), sync="always")
    try:
        assert again.query("get jobs count") == [{"count": 4}]
    finally:
        again.close()
