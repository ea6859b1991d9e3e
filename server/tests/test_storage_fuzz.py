"""Hypothesis over the log reader: whatever the bytes, it raises nothing but CorruptLog, and
what it returns from a damaged copy of a log is always a prefix of what was written."""

from __future__ import annotations

import os

from fenecdb_server.storage import CorruptLog, Log
from fenecdb_server.storage.format import FILE_HEADER_SIZE, file_header, record_header, scan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

payload_lists = st.lists(st.binary(max_size=80), max_size=12)


def image(records: list[bytes], snapshot: bytes | None = None) -> bytes:
    out = [file_header()]
    if snapshot is not None:
        out += [record_header(snapshot, snapshot=True), snapshot]
    for r in records:
        out += [record_header(r), r]
    return b"".join(out)


def read(data: bytes):
    try:
        return scan(data)
    except CorruptLog as error:
        assert 0 <= error.offset <= len(data)
        assert f"offset {error.offset}" in error.message
        return None


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_corrupt_log(data: bytes) -> None:
    read(data)
    read(file_header() + data)  # past the file header, into the record reader


@settings(max_examples=300, deadline=None)
@given(payload_lists, st.one_of(st.none(), st.binary(max_size=50)))
def test_a_whole_log_reads_back_exactly(records: list[bytes], snapshot: bytes | None) -> None:
    data = image(records, snapshot)
    found = scan(data)
    assert (found.snapshot, found.records, found.end, found.torn) == (snapshot, records, len(data), None)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("zero"), st.integers(0, 10_000), st.integers(1, 64)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=40), st.just(0)),
)


def mutate(data: bytes, steps: list[tuple]) -> bytes:
    buf = bytearray(data)
    for kind, a, b in steps:
        if kind == "append":
            buf += a
        elif not buf:
            continue
        elif kind == "flip":
            buf[a % len(buf)] ^= b
        elif kind == "cut":
            del buf[a % (len(buf) + 1):]
        elif kind == "zero":
            at = a % len(buf)
            buf[at : at + b] = bytes(len(buf[at : at + b]))
    return bytes(buf)


@settings(max_examples=500, deadline=None)
@given(payload_lists, st.lists(mutation, min_size=1, max_size=4))
def test_a_damaged_log_reads_as_a_prefix_or_refuses(records: list[bytes], steps: list[tuple]) -> None:
    data = mutate(image(records), steps)
    found = read(data)
    if found is not None:
        assert found.records == records[: len(found.records)]
        assert found.snapshot is None
        assert found.end <= len(data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload_lists, st.lists(mutation, min_size=1, max_size=3))
def test_opening_a_damaged_file_cuts_or_refuses_and_stays_openable(tmp_path, records, steps) -> None:
    path = str(tmp_path / "fuzz.fenec")
    with open(path, "wb") as f:
        f.write(mutate(image(records), steps))
    lg = Log(path, sync="off")
    try:
        _, got = lg.open()
    except CorruptLog:
        return
    lg.close()
    assert got == records[: len(got)]
    size = os.path.getsize(path)
    assert size >= FILE_HEADER_SIZE
    again = Log(path, sync="off")  # a cut file opens clean the second time, to the same records
    assert again.open() == (None, got)
    again.close()
    assert os.path.getsize(path) == size


@settings(max_examples=300, deadline=None)
@given(payload_lists, st.integers(0, 10_000), st.integers(0, 300), st.binary(max_size=30))
def test_a_write_torn_inside_preallocated_zeros_reads_as_exactly_the_records_before_it(
        records: list[bytes], where: int, zeros: int, garbage: bytes) -> None:
    # a preallocated file whose last write was cut at any byte: the rest is still zeros, and
    # maybe bytes of something after them; never a record, never a reason to refuse
    data = image(records)
    cut = FILE_HEADER_SIZE + where % (len(data) - FILE_HEADER_SIZE + 1)
    torn = data[:cut] + bytes(len(data) - cut + zeros) + garbage
    found = scan(torn)
    starts = [FILE_HEADER_SIZE]
    for r in records:
        starts.append(starts[-1] + 12 + len(r))
    # bytes the write had put that were zeros anyway are not lost: a record whose cut-off tail was
    # all zeros is whole in the torn file (its checksum says so)
    whole = cut
    while whole < len(data) and data[whole] == 0:
        whole += 1
    kept = sum(1 for s in starts[1:] if s <= whole)
    assert found.records == records[:kept] and found.end == starts[kept]
    rest = torn[found.end:]
    assert (found.torn is None) == (not any(rest))  # zeros alone: the end, not a torn tail
    if found.torn is None:
        assert found.zeros == len(rest)
