"""The primary's side of replication: the records kept for replicas, and the stream's bytes.

`Feed.attach(db)` puts the feed between the engine and its log (the engine's appender), after
reading back the records already in the data file (the last `limit` bytes of them: a primary
restarted feeds its replicas on from where they are, rather than re-imaging them). Each
record appended is also kept here, framed as the log wrote it (the log's own header, whose CRCs
the log computed: `Log.last_head`, then the payload), with its change number and its log ticket,
up to `limit` bytes (`--replication-buffer`); the oldest go first. That is all the write path
pays (one concatenation and three list appends a record), and only on a server started with
`--replication-token`.

The stream (`GET /_replication`) is sent by the event loop, never by the writer: `durable_frames`
answers the bytes of the records a replica may have, those with a change number past its own and
a ticket the log's fsync has covered (only writes already on the primary's disk are sent, server.md
§7), found by bisection and joined in one call: per sync, the loop's work does not grow with the
records in it but by the bytes joined. A stream with nothing to send waits on a future of its own,
`more()`, which the log's sync resolves (`Log.synced`, on whichever thread synced: at once on the
loop's own, through `call_soon_threadsafe` from any other); a stream arms it before it looks, so a
sync between its look and its wait still wakes it. It awaits that future itself (`wait`). A sync
on the loop's own thread (every one under `--sync always`) does not wait for the stream's task: each
open stream's pusher (`pushers`, http/replication.py) sends the records in the sync's own call, so a
sync replica has them before the loop turns again.

Wire format: the bytes of a data file (storage/log.py). The file header (16 bytes), then records
framed as the log frames them (12-byte header: length, CRC-32 of the payload, CRC-32 of the
header; then the payload). A snapshot record is an image (a whole database, as a backup writes
it), after which the write records apply on top of it; a write record of no payload is a
keep-alive, sent after `KEEPALIVE_S` of silence. The replica checks each record as recovery
does, so a cut or damaged stream is caught, never applied. (bench/README.md compares this with
NDJSON lines of base64 payloads: the framing costs the primary less per record, and nothing once
the log's own frames are kept.)
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..engine import records
from ..storage.failure import CorruptLog
from ..storage.format import record_head, record_header, scan

if TYPE_CHECKING:
    from ..database import Database

KEEPALIVE_S = 1.0
KEEPALIVE = record_head(0, 0)  # a write record of no payload
DEFAULT_BUFFER_MIB = 64


class Replica:
    """A replica the feed streams to, as its status lists it."""

    __slots__ = ("peer", "ident", "member", "since", "sent", "acked", "started", "last_sent")

    def __init__(self, peer: str, since: int, ident: str = "", member: str = "") -> None:
        self.peer = peer
        self.ident = ident or peer  # the follower's own id (`Fenec-Replica`), the same across its reconnections
        self.member = member  # in a cluster, the replica's advertise URL (`Fenec-Member`; "" outside one)
        self.since = since
        self.sent = since  # the change number of the last record sent
        self.acked = 0  # the change its own disk holds, as it last said (0: never said)
        self.started = time.time()
        self.last_sent = time.monotonic()

    def describe(self, seq: int) -> dict[str, Any]:
        return {"peer": self.peer, "sent": self.sent, "acked": self.acked, "behind": max(0, seq - self.sent),
                "connected_s": round(time.time() - self.started, 3)}


class Feed:
    """The records kept for replicas (see the module's docstring); the engine's appender."""

    def __init__(self, db: Database, limit: int) -> None:
        self.db = db
        self.limit = limit
        self.inner: Any = None
        self._lock = threading.Lock()
        self._seqs: list[int] = []  # change numbers, ascending
        self._tickets: list[int] = []
        self._frames: list[bytes] = []  # each record as the log framed it: its header, then its payload
        self._first = 0  # index of the first kept record in the lists (the ones before are dropped)
        self._bytes = 0
        self.base = 0  # the change number before the first kept record: a replica at it or past it is fed
        self.replicas: set[Replica] = set()
        self._waiting: list[asyncio.Future[None]] = []  # the futures of the streams with nothing to send
        self.pushers: list[Callable[[], None]] = []  # each open stream's: sends what a sync on the loop covers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def attach(self) -> None:
        """Stand between the engine and its log from now on."""
        engine = self.db.engine
        engine.lock.acquire_write()
        try:
            self.base = engine.seq
            self._read_back()
            self.inner = engine.appender
            engine.appender = self
        finally:
            engine.lock.release_write()
        if self.db.log is not None:
            self.db.log.synced = self.synced

    # -- waking the streams --

    def more(self) -> asyncio.Future[None]:
        """On the loop: a future of the calling stream's own, done once the log's fsync covers more
        records. Taken before a stream looks for records (see the module's docstring)."""
        loop = asyncio.get_running_loop()
        more = loop.create_future()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        waiting = [f for f in self._waiting if not f.done()]  # a wait ended by its time is dropped here
        waiting.append(more)
        self._waiting = waiting
        return more

    @staticmethod
    async def wait(more: asyncio.Future[None], seconds: float) -> None:
        """On the loop: until `more` is done or `seconds` have passed. The stream's task awaits
        the future itself (asyncio.wait would wake it a turn later, through a future of its own);
        it is the stream's own, so a stream cancelled meanwhile cancels no other's."""
        timer = asyncio.get_running_loop().call_later(seconds, _wake, more)
        try:
            await more
        finally:
            timer.cancel()

    def synced(self) -> None:
        """The log's fsync covers more records (`Log.synced`: any thread, holding the log's lock).
        On the loop, each stream's pusher sends them at once, in the sync's own turn; the streams'
        tasks are woken too (a stream busy with an image, or with a slow reader, sends them itself)."""
        if threading.get_ident() == self._loop_thread:
            for push in self.pushers:
                push()
        waiting = self._waiting
        if not waiting:
            return
        self._waiting = []
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:
            _wake_all(waiting)
        else:
            loop.call_soon_threadsafe(_wake_all, waiting)

    def _read_back(self) -> None:
        """Under the write lock, nothing appended meanwhile: the file's last records, up to
        `limit` bytes, kept as if just appended (all on disk: ticket 0), and `base` the change
        before them. A file that cannot be read back keeps nothing (its replicas are imaged)."""
        log = self.db.log
        if log is None:
            return
        try:
            with open(log.path, "rb") as f:
                found = scan(f.read())
        except (OSError, CorruptLog):
            return
        kept: list[bytes] = []
        size = 0
        for payload in reversed(found.records):
            frame = record_header(payload) + payload
            if size + len(frame) > self.limit:
                break
            kept.append(frame)
            size += len(frame)
        kept.reverse()
        dropped = len(found.records) - len(kept)
        if dropped:
            base = records.change_of(found.records[dropped - 1])
        else:
            base = records.change_of(found.snapshot) if found.snapshot is not None else 0
        seqs = [records.change_of(p) for p in found.records[dropped:]]
        if seqs and seqs[-1] != self.db.seq:
            return  # not the records the engine holds: keep nothing
        self.base = base
        self._seqs = seqs
        self._tickets = [0] * len(kept)
        self._frames = kept
        self._bytes = size

    # -- the engine's appender: under the write lock --

    def append(self, payload: bytes, seq: int, ops: list) -> object:
        ticket = self.inner.append(payload, seq, ops)
        log = self.db.log  # under the write lock: the log's last record is this one
        frame = (log.last_head if log is not None else record_header(payload)) + payload
        with self._lock:
            self._seqs.append(seq)
            self._tickets.append(ticket)
            self._frames.append(frame)
            self._bytes += len(frame)
            if self._bytes > self.limit:
                self._drop()
        return ticket

    def wait_durable(self, ticket: object) -> None:
        self.inner.wait_durable(ticket)

    def _drop(self) -> None:
        """Holding `_lock`: forget the oldest records until the rest fit; the lists are cut once
        half of them is forgotten (each record is moved at most once more)."""
        first = self._first
        while self._bytes > self.limit and first < len(self._seqs) - 1:
            self._bytes -= len(self._frames[first])
            self.base = self._seqs[first]
            self._frames[first] = b""
            first += 1
        if first * 2 > len(self._seqs):
            del self._seqs[:first], self._tickets[:first], self._frames[:first]
            first = 0
        self._first = first

    # -- the stream: on the event loop --

    @property
    def seq(self) -> int:
        return self.db.seq

    def fed(self, since: int) -> bool:
        """Whether a replica at change `since` can be sent records (else it needs an image)."""
        with self._lock:
            return self.base <= since <= self.db.seq

    def durable_frames(self, since: int, most: int = 1000) -> tuple[int, bytes] | None:
        """The records past change `since` that the log's fsync covers, up to `most`, as the stream
        sends them (their frames joined): (the change number of the last, the bytes), `(since, b"")`
        when there is none yet; None when `since` is no longer kept (an image is owed)."""
        log = self.db.log
        durable = log.durable if log is not None else 0
        with self._lock:
            if since < self.base:
                return None
            seqs = self._seqs
            at = bisect.bisect_right(seqs, since, self._first)
            end = bisect.bisect_right(self._tickets, durable, at, min(len(seqs), at + most))
            if end == at:
                return since, b""
            return seqs[end - 1], b"".join(self._frames[at:end])

    def kept(self) -> dict[str, int]:
        with self._lock:
            return {"records": len(self._seqs) - self._first, "bytes": self._bytes, "base": self.base}


def _wake(more: asyncio.Future[None]) -> None:
    if not more.done():
        more.set_result(None)


def _wake_all(waiting: list[asyncio.Future[None]]) -> None:
    for more in waiting:
        if not more.done():
            more.set_result(None)
