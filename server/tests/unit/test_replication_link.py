"""The replica's side of a sync replica against a stand-in primary (a socket in this test): the stream
is read off its socket whatever its chunks' splits, records that come together are made durable by one
fdatasync and told by one ack, and an ack connection the primary closed is replaced (replication/link.py,
follower.py)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from fenecdb_server import Database
from fenecdb_server.replication.feed import KEEPALIVE
from fenecdb_server.replication.follower import Follower
from fenecdb_server.replication.identity import Identity
from fenecdb_server.replication.link import Stream
from fenecdb_server.storage.format import file_header, record_header, scan

DEADLINE_S = 30.0


class Pieces:
    """A socket whose reads answer `data` in pieces of `size` bytes."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data = data
        self.size = size

    def recv(self, n: int) -> bytes:
        got, self.data = self.data[:min(n, self.size)], self.data[min(n, self.size):]
        return got


def frames(records: list[tuple[int, bytes]]) -> bytes:
    """Records framed as the log frames them (the stream's format)."""
    return b"".join(record_header(payload) + payload for _, payload in records)


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x;ext=1\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64, 1 << 16])
def test_the_stream_unframes_a_chunked_body_split_anywhere(size: int) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nFenec-Seq: 7\r\n\r\n"
    stream = Stream(Pieces(head + chunked(b"abc", b"defgh", b"i" * 300), size))  # type: ignore[arg-type]
    stream._read_head()
    assert stream.status == 200 and stream.headers["fenec-seq"] == "7"
    assert stream.take(2) == b"ab"
    assert stream.take(4) == b"cdef"
    assert stream.take(302) == b"gh" + b"i" * 300
    with pytest.raises(EOFError):
        stream.take(1)


def test_a_body_with_no_chunks_is_read_to_the_connections_end() -> None:
    stream = Stream(Pieces(b"HTTP/1.1 409 Conflict\r\ncontent-length: 5\r\n\r\nno, b", 3))  # type: ignore[arg-type]
    stream._read_head()
    assert stream.status == 409 and stream.take(5) == b"no, b"


def test_ready_says_whether_body_bytes_are_there_without_waiting() -> None:
    a, b = socket.socketpair()
    try:
        a.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        stream = Stream(b)
        stream._read_head()
        assert stream.ready()
        assert stream.take(3) == b"abc"
        assert not stream.ready()
        a.sendall(b"2\r\n")  # a size line alone is not more of the body
        assert not stream.ready()
        a.sendall(b"de\r\n")
        assert stream.ready() and stream.take(2) == b"de"
    finally:
        a.close()
        b.close()


