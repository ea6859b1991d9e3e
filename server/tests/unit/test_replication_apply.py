"""The replica's side of the stream, against a stand-in primary on a socket (replication/follower.py):
the records a primary's sync sends together are applied in order, a record cut across two reads
included, with one write and one wait for the disk per block rather than per record; a damaged record is
never applied, nor anything after it, and the stream is asked for again from the change before it; a
record that fails to apply has its replica ask for a whole image, which replaces what it held."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fenecdb_server import Database
from fenecdb_server.replication.feed import KEEPALIVE, Feed
from fenecdb_server.replication.follower import APPLY_MOST, Follower
from fenecdb_server.replication.identity import Identity
from fenecdb_server.storage.files import OsFiles
from fenecdb_server.storage.format import MAX_PAYLOAD, file_header, record_header

DEADLINE_S = 30.0
HISTORY = "ab" * 16


def primary_records(path: Path, writes: int) -> list[tuple[int, bytes]]:
    """The records of a primary's life, all on its disk, as its feed sends them: a collection,
    `writes` puts, then claims of ten; each record's change number and frame, checked as a replica
    checks it."""
    db = Database(str(path), sync="off")
    feed = Feed(db, 1 << 24)
    feed.attach()
    db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text)")
    for n in range(writes):
        db.query("put jobs {payload: $1, run_at: now()}", [{"n": n}])
    for n in range(writes // 10):
        db.query("set jobs {owner: $1, run_at: now() + 30000} where run_at <= now() order run_at limit 10",
                 [f"w{n}"])
    db.log.sync()
    got = feed.durable_frames(0, most=1 << 20)
    db.close()
    assert got is not None
    out = []
    stream = got[1]
    at = 0
    while at < len(stream):
        word, crc, hcrc = struct.unpack_from("<III", stream, at)
        assert zlib.crc32(stream[at:at + 8]) == hcrc
        payload = stream[at + 12:at + 12 + (word & MAX_PAYLOAD)]
        assert zlib.crc32(payload) == crc
        out.append((json.loads(payload)["s"], stream[at:at + 12 + len(payload)]))
        at += 12 + len(payload)
    assert out[-1][0] == got[0] == writes + writes // 10 + 1
    return out


def frames(records: list[tuple[int, bytes]]) -> bytes:
    return b"".join(frame for _, frame in records)


class StandIn:
    """A primary's `GET /_replication` on a socket: `pieces` written on the first connection, `later`
    on a later one (nothing past the file's header unless given); each is then held open (a stream
    with nothing more to send). `asked`: the request lines."""

    def __init__(self, pieces: list[bytes], later: list[bytes] | None = None) -> None:
        self.pieces = pieces
        self.later = later or [file_header()]
        self.asked: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            head = b""
            while b"\r\n\r\n" not in head:
                got = conn.recv(4096)
                if not got:
                    break
                head += got
            self.asked.append(head.split(b"\r\n", 1)[0].decode())
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
                         b"fenec-history: " + HISTORY.encode() + b"\r\nfenec-seq: 1\r\n\r\n")
            for piece in self.pieces if len(self.asked) == 1 else self.later:
                conn.sendall(piece)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


class Counted(OsFiles):
    """The replica's file calls, its writes counted."""

    def __init__(self) -> None:
        self.writes = 0

    def writev(self, fd: int, buffers: Sequence[bytes], offset: int) -> int:  # type: ignore[override]
        self.writes += 1
        return os.pwritev(fd, buffers, offset)


def wait_for(what: str, check: Any) -> None:
    end = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"waited {DEADLINE_S} s for {what}")
        time.sleep(0.01)


def follow(path: Path, stand_in: StandIn) -> tuple[Database, Follower, Counted]:
    counted = Counted()
    db = Database(str(path), sync="always", files=counted)  # an async replica under --sync always
    follower = Follower(db, Identity(str(path)), f"http://127.0.0.1:{stand_in.port}", "token")
    follower.start()
    return db, follower, counted


def test_a_block_of_records_is_applied_in_order_with_one_wait_for_the_disk_per_block(tmp_path: Path) -> None:
    got = primary_records(tmp_path / "p.fenec", 600)
    stream = file_header() + frames(got)
    cut = len(stream) // 2 + 5  # inside a record, most likely: the rest of it comes with the next read
    stand_in = StandIn([stream[:cut], stream[cut:] + KEEPALIVE])
    db, follower, counted = follow(tmp_path / "r.fenec", stand_in)
    try:
        last = got[-1][0]
        wait_for("the replica to apply every record", lambda: db.seq == last)
        rows = db.query("get jobs")
        assert len(rows) == 600 and all(r.get("owner") for r in rows)
        assert db.log.appended == len(got)  # each record on the replica's own disk
        # one write per APPLY_MOST records at most (a record at a time: one each)
        most = len(got) // APPLY_MOST + 4
        assert counted.writes <= most, (counted.writes, len(got))
        # --sync always: what was written is synced, by an fdatasync a block at most
        wait_for("the replica's disk to hold it", lambda: db.log.durable == db.log.appended)
        assert 1 <= db.log.fsyncs <= most, (db.log.fsyncs, len(got))
        assert stand_in.asked == ["GET /_replication?since=0&history= HTTP/1.1"]
    finally:
        follower.stop()
        stand_in.close()
        db.close()
    again = Database(str(tmp_path / "r.fenec"))  # the replica's file holds what it applied
    try:
        assert again.seq == last
    finally:
        again.close()


