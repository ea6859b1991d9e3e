"""The replica's side of replication: a thread that follows its primary's stream.

It asks `GET /_replication?since=<its change number>&history=<its history id>` with the
replication token, and reads the stream (feed.py has its format) a block at a time, as much as
has arrived (one read of the socket for the many records a primary's sync sends): each write
record is applied as recovery replays one (engine/records.py) under the engine's write lock and
appended to the replica's own file through the same appender as every write, so `--sync` governs
the replica's disk as the primary's. The whole records of a block are applied `APPLY_MOST` at a
time, under one hold of the lock, with one wait for the disk (or one word to the acker) after them,
rather than a lock round, a wait and the stream's reads for each. An image replaces the whole database (`Database`'s engine state loaded
from it, then the file compacted to it before the next record is applied: a crash in between
leaves the old file, whose change number asks for the image again). Every record is checked as
recovery checks one: a damaged or cut stream is dropped, never applied, and asked for again.

A primary under `--sync-replicas` (its stream's `Fenec-Sync-Replicas` header above 0) is told which
change this replica's disk holds: the acker thread posts `/_replication/ack` on a connection of its own
each time the log's fsync covers more of the records applied, one post for all the records a sync
covered. The acker syncs them itself (one fdatasync for all that came meanwhile, whatever `--sync`
says: under `always` the applier does not wait for each record's, under `<ms>` its primary's
answers do not wait for the period); nothing is acked before its sync.

In a cluster (cluster.py) the stream's `Fenec-Term` header names the term of the primary sending it:
a stream of a term below the highest this replica has seen (`floor`: in etcd, or in a record it
applied) is refused, and so is the rest of a stream once a higher term is known, so that no record
of a deposed primary is applied after its successor was elected.

Silence longer than `SILENCE_S` (the primary sends a keep-alive every second) ends the
connection: a frozen primary or a cut link is found within it, and the follower reconnects,
asking for what it missed, after a pause that grows from 0.1 s to 2 s while it fails.
"""

from __future__ import annotations

import collections
import http.client
import logging
import secrets
import socket
import struct
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable

from ..database import Database
from ..engine import records
from ..errors import FenecError
from ..storage.format import FILE_HEADER_SIZE, MAX_PAYLOAD, RECORD_HEADER_SIZE, SNAPSHOT_BIT, file_header
from .identity import Identity

log = logging.getLogger("fenecdb.replication")

SILENCE_S = 5.0
READ_BLOCK = 256 << 10  # the most a read of the stream asks for: every record that has arrived, up to this
APPLY_MOST = 64  # write records applied under one hold of the write lock (the replica's reads wait that long)
_HEAD12 = struct.Struct("<III")


class StreamBroken(Exception):
    """The stream ended, or a record in it failed its checks."""