class Primary:
    """A stand-in primary on loopback: its first connection is the stream (answered with the head of
    a `--sync-replicas` primary and the file header, then whatever `send` gives it); every later one
    carries acks, each answered 200 and its `seq` kept in `acks`. `close_acks` closes the ack
    connection open now, as a primary does to an idle connection."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stream: socket.socket | None = None
        self.streamed = threading.Event()
        self.acks: list[int] = []
        self.ack_conns: list[socket.socket] = []
        self.done = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.done:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.stream is None:
                self.stream = conn
                _read_head(conn)
                conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nfenec-history: h1\r\n"
                             b"fenec-seq: 0\r\nfenec-sync-replicas: 1\r\nfenec-term: 0\r\n\r\n")
                self.send(file_header())
                self.streamed.set()
            else:
                self.ack_conns.append(conn)
                threading.Thread(target=self._read_acks, args=(conn,), daemon=True).start()

    def _read_acks(self, conn: socket.socket) -> None:
        data = b""
        while True:
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                head = data[:end].decode("latin-1").lower()
                assert head.startswith("post /_replication/ack http/1.1\r\n")
                length = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0])
                if len(data) >= end + 4 + length:
                    body = data[end + 4:end + 4 + length].decode()
                    self.acks.append(int(body.split("seq=", 1)[1]))
                    data = data[end + 4 + length:]
                    try:
                        conn.sendall(b'HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{"ok":true}')
                    except OSError:
                        return
                    continue
            try:
                got = conn.recv(65536)
            except OSError:
                return
            if not got:
                return
            data += got

    def send(self, body: bytes) -> None:
        assert self.stream is not None
        self.stream.sendall(b"%x\r\n%b\r\n" % (len(body), body))

    def close_acks(self) -> None:
        for conn in self.ack_conns:
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.done = True
        self.listener.close()
        if self.stream is not None:
            self.stream.close()


def _read_head(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)


def wait_for(what: str, check: object) -> None:
    end = time.monotonic() + DEADLINE_S
    while not check():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError(f"waited {DEADLINE_S} s for {what}")
        time.sleep(0.02)


def written(tmp_path: Path, puts: int) -> list[tuple[int, bytes]]:
    """The records a primary wrote: a collection, then `puts` puts (change numbers 1, 2, ...)."""
    db = Database(str(tmp_path / "p.fenec"), sync="off")
    db.query("create collection jobs (n int)")
    for n in range(puts):
        db.query("put jobs {n: $1}", [n])
    db.close()
    found = scan((tmp_path / "p.fenec").read_bytes())
    return list(enumerate(found.records, 1))


def test_records_that_come_together_are_synced_once_and_acked_once(tmp_path: Path) -> None:
    records = written(tmp_path, 29)
    primary = Primary()
    db = Database(str(tmp_path / "r.fenec"), sync="off")  # only the primary's acks make it sync
    follower = Follower(db, Identity(str(tmp_path / "r.fenec")), f"http://127.0.0.1:{primary.port}", "t")
    try:
        follower.start()
        assert primary.streamed.wait(DEADLINE_S)
        wait_for("the follower to read the stream's head", lambda: follower.connected)
        before = db.log.fsyncs
        primary.send(frames(records[:20]))  # twenty records in one piece
        wait_for("an ack of change 20", lambda: primary.acks and primary.acks[-1] == 20)
        assert primary.acks == [20]
        assert db.log.fsyncs - before == 1 and db.log.durable == db.log.appended
        assert db.seq == 20 and follower.acked == 20

        primary.close_acks()  # the primary closed the idle ack connection: the next ack takes another
        primary.send(frames(records[20:]))

        def acked_30() -> bool:  # an ack sent as the close came is said again at a keep-alive
            primary.send(KEEPALIVE)
            return primary.acks[-1] == 30

        wait_for("an ack of change 30", acked_30)
        assert len(primary.ack_conns) == 2 and db.seq == 30
    finally:
        follower.stop()
        primary.close()
        db.close()


def test_the_ack_goes_out_before_the_replay(tmp_path: Path) -> None:
    """The records are written and synced, and acked, while the replay into the memory waits: here it
    waits for the engine's write lock, which this test holds shared (as a long read would)."""
    records = written(tmp_path, 19)
    primary = Primary()
    db = Database(str(tmp_path / "r.fenec"), sync="off")
    follower = Follower(db, Identity(str(tmp_path / "r.fenec")), f"http://127.0.0.1:{primary.port}", "t")
    lock = db.engine.lock
    held = False
    try:
        follower.start()
        assert primary.streamed.wait(DEADLINE_S)
        wait_for("the follower to read the stream's head", lambda: follower.connected)
        lock.acquire_read()
        held = True
        primary.send(frames(records))
        wait_for("an ack of change 20", lambda: primary.acks and primary.acks[-1] == 20)
        assert db.seq == 0 and db.ahead.waiting == 20  # acked: on the replica's disk, not in its memory yet
        assert db.log.durable == db.log.appended == 20
        lock.release_read()
        held = False
        wait_for("the replay", lambda: db.seq == 20)
        assert db.ahead.waiting == 0 and [r["n"] for r in db.query("get jobs")] == list(range(19))
    finally:
        if held:
            lock.release_read()
        follower.stop()
        primary.close()
        db.close()