def test_a_damaged_record_is_never_applied_and_the_stream_is_asked_again_from_before_it(tmp_path: Path) -> None:
    got = primary_records(tmp_path / "p.fenec", 200)
    bad = 150
    damaged = bytearray(frames(got[bad:bad + 1]))
    damaged[-1] ^= 0xFF  # the payload's last byte: its CRC-32 no longer matches
    stream = file_header() + frames(got[:bad]) + bytes(damaged) + frames(got[bad + 1:])
    stand_in = StandIn([stream])
    db, follower, _ = follow(tmp_path / "r.fenec", stand_in)
    try:
        wait_for("the follower to ask again", lambda: len(stand_in.asked) >= 2)
        before = got[bad - 1][0]
        assert stand_in.asked[1] == f"GET /_replication?since={before}&history={HISTORY} HTTP/1.1"
        assert db.seq == before
    finally:
        follower.stop()
        stand_in.close()
        db.close()


def test_a_record_that_fails_to_apply_has_the_replica_asked_anew_for_a_whole_image(tmp_path: Path) -> None:
    """A record the replica cannot apply (here one that names no collection it has: never on a
    primary's stream) leaves its memory off the primary's line. It is not skipped: the replica
    forgets its history, saved so that a restart asks the same, and asks again with none, which
    a primary answers with an image; the image replaces what it held, in memory and in its file."""
    got = primary_records(tmp_path / "p.fenec", 100)
    last = got[-1][0]
    bad = b'{"s":%d,"o":[["p","nowhere",1,{"n":1}]]}' % (got[49][0] + 1)
    stream = file_header() + frames(got[:50]) + record_header(bad) + bad + frames(got[50:])
    primary = Database(str(tmp_path / "p.fenec"))
    try:
        _seq, _size, backup = primary.backup_file()  # what a primary's stream sends as an image (send_image)
        with backup:
            image = backup.read()
        want = primary.query("get jobs")
    finally:
        primary.close()
    assert image.startswith(file_header())
    stand_in = StandIn([stream], [image])
    path = tmp_path / "r.fenec"
    db, follower, _ = follow(path, stand_in)
    try:
        wait_for("the follower to ask again", lambda: len(stand_in.asked) >= 2)
        assert stand_in.asked[1].startswith("GET /_replication?since=") and "&history= HTTP/1.1" in stand_in.asked[1]
        assert Identity(str(path)).history == ""  # a restart now would ask for an image too
        wait_for("the image to replace the replica's state", lambda: db.seq == last)
        assert db.query("get jobs") == want
    finally:
        follower.stop()
        stand_in.close()
        db.close()
    again = Database(str(path))  # its file is the image's
    try:
        assert again.seq == last and again.query("get jobs") == want
    finally:
        again.close()


def test_a_compaction_while_records_are_written_and_not_replayed_loses_none(tmp_path: Path) -> None:
    """A replica's records are in its file before its memory holds them (`Database.ahead`): a
    compaction then (its snapshot is of the memory) keeps them after the snapshot, and a replay after
    the compaction's swap, or none at all (a crash), leaves them in the file."""
    got = primary_records(tmp_path / "p.fenec", 100)
    first, rest = got[:60], got[60:]
    db = Database(str(tmp_path / "r.fenec"), sync="always")
    try:
        db.ahead.append(frames(first), [frame[12:] for _, frame in first])
        assert db.ahead.apply(1000) == 60 and db.seq == got[59][0]
        db.ahead.append(frames(rest), [frame[12:] for _, frame in rest])
        assert db.ahead.waiting == len(rest) and db.seq == got[59][0]
        done = db.compact()
        assert done["bytes_after"] < done["bytes_before"]
        assert db.ahead.apply(1000) == len(rest) and db.seq == got[-1][0]
        last = b'{"s":%d,"o":[]}' % (got[-1][0] + 1)
        db.ahead.append(record_header(last) + last, [last])  # written, and never replayed here
        db.compact()
        answer = db.query("get jobs")
    finally:
        db.close()
    again = Database(str(tmp_path / "r.fenec"))
    try:
        assert again.seq == got[-1][0] + 1
        assert again.query("get jobs") == answer
    finally:
        again.close()
