"""The replica's side of replication: a thread that follows its primary's stream.

It asks `GET /_replication?since=<the change its file holds>&history=<its history id>` with the
replication token, and reads the stream (feed.py has its format) a block at a time, as much as
has arrived (one read of the socket for the many records a primary's sync sends). Every record is
checked as recovery checks one: a damaged or cut stream is dropped, never written nor applied, and
asked for again. The whole write records of a block go to the replica's own file first, in one
write, framed as the stream framed them, which is as a data file holds them (`Database.ahead`),
and into its memory after (`Ahead.apply`, `APPLY_MOST` at a time under one hold of the engine's
write lock, as their net effect: engine/records.py's `replay_all`, where a job claimed and acked
among them is one delete of its row): the disk first, so that a sync
replica's ack, which says "on this replica's disk", waits for no replay.
Until they are replayed the file is ahead of the memory, which nothing else here sees: reads,
`Fenec-After` and the lag numbers are of the memory (what the replica serves), a compaction's
snapshot of the memory is followed by those records in the new file (database.py), and a crash
before the replay loses none (the file is replayed at start). The follower replays every record it
wrote before it reads again or stops, so that a promotion, a close or the next stream finds the
file and the memory at one change. An image replaces the whole database (`Database`'s engine state
loaded from it, then the file compacted to it before the next record is written: a crash in
between leaves the old file, whose change number asks for the image again).

Records that come together are made durable together: once a block is written and nothing more of
the stream is there to read (link.py's `Stream.ready`), or `SETTLE_S` after the first record not
yet settled, the follower settles what it wrote: one fdatasync for all of it (under `--sync
always`, or whatever `--sync` says when its primary waits for acks), then, when the primary runs
`--sync-replicas` (its stream's `Fenec-Sync-Replicas` header above 0), one ack saying the change
its disk now holds (link.py's `Acks`, a connection of its own), and only then the replay. Nothing
is acked before its fdatasync. The same thread reads, writes, syncs, acks and replays: no record is
handed to another thread on its way to the primary's answer.

In a cluster (cluster.py) the stream's `Fenec-Term` header names the term of the primary sending it:
a stream of a term below the highest this replica has seen (`floor`: in etcd, or in a record it
applied) is refused, and so is the rest of a stream once a higher term is known (checked before
each write to the file), so that no record of a deposed primary is written or applied after its
successor was elected.

Silence longer than `SILENCE_S` (the primary sends a keep-alive every second) ends the
connection: a frozen primary or a cut link is found within it, and the follower reconnects,
asking for what it missed, after a pause that grows from 0.1 s to 2 s while it fails.
"""

from __future__ import annotations

import logging
import secrets
import struct
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable
from http import HTTPStatus

from ..database import Database
from ..engine import records
from ..errors import FenecError
from ..storage.format import FILE_HEADER_SIZE, MAX_PAYLOAD, RECORD_HEADER_SIZE, SNAPSHOT_BIT, file_header
from .identity import Identity
from .link import Acks, Refused, Stream

log = logging.getLogger("fenecdb.replication")