class Follower:
    """Follows the primary at `url` into `db` (started by `start`, stopped by `stop`)."""

    def __init__(self, db: Database, identity: Identity, url: str, token: str,
                 applied: Callable[[int], None] | None = None, floor: Callable[[], int] | None = None,
                 member: str = "") -> None:
        parts = urllib.parse.urlsplit(url)
        self.db = db
        self.identity = identity
        self.url = url
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.token = token
        self.applied = applied  # told each change number applied (read-your-writes waiters)
        self.floor = floor  # () -> the lowest term a stream may carry (a cluster's; None: no terms)
        self.member = member  # in a cluster, this server's advertise URL, told the primary (its sync set names it)
        self.term = 0  # the term of the stream followed now (its Fenec-Term)
        self.connected = False
        self.last_contact = 0.0  # time.time() of the last bytes from the primary (0: never)
        self.primary_seq = 0  # the primary's change number, as it last said (its stream's head, then records)
        self.images = 0  # images received since start
        self.records = 0  # records applied since start
        self.level_at = time.time()  # when it last held every change it knew its primary had
        self.ident = secrets.token_hex(8)  # this follower, to its primary (its acks counted once)
        self.acking = False  # the primary wants acks (its --sync-replicas)
        self.acked = 0  # the change the last ack said
        self._imaged = False  # the stream's last record was an image (its history is this file's now)
        self._applied: collections.deque[tuple[int, int]] = collections.deque()  # (ticket, change) not acked
        self._more = threading.Event()
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name="fenec-follower", daemon=True)
        self._acker = threading.Thread(target=self._ack_loop, name="fenec-acker", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._acker.start()

    def stop(self) -> None:
        """Stop following (the current record is applied whole or not at all) and wait for it."""
        self._stop.set()
        self._more.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(2)
            except OSError:
                pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        pause = 0.1
        while not self._stop.is_set():
            try:
                self._follow()
                pause = 0.1
            except (OSError, http.client.HTTPException, StreamBroken, ValueError) as e:
                if not self._stop.is_set():
                    log.warning("replication: following %s: %s; reconnecting", self.url, e or type(e).__name__)
            except Exception:
                log.exception("replication: internal error following %s", self.url)
            finally:
                self.connected = False
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()
            if self._stop.wait(pause):
                return
            pause = min(2.0, pause * 2)

    def _follow(self) -> None:
        since = self.db.seq
        query = urllib.parse.urlencode({"since": since, "history": self.identity.history})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=SILENCE_S)
        self._conn = conn
        headers = {"authorization": f"Bearer {self.token}", "fenec-replica": self.ident}
        if self.member:
            headers["fenec-member"] = self.member
        conn.request("GET", f"/_replication?{query}", headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            body = resp.read(4096).decode("utf-8", "replace")
            raise StreamBroken(f"the primary answered {resp.status}: {body}")
        history = resp.getheader("fenec-history") or ""
        self.primary_seq = int(resp.getheader("fenec-seq") or 0)
        self.acking = int(resp.getheader("fenec-sync-replicas") or 0) > 0
        self.acked = 0  # a new stream: its first ack says where this replica stands
        self.term = int(resp.getheader("fenec-term") or 0)
        self._check_term()
        if _read(resp, FILE_HEADER_SIZE) != file_header():
            raise StreamBroken("the stream does not start with a data file's header")
        self.connected = True
        self.last_contact = time.time()
        self._imaged = False
        pending = bytearray()  # the stream's bytes past its last whole record
        while not self._stop.is_set():
            block = resp.read1(READ_BLOCK)  # what has arrived, in one read of the socket
            if not block:
                raise StreamBroken("the stream ended")
            self.last_contact = time.time()
            pending += block
            del pending[:self._take(pending, history)]

    def _take(self, buf: bytearray, history: str) -> int:
        """Check and apply the whole records at the start of `buf`, in order; answer the bytes
        they took (a record cut at the end waits for the next read). Write records are applied
        `APPLY_MOST` at a time (`_apply`); a damaged record raises StreamBroken after those before
        it are applied, and nothing after it is."""
        at = 0
        batch: list[bytes] = []
        broken = ""
        view = memoryview(buf)
        try:
            while len(buf) - at >= RECORD_HEADER_SIZE and not self._stop.is_set():
                word, crc, hcrc = _HEAD12.unpack_from(buf, at)
                if zlib.crc32(view[at:at + 8]) != hcrc:
                    broken = "a record header failed its check"
                    break
                end = at + RECORD_HEADER_SIZE + (word & MAX_PAYLOAD)
                if end > len(buf):
                    break
                payload = bytes(view[at + RECORD_HEADER_SIZE:end])
                if zlib.crc32(payload) != crc:
                    broken = "a record failed its check"
                    break
                at = end
                if payload and not word & SNAPSHOT_BIT:
                    batch.append(payload)
                    if len(batch) >= APPLY_MOST:
                        self._apply(batch, history)
                        batch = []
                    continue
                self._apply(batch, history)  # the records before it first
                batch = []
                if word & SNAPSHOT_BIT:
                    self._image(payload)
                    self._imaged = True
                    if self.floor is not None:  # a cluster's member: the file is the image, of this history
                        self.identity.follow(self.url, history)
                else:  # a keep-alive: the primary has no record on its disk past ours
                    self.primary_seq = self.db.seq
                    self.level_at = self.last_contact
        finally:
            view.release()
        self._apply(batch, history)
        if broken:
            raise StreamBroken(broken)
        return at

    def _check_term(self) -> None:
        if self.floor is not None and self.term < self.floor():
            raise StreamBroken(f"the stream's term {self.term} is below {self.floor()}, the highest seen: "
                               "its primary was deposed")

    def _apply(self, payloads: list[bytes], history: str) -> None:
        """Apply write records in order, under one hold of the engine's write lock, and append them
        to this server's file in one write where its appender can (`append_all`: a record at a time
        otherwise); then one wait for the disk (the last record's, which covers the others) or one
        word to the acker, and one `applied` for the last change."""
        if not payloads or self._stop.is_set():  # stopped: the stream is dropped, nothing more applied
            return
        self._check_term()
        if not self._imaged and self.identity.history != history:
            self.identity.follow(self.url, history)
        self._imaged = False
        engine = self.db.engine
        done: list[tuple[bytes, int, list]] = []
        ticket: object = None
        engine.lock.acquire_write()
        try:
            appender = engine.appender
            append_all = getattr(appender, "append_all", None)
            try:
                for payload in payloads:
                    seq, ops = records.replay(engine, payload)
                    done.append((payload, seq, ops))
                    if appender is not None and append_all is None:
                        ticket = appender.append(payload, seq, ops)
            finally:  # what was applied is appended, whatever stopped the rest
                if done and append_all is not None:
                    ticket = append_all(done)
        finally:
            engine.lock.release_write()
        self.records += len(done)
        seq = done[-1][1]
        if appender is not None:
            if self.acking and isinstance(ticket, int):
                # the acker syncs before it says (one fdatasync for every record applied meanwhile)
                first = ticket - len(done) + 1
                self._applied.extend((first + n, change) for n, (_, change, _) in enumerate(done))
                self._more.set()
            else:
                appender.wait_durable(ticket)
        if seq >= self.primary_seq:
            self.primary_seq = seq
            self.level_at = time.time()
        if self.applied is not None:
            self.applied(seq)

    def _image(self, payload: bytes) -> None:
        """The whole database replaced by the image, and the file made of it (the module's
        docstring says why before any record after it)."""
        engine = self.db.engine
        engine.lock.acquire_write()
        try:
            for name in list(engine.collections):
                engine.catalog.remove_collection(name)
            for key in [k for k, _ in engine.keys.items()]:
                engine.keys.forget(key)
            records.load_snapshot(engine, payload)
            seq = engine.seq
            self.images += 1
        finally:
            engine.lock.release_write()
        if self.db.path is not None:
            self.db.compact()  # the file holds the image, synced: its change is on this disk
        if self.acking:
            self._applied.clear()
            self._applied.append((0, seq))
            self._more.set()
        if seq > self.primary_seq:
            self.primary_seq = seq
        log.warning("replication: re-imaged from %s at change %d", self.url, seq)
        if self.applied is not None:
            self.applied(seq)

    def _ack_loop(self) -> None:
        """Tell the primary the change the disk holds, as the log's fsyncs cover more (the
        module's docstring); a failed post is tried again with the next, on a new connection."""
        conn: http.client.HTTPConnection | None = None
        while not self._stop.is_set():
            self._more.wait(0.05)  # a sync under --sync <ms> comes on its own: looked for now and then
            self._more.clear()
            if not self.acking:
                continue
            log_ = self.db.log
            applied = self._applied
            if log_ is not None and applied and applied[-1][0] > log_.durable:
                try:  # its primary waits: the disk now, whatever the period of --sync <ms>
                    log_.sync_upto(applied[-1][0])
                except FenecError:
                    continue  # the log failed: nothing more is ever said to be on this disk
            durable = log_.durable if log_ is not None else 0
            upto = 0
            while applied and applied[0][0] <= durable:
                upto = applied.popleft()[1]
            if upto <= self.acked:
                continue
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=SILENCE_S)
                    conn.connect()
                    assert conn.sock is not None
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # bytes: http.client sends a bytes body with the head in one send (a second small send
                # would wait for the first one's delayed ACK)
                conn.request("POST", "/_replication/ack", body=f"replica={self.ident}&seq={upto}".encode(),
                             headers={"authorization": f"Bearer {self.token}"})
                conn.getresponse().read()
                self.acked = upto
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
                applied.appendleft((0, upto))  # said again with the next
        if conn is not None:
            conn.close()

    def behind(self) -> tuple[int, float]:
        """Changes the primary said it had that this replica has not applied, and seconds since
        it last held all it knew of (0 while level and connected; counted from the last contact
        while cut off, whose lag it cannot know)."""
        changes = max(0, self.primary_seq - self.db.seq)
        now = time.time()
        if not self.connected:
            return changes, max(0.0, now - max(self.last_contact, self.level_at))
        return changes, (max(0.0, now - self.level_at) if changes else 0.0)

    def describe(self) -> dict[str, object]:
        changes, seconds = self.behind()
        return {"primary": self.url, "connected": self.connected,
                "behind": changes, "behind_s": round(seconds, 3),
                "last_contact_s": round(time.time() - self.last_contact, 3) if self.last_contact else None,
                "images": self.images}


def _read(resp: http.client.HTTPResponse, n: int) -> bytes:
    """Exactly `n` bytes of the stream, or StreamBroken."""
    if n == 0:
        return b""
    got = resp.read(n)
    while len(got) < n:
        more = resp.read(n - len(got))
        if not more:
            raise StreamBroken("the stream ended")
        got += more
    return got