SILENCE_S = 5.0
SETTLE_S = 0.05  # a stream that never pauses (a long catch-up) is still settled this often
READ_BLOCK = 256 << 10  # the most a read of the stream takes: every body byte that has arrived, up to this
APPLY_MOST = 128  # write records applied under one hold of the write lock (the replica's reads wait that long;
# the bytes of one read, READ_BLOCK, bound it too). A block applied as its net effect costs less a record than
# records replayed one by one, so it may be larger for the same hold, and the larger it is the more of its jobs
# are claimed and acked within it (bench/README.md, "An async replica's apply", has the counts)
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
        self.records = 0  # records written to the file since start (each replayed right after)
        self.level_at = time.time()  # when it last held every change it knew its primary had
        self.ident = secrets.token_hex(8)  # this follower, to its primary (its acks counted once)
        self.acking = False  # the primary wants acks (its --sync-replicas)
        self.acked = 0  # the change the last ack said
        self._ticket = 0  # the log's ticket of the last record written and not settled yet (0: none)
        self._change = 0  # the change number of the last record written to the file
        self._durable = 0  # the highest change this follower made sure its disk holds (0: none yet)
        self._since = 0.0  # time.monotonic() of the first record not settled yet
        self._imaged = False  # the stream's last record was an image (its history is this file's now)
        self._stop = threading.Event()
        self._stream: Stream | None = None
        self._acks = Acks(self.host, self.port, token, SILENCE_S)
        self.thread = threading.Thread(target=self._run, name="fenec-follower", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop following (the records written to the file are replayed first; none after) and
        wait for it."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.shutdown()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=10)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        pause = 0.1
        try:
            while not self._stop.is_set():
                try:
                    self._follow()
                    pause = 0.1
                except (OSError, EOFError, Refused, StreamBroken, ValueError) as e:
                    if not self._stop.is_set():
                        log.warning("replication: following %s: %s; reconnecting", self.url,
                                    e or type(e).__name__)
                except Exception:
                    log.exception("replication: internal error following %s", self.url)
                finally:
                    self.connected = False
                    stream, self._stream = self._stream, None
                    if stream is not None:
                        stream.close()
                if self._stop.wait(pause):
                    return
                pause = min(2.0, pause * 2)
        finally:
            self._acks.close()

    def _follow(self) -> None:
        self._replay()  # what a failed replay left written and not replayed (`Ahead.apply`)
        since = max(self.db.seq, self._change)  # the file's change: a record written is not asked again
        query = urllib.parse.urlencode({"since": since, "history": self.identity.history})
        headers = {"authorization": f"Bearer {self.token}", "fenec-replica": self.ident}
        if self.member:
            headers["fenec-member"] = self.member
        stream = self._stream = Stream.open(self.host, self.port, f"/_replication?{query}", headers, SILENCE_S)
        if self._stop.is_set():  # stopped while connecting: `stop` found no stream to shut
            return
        if stream.status != HTTPStatus.OK:
            raise StreamBroken(f"the primary answered {stream.status}: {self._refusal(stream)}")
        history = stream.headers.get("fenec-history", "")
        self.primary_seq = int(stream.headers.get("fenec-seq") or 0)
        self.acking = int(stream.headers.get("fenec-sync-replicas") or 0) > 0
        self.acked = 0  # a new stream: its first ack says where this replica stands
        self.term = int(stream.headers.get("fenec-term") or 0)
        self._check_term()
        if stream.take(FILE_HEADER_SIZE) != file_header():
            raise StreamBroken("the stream does not start with a data file's header")
        self.connected = True
        self.last_contact = time.time()
        if self.acking and self._durable and not self._ticket:
            self._ack(self._durable)  # what the last stream may not have told (an ack lost with it)
        self._imaged = False
        pending = bytearray()  # the stream's bytes past its last whole record
        while not self._stop.is_set():
            if self._ticket and (not stream.ready() or time.monotonic() - self._since >= SETTLE_S):
                self._settle()
            block = stream.some(READ_BLOCK)  # what has arrived, waiting only when nothing has
            self.last_contact = time.time()
            pending += block
            del pending[:self._take(pending, history)]

    def _take(self, buf: bytearray, history: str) -> int:
        """Check and take the whole records at the start of `buf`, in order; answer the bytes
        they took (a record cut at the end waits for the next read). The write records between
        two others (an image, a keep-alive) are written and replayed together (`_write`); a
        damaged record raises StreamBroken after those before it are, and nothing after it is."""
        at = first = 0  # `first`: where the write records of `batch` begin (they are contiguous)
        batch: list[bytes] = []
        broken = ""
        view = memoryview(buf)
        crc32 = zlib.crc32
        unpack_from = _HEAD12.unpack_from
        try:
            while len(buf) - at >= RECORD_HEADER_SIZE and not self._stop.is_set():
                word, crc, hcrc = unpack_from(buf, at)
                if crc32(view[at:at + 8]) != hcrc:
                    broken = "a record header failed its check"
                    break
                end = at + RECORD_HEADER_SIZE + (word & MAX_PAYLOAD)
                if end > len(buf):
                    break
                payload = bytes(view[at + RECORD_HEADER_SIZE:end])
                if crc32(payload) != crc:
                    broken = "a record failed its check"
                    break
                if payload and not word & SNAPSHOT_BIT:
                    batch.append(payload)
                    at = end
                    continue
                self._write(view[first:at], batch, history)  # the records before it first
                batch = []
                at = first = end
                if word & SNAPSHOT_BIT:
                    self._image(payload)
                    self._imaged = True
                    if self.floor is not None:  # a cluster's member: the file is the image, of this history
                        self.identity.follow(self.url, history)
                else:  # a keep-alive: the primary has no record on its disk past ours
                    self.primary_seq = self.db.seq
                    self.level_at = self.last_contact
                    if self.acking and not self._ticket and (self.acked < self._durable or self._acks.lost()):
                        self._ack(self._durable)  # an ack lost with its connection: said again (link.py)
            self._write(view[first:at], batch, history)
        finally:
            view.release()
        if broken:
            raise StreamBroken(broken)
        return at

    @staticmethod
    def _refusal(stream: Stream) -> str:
        try:
            return stream.take(min(4096, int(stream.headers.get("content-length") or 0))).decode("utf-8", "replace")
        except (OSError, EOFError, ValueError):
            return ""

    def _check_term(self) -> None:
        if self.floor is not None and self.term < self.floor():
            raise StreamBroken(f"the stream's term {self.term} is below {self.floor()}, the highest seen: "
                               "its primary was deposed")

    def _write(self, frames: memoryview, payloads: list[bytes], history: str) -> None:
        """Write records to this server's file in one write (`frames`: them as the stream framed
        them, which is as the file holds them), settle them if nothing more is there to read (the
        module's docstring), then replay them into the memory."""
        if not payloads or self._stop.is_set():  # stopped: the stream is dropped, nothing more written
            return
        self._check_term()
        if not self._imaged and self.identity.history != history:
            self.identity.follow(self.url, history)
        self._imaged = False
        try:
            ticket = self.db.ahead.append(bytes(frames), payloads)
            self._change = records.change_of(payloads[-1])
            if ticket:
                if not self._ticket:
                    self._since = time.monotonic()
                self._ticket = ticket
            stream = self._stream
            if self._ticket and (stream is None or not stream.ready()
                                 or time.monotonic() - self._since >= SETTLE_S):
                self._settle()
        finally:  # what was written is replayed, whatever stopped the rest
            self._replay()

    def _replay(self) -> None:
        """Replay every record written and not replayed yet, `APPLY_MOST` at a time. A record that
        fails to apply leaves the memory off its primary's line (`Ahead.apply`): this file's
        history is forgotten, saved so (a restart too asks for an image), and the stream dropped,
        so that the next one, asked with no history, begins with a whole image."""
        db = self.db
        while db.ahead.waiting:
            try:
                count = db.ahead.apply(APPLY_MOST)
            except Exception as e:
                log.error("replication: a record from %s failed to apply (%s: %s); asking for a whole image",
                          self.url, type(e).__name__, e)
                self.identity.follow(self.url, "")
                raise StreamBroken("a record failed to apply") from e
            seq = db.seq
            self.records += count
            if seq >= self.primary_seq:
                self.primary_seq = seq
                self.level_at = time.time()
            if self.applied is not None:
                self.applied(seq)

    def _settle(self) -> None:
        """The records written and not settled: one fdatasync for them all where `--sync always`
        or the primary's acks want it, then the ack (the module's docstring)."""
        ticket, self._ticket = self._ticket, 0
        log_ = self.db.log
        if log_ is None:
            return
        if self.acking or log_.policy == "always":
            try:
                log_.sync_upto(ticket)
            except FenecError as e:  # the disk failed: nothing more is ever said to be on it
                raise StreamBroken(f"this replica's disk refused: {e}") from e
            self._durable = self._change
        if self.acking and self._durable > self.acked:
            self._ack(self._durable)

    def _ack(self, seq: int) -> None:
        """Tell the primary this disk holds change `seq`; one lost is said again at the next
        keep-alive, or by the next ack (link.py)."""
        try:
            self._acks.send(self.ident, seq)
        except OSError as e:
            log.warning("replication: acking change %d to %s: %s", seq, self.url, e or type(e).__name__)
            return
        self.acked = seq

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
        self._ticket = 0
        self._change = seq
        if self.db.path is not None:
            self.db.compact()  # the file holds the image, synced: its change is on this disk
            self._durable = seq
            if self.acking:
                self._ack(seq)
        if seq > self.primary_seq:
            self.primary_seq = seq
        log.warning("replication: re-imaged from %s at change %d", self.url, seq)
        if self.applied is not None:
            self.applied(seq)

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

