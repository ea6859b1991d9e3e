#!/usr/bin/env python3
"""Replays the wire corpus: each SDK's recorded HTTP exchanges sent again, byte for byte, to a fresh
server, and each answer checked against the one the SDK was given when it was recorded.

    python3 replay.py --server-cmd "fenec-server --file {file} --http 127.0.0.1:{port}"
    python3 replay.py --server-cmd "..." --sdk go --sdk js --show 20
    python3 replay.py --server-cmd "..." --jobs 4   # four files at a time, each with its own server
    python3 replay.py --url http://127.0.0.1:8080   # a server you started, fresh, on nothing else

`--server-cmd` is started once per SDK, fresh: {port} becomes a free port and {file} a new file in
a new temporary folder; without {port} its output is read for `listening on: http://...`. It is
stopped with SIGTERM at the end of that SDK's replay. `--url` replays every SDK chosen against that
one server: the corpus names its collections per SDK (`page_go_4d1e99ac`, ...), so SDKs do not
meet, but the server must not have seen this corpus before (a collection created twice is a 409).

How it replays. Every recorded connection is a socket of its own (TCP_NODELAY), opened at its
recorded time. Its requests are written raw, as recorded (the same bytes, in the same writes when
the client wrote a request in parts), each on the connection it came on and after that connection's
previous answer (unless it was pipelined). Across connections the recorded order is kept too, since
the answers hang on it (a held claim is woken by another connection's put; workers claim from one
queue): one schedule walks every open, write and client close in recorded order; each waits for its
recorded time (relative to the first connection; the server's own timers, leases, back-offs and
held deadlines, run on that clock too) and for every answer recorded before it (when such an answer
comes later than recorded, the schedule moves on by as much, as the recorded client would have);
events recorded within BURST of each other are written back to back (the server read them together).
A connection the client closed is closed (a half close, as the recording proxy passed it on) at its
turn: a held claim whose client gave up is given up again before the next job comes.

What is compared, per exchange: the status; the body read the same way (JSON object, array, string,
number, true/false/null, not JSON, empty); for a JSON object the same set of top-level keys; the
headers an SDK reads being there or not (`Fenec-Seq`, `Idempotent-Replayed` and its value,
`Retry-After`, `WWW-Authenticate`), the media type of `Content-Type`, the HTTP version, interim 1xx
answers; the connection: kept alive for the next request, or closed, and whether `Connection: close`
was said; and for a claim sent with `Fenec-Wait`, whether it was held (answered HELD_S or more after
it was written) or answered at once (under PROMPT_S). A request recorded with no answer (the client
closed, as a cancelled held claim does) must get none before its connection is closed. A connection
that carried nothing must not be answered or closed by the server before the client closes it.
Values are never compared: ids, times, owner tokens, `Fenec-Seq`, `Date`, error texts. An exchange
is skipped only when its recording is cut (`partial`).

Races. Where several workers claimed from one collection on several connections at once (the
swarm scenarios: `contended`), which worker won which job hangs on sub-millisecond timing (how
many puts a woken claim saw; whether a back-off had ended) that no replay reproduces, and every
later ack of that job follows. There, unless --strict, a statement with `require` may be answered
the other side of the race (412 {error} where it was 200 {affected} with Fenec-Seq, or the reverse),
held longer or shorter, and a held claim its client gave up may be answered before the close; such
an exchange counts as the same and is counted apart as raced. Everything else about it (status
otherwise, body, headers, framing, the connection) is compared as anywhere.

A corpus named `<sdk>-token` was recorded against a server started with `--http-token
wire-corpus-token` (the SDK's run given it as FENEC_TOKEN): with `--server-cmd` its server is started
so; with `--url` it is left out, saying why (the replay cannot know the server's token).

A corpus named `<sdk>-batch` holds the exchanges of the SDK's own live tests that send `/batch` and
`Idempotency-Key` (recorded against a plain server, as the conformance runs); it is replayed as they are.

It prints, per SDK, `<sdk>: N replayed, M same, K differ, S skipped` and the first differences, and
exits 1 when any differ (2 when it could not run).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import io
import json
import multiprocessing
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
SDKS = ("python", "js", "go", "kotlin")
CORPUS_TOKEN = "wire-corpus-token"
# corpora recorded against a server started with more than the plain command: name -> its arguments
STARTED_WITH = {f"{sdk}-token": f"--http-token {CORPUS_TOKEN}" for sdk in SDKS}
# each SDK's own live tests (its /batch and Idempotency-Key requests), recorded against a plain server
OWN_TESTS = tuple(f"{sdk}-batch" for sdk in SDKS)
CORPORA = SDKS + tuple(STARTED_WITH) + OWN_TESTS
SLACK = 10.0  # s: how much later than recorded an answer may come before it counts as missing
LEAD = 0.3  # s: the replay's clock starts this long before the first recorded connection opens
BURST = 0.0003  # s: events recorded closer than this to the one before are written back to back
HELD_S, PROMPT_S = 0.2, 0.05  # s: a held claim's answer came this late or later; an at-once one earlier
REACT_CAP = 0.05  # s: the most of a client's recorded reaction to an answer that is kept
WAIT_HEADER = re.compile(rb"\r\nfenec-wait:[ \t]*([0-9]+)", re.I)
LISTENING = re.compile(r"listening on: (http://\S+)")
CHECKED_HEADERS = ("fenec-seq", "retry-after", "www-authenticate")  # there or not; values vary
STATEMENT = re.compile(r"\s*(?:create\s+collection\s+|get\s+|put\s+|set\s+|del\s+)([A-Za-z_][A-Za-z0-9_]*)")
CLAIM = re.compile(r"\s*set\s+[A-Za-z_][A-Za-z0-9_]*\s*\{\s*owner\s*:")
REQUIRE = re.compile(r"\brequire\s+[0-9]")


# ---------------------------------------------------------------- answers as they come


class Answers:
    """Splits a connection's bytes from the server into answers: a head, then a body framed by
    Content-Length, chunked, or the connection's end (none after 1xx, 204, 304). Only POST and GET
    are replayed, so a HEAD's bodiless answer never comes."""

    def __init__(self) -> None:
        self.buf = b""
        self.state = "head"
        self.cur: dict[str, Any] = {}
        self.need = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self.buf += data
        out: list[dict[str, Any]] = []
        while self._step(out):
            pass
        return out

    def eof(self) -> list[dict[str, Any]]:
        if self.state == "close":
            self.cur["body"] += self.buf
            self.buf = b""
            return [self._done()]
        return []

    def _done(self) -> dict[str, Any]:
        cur, self.cur, self.state = self.cur, {}, "head"
        return cur

    def _step(self, out: list[dict[str, Any]]) -> bool:
        if self.state == "head":
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            headers = [(n.strip(), v.strip()) for n, _, v in (line.partition(":") for line in lines[1:])]
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            self.cur = {"version": parts[0], "status": status, "headers": headers, "body": b""}
            low = _lower(headers)
            if 100 <= status < 200 or status in (204, 304):
                self.cur["interim"] = status < 200
                out.append(self._done())
            elif "chunked" in low.get("transfer-encoding", "").lower():
                self.state = "size"
            elif "content-length" in low:
                self.need, self.state = int(low["content-length"]), "length"
            else:
                self.state = "close"
            return True
        if self.state == "length":
            take = min(self.need, len(self.buf))
            self.cur["body"] += self.buf[:take]
            self.buf = self.buf[take:]
            self.need -= take
            if self.need == 0:
                out.append(self._done())
                return True
            return False
        if self.state in ("size", "trailer"):
            end = self.buf.find(b"\r\n")
            if end < 0:
                return False
            line, self.buf = self.buf[:end], self.buf[end + 2:]
            if self.state == "trailer":
                if not line:
                    out.append(self._done())
                return True
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            self.state, self.need = ("trailer", 0) if size == 0 else ("data", size + 2)
            return True
        if self.state == "data":
            take = min(self.need, len(self.buf))
            self.cur["body"] += self.buf[:take]
            self.buf = self.buf[take:]
            self.need -= take
            if self.need == 0:
                self.cur["body"] = self.cur["body"][:-2]  # the chunk's own CRLF
                self.state = "size"
                return True
            return False
        return False  # "close": read to the end


def _lower(headers: list[Any]) -> dict[str, str]:
    low: dict[str, str] = {}
    for name, value in headers:
        low.setdefault(name.lower(), value)
    return low


# ---------------------------------------------------------------- what an answer looks like


def look(status: int | None, version: str | None, headers: list[Any], body: bytes,
         interim: list[int]) -> dict[str, Any]:
    """The parts of an answer the replay compares (never its values)."""
    low = _lower(headers)
    kind, keys = "empty", None
    if body.strip():
        try:
            value = json.loads(body)
        except ValueError:
            kind = "not JSON"
        else:
            kind = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
                type(value), "number")
            if isinstance(value, dict):
                keys = sorted(value)
    shape: dict[str, Any] = {
        "status": status,
        "version": version,
        "body": kind,
        "keys": keys,
        "content-type": low.get("content-type", "").split(";")[0].strip().lower() or None,
        "idempotent-replayed": low.get("idempotent-replayed", "").strip().lower() or None,
        "connection: close": "close" in low.get("connection", "").lower(),
        "interim": list(interim),
    }
    for name in CHECKED_HEADERS:
        shape[name] = name in low
    return shape


def recorded_look(line: dict[str, Any]) -> dict[str, Any]:
    body = line.get("response_body")
    raw = body.encode() if body is not None else base64.b64decode(line.get("response_body_b64") or "")
    return look(line["status"], line.get("response_version"), line.get("response_headers") or [], raw,
                line.get("interim") or [])


# ---------------------------------------------------------------- the replay


class Item:
    """One recorded exchange (or a connection that carried nothing), and what the replay got."""

    def __init__(self, line: dict[str, Any], origin: float) -> None:
        self.line = line
        self.conn = line["conn"]
        self.i = line["i"]
        self.idle = bool(line.get("empty"))
        t = line["t"]
        self.request = base64.b64decode(line.get("request_b64") or "")
        segs = line.get("request_segments") or []
        self.segments: list[tuple[int, float]] = [(int(n), float(at) - origin) for n, at in segs]
        if self.request and (not self.segments or sum(n for n, _ in self.segments) != len(self.request)):
            self.segments = [(len(self.request), (t.get("req_start") or t["open"]) - origin)]
        self.send_t = self.segments[0][1] if self.request else None
        self.answered_t = t["resp_end"] - origin if t.get("resp_end") is not None else None
        self.answered = line.get("status") is not None
        self.skip = bool(line.get("partial"))
        m = WAIT_HEADER.search(self.request.split(b"\r\n\r\n", 1)[0]) if self.request else None
        self.wait_s = int(m.group(1)) / 1000 if m else 0.0
        self.latency = (t["resp_end"] - t["req_start"]) if self.answered and t.get("req_start") is not None else 0.0
        self.pipelined = False
        self.got: dict[str, Any] | None = None  # the answer the replay got
        self.why: str | None = None  # why it got none
        self.notes: list[str] = []  # differences of the connection, said against this exchange
        self.done = asyncio.Event()
        self.f_rank = -1
        self.query = ""
        if b"\r\n\r\n" in self.request:
            try:
                self.query = str(json.loads(self.request.split(b"\r\n\r\n", 1)[1]).get("query") or "")
            except (ValueError, AttributeError):
                pass
        m2 = STATEMENT.match(self.query)
        self.collection = m2.group(1) if m2 else None
        self.claim = bool(CLAIM.match(self.query))
        self.contended = False  # its collection's jobs were raced for by workers on several connections
        self.raced = False  # answered the other side of that race (accepted; see Replay.verdicts)
        self.sent_at: float | None = None  # when the replay wrote it
        self.written = asyncio.Event()  # its last byte written (a request in several writes: after the last)
        self.woken_across = False  # a held claim another connection wrote a request to while it waited

    def name(self) -> str:
        return f"conn {self.conn} #{self.i}" if not self.idle else f"conn {self.conn} (idle)"

    def request_line(self) -> str:
        if self.idle:
            return "(a connection that sent nothing)"
        if not self.request:
            return "(no request: an answer the server sent unasked)"
        return self.request.split(b"\r\n", 1)[0].decode("latin-1")


class Conn:
    """One recorded connection: its exchanges, how it ended, and the replay's socket."""

    def __init__(self, conn: int, items: list[Item], end: dict[str, Any], open_t: float, origin: float) -> None:
        self.conn = conn
        self.items = items
        self.open_t = open_t
        ce, se = end.get("client_eof"), end.get("server_eof")
        if ce is None and se is None:  # still open when the recording stopped: closed after its last event
            seen = [t for it in items for t in (it.send_t, it.answered_t) if t is not None]
            ce = max(seen, default=open_t) + origin + 0.001
        self.client_close_t = ce - origin if ce is not None else None
        self.server_close_t = se - origin if se is not None else None
        # who ended it: the client (closed at its turn) or the server (its close is expected)
        self.client_first = ce is not None and (se is None or ce <= se)
        self.writer: asyncio.StreamWriter | None = None
        self.reader: asyncio.StreamReader | None = None
        self.failed: str | None = None  # could not connect
        self.pending: list[Item] = []  # written, not yet answered
        self.closed_by_us = False
        self.server_eof_at: float | None = None
        self.last_answer_at: float | None = None
        self.unasked: list[dict[str, Any]] = []
        self.reading: asyncio.Future[None] | None = None
        self.closed = asyncio.Event()  # the client's close was made


class Replay:
    """The replay of one SDK's recording against one server (see the module's text for the order)."""

    def __init__(self, lines: list[dict[str, Any]], host: str, port: int) -> None:
        self.host, self.port = host, port
        origin = min(line["t"]["open"] for line in lines)
        by_conn: dict[int, list[dict[str, Any]]] = {}
        for line in lines:
            by_conn.setdefault(line["conn"], []).append(line)
        self.conns: list[Conn] = []
        self.items: list[Item] = []
        for c, group in sorted(by_conn.items()):
            group.sort(key=lambda x: x["i"])
            items = [Item(line, origin) for line in group]
            for prev, item in zip(items[:-1], items[1:]):  # noqa: B905 (3.9 has no strict=)
                # written before the previous answer on its connection was whole: pipelined
                item.pipelined = (prev.answered_t is not None and item.send_t is not None
                                  and item.send_t < prev.answered_t)
            conn = Conn(c, items, group[-1].get("end") or {}, group[0]["t"]["open"] - origin, origin)
            self.conns.append(conn)
            self.items.extend(items)
        self.by_no = {c.conn: c for c in self.conns}
        # the global order: every open, every request written and every close of a client, by recorded time
        events: list[tuple[float, int, int, str, Any]] = []
        for conn in self.conns:
            events.append((conn.open_t, conn.conn, -2, "open", conn))
            for item in conn.items:
                if item.request:
                    events.append((item.send_t or 0.0, conn.conn, item.i, "send", item))
            if conn.client_first:
                events.append((conn.client_close_t or 0.0, conn.conn, 1 << 30, "close", conn))
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        self.events = events
        timed = [(it.answered_t, it) for it in self.items if it.answered and it.answered_t is not None]
        timed.sort(key=lambda pair: pair[0])
        for k, (_, it) in enumerate(timed):
            it.f_rank = k
        self.answer_times: list[float] = [t for t, _ in timed]
        answered = [it for _, it in timed]
        self.answer_done = [False] * len(answered)
        self.answer_prefix = 0
        self.progress = asyncio.Event()
        self.t0 = self.start = 0.0
        self.cross = self._cross_connection_waits()
        self.tasks: list[asyncio.Future[Any]] = []
        self._contended()

    def _contended(self) -> None:
        """A collection whose jobs were claimed from several connections at once, in flight together
        (the swarm scenarios): which worker won which job there hangs on sub-millisecond timing."""
        claims: dict[str, list[Item]] = {}
        for it in self.items:
            if it.claim and it.collection and it.send_t is not None:
                claims.setdefault(it.collection, []).append(it)
        raced: set[str] = set()
        for coll, group in claims.items():
            spans = sorted((it.send_t or 0.0, self._ended(it), it.conn) for it in group)
            for k, (_, end, conn) in enumerate(spans):
                if any(s < end and c != conn for s, _, c in spans[k + 1:]):
                    raced.add(coll)
                    break
        for it in self.items:
            it.contended = it.collection in raced

    def _ended(self, it: Item) -> float:
        """When a request stopped being in flight: its answer, or its connection's close."""
        if it.answered_t is not None:
            return it.answered_t
        close = self.by_no[it.conn].client_close_t
        return close if close is not None else float("inf")

    def _cross_connection_waits(self) -> int:
        """Held claims whose recorded answer came after another connection's request was written:
        their answer may hang on it, so they can only be replayed interleaved (as this replay does)."""
        sends = sorted((it.send_t, it.conn) for it in self.items if it.request and it.send_t is not None)
        times = [s[0] for s in sends]
        n = 0
        for it in self.items:
            if it.wait_s and it.answered_t is not None and it.send_t is not None:
                lo, hi = bisect.bisect_right(times, it.send_t), bisect.bisect_left(times, it.answered_t)
                if any(sends[k][1] != it.conn for k in range(lo, hi)):
                    it.woken_across = True
                    n += 1
        return n

    def now(self) -> float:
        """The schedule's clock: the recorded time an event is due at (moved on by late answers)."""
        return time.monotonic() - self.t0

    def wall(self) -> float:
        """The clock the answers are timed on (never moved): how long a held claim was held."""
        return time.monotonic() - self.start

    async def until(self, t: float) -> None:
        """Sleeps until the replay's clock reads t: on the loop for long waits, on the spot for the
        last two milliseconds (the loop's timers are only as fine as a millisecond)."""
        delay = t - self.now()
        if delay > 0.002:
            await asyncio.sleep(delay - 0.002)
            delay = t - self.now()
        if delay > 0:
            time.sleep(delay)

    async def resolve(self, item: Item, got: dict[str, Any] | None, why: str | None = None) -> None:
        if item.done.is_set():
            return
        item.got, item.why = got, why
        item.done.set()
        if item.f_rank >= 0:
            self.answer_done[item.f_rank] = True
            while self.answer_prefix < len(self.answer_done) and self.answer_done[self.answer_prefix]:
                self.answer_prefix += 1
            self.progress.set()

    async def answers_up_to(self, need: int) -> bool:
        """Waits until every answer of the first `need` (recorded order) has come or was given up;
        answers whether it had to wait."""
        waited = False
        while self.answer_prefix < need:
            waited = True
            self.progress.clear()
            await self.progress.wait()
        return waited

    # -- the schedule: one event after the other

    async def run(self) -> None:
        self.t0 = self.start = time.monotonic() + LEAD
        last_rec: float | None = None
        for t, _, _, kind, obj in self.events:
            # at its recorded time (relative to the first connection), as the server's own timers (a
            # lease lapsing, a back-off ending, a held claim's deadline) run on that clock too; an
            # event recorded within BURST of the previous one is written at once after it, in the
            # same loop turn: the server read them together, and a held claim woken by the first saw
            # the second's rows too
            if last_rec is None or t - last_rec >= BURST:
                if t > self.now():
                    await self.until(t)
            need = bisect.bisect_right(self.answer_times, t)
            if await self.answers_up_to(need):
                # it waited for an answer that came later than recorded (a slow disk, a busy machine):
                # the schedule moves on with it, as the recorded client did, so that what follows keeps
                # its recorded gaps (a put recorded 0.3 s after a held claim is not written at once after
                # it, which would answer the claim at once where it was held)
                if self.now() > t:
                    self.t0 += self.now() - t
                # and keep the client's recorded reaction time after it
                react = t - self.answer_times[need - 1]
                if 0 < react < REACT_CAP:
                    await self.until(self.now() + react)
            if kind == "open":
                await self.open(obj)
            elif kind == "send":
                await self.send(obj)
            else:
                await self.close(obj)
            last_rec = t
        await asyncio.gather(*self.tasks)

    async def open(self, conn: Conn) -> None:
        try:
            conn.reader, conn.writer = await asyncio.open_connection(self.host, self.port)
        except OSError as e:
            conn.failed = f"could not connect: {e}"
            return
        sock = conn.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.reading = asyncio.ensure_future(self.read(conn))
        self.tasks.append(asyncio.ensure_future(self.watch(conn)))

    async def send(self, item: Item) -> None:
        conn = self.by_no[item.conn]
        prev = self.previous(conn, item)
        if prev is not None and not item.pipelined and not prev.done.is_set():
            await prev.done.wait()
        if conn.writer is None or conn.failed:
            await self.resolve(item, None, conn.failed or "not sent: the connection was not open")
            return
        if conn.server_eof_at is not None or conn.writer.is_closing():
            await self.resolve(item, None, "not sent: the server had closed the connection")
            return
        conn.pending.append(item)
        n0 = item.segments[0][0]
        conn.writer.write(item.request[:n0])
        item.sent_at = self.wall()
        if len(item.segments) > 1:  # the rest as the client wrote it, its recorded gaps apart
            self.tasks.append(asyncio.ensure_future(self.rest(conn, item)))
        else:
            item.written.set()
        if item.answered or not conn.client_first:
            self.tasks.append(asyncio.ensure_future(self.deadline(item, max(item.latency, item.wait_s) + SLACK)))

    async def rest(self, conn: Conn, item: Item) -> None:
        first_t = item.segments[0][1]
        started = self.wall()
        at = item.segments[0][0]
        try:
            for n, seg_t in item.segments[1:]:
                await self.until(self.now() + started + max(seg_t - first_t, 0.0002) - self.wall())
                if conn.writer is None or conn.writer.is_closing():
                    return
                conn.writer.write(item.request[at:at + n])
                at += n
        finally:
            item.written.set()

    async def close(self, conn: Conn) -> None:
        """The client's close, at its turn: what it had not been answered stays unanswered."""
        if conn.writer is None:
            conn.closed.set()
            return
        for item in conn.items:
            if item.sent_at is not None:
                await item.written.wait()  # written whole before the close when recorded, in its writes
            if item.answered and item.request and not item.done.is_set():
                await item.done.wait()  # answered before the close when recorded (its deadline bounds this)
        if conn.server_eof_at is not None:
            # said against the exchange whose answer was the connection's last (kept alive when recorded)
            answered = [it for it in conn.items if it.got is not None]
            last = answered[-1] if answered else conn.items[0]
            since = conn.server_eof_at - (conn.last_answer_at if conn.last_answer_at is not None
                                          else conn.open_t)
            after = "this answer" if answered else ("its last answer" if conn.unasked else "it opened")
            last.notes.append(f"the server closed the connection {since:.3f} s after {after}; "
                              "recorded: it kept it open until the client closed it")
        conn.closed_by_us = True
        conn.closed.set()
        try:
            if conn.writer.can_write_eof():
                conn.writer.write_eof()  # as the recording proxy passed the client's FIN on: a half close
            else:
                conn.writer.close()
        except (ConnectionError, OSError, RuntimeError):
            pass

    async def read(self, conn: Conn) -> None:
        assert conn.reader is not None
        parser = Answers()
        interim: list[int] = []
        while True:
            try:
                data = await conn.reader.read(65536)
            except (ConnectionError, OSError):
                data = b""
            for a in (parser.feed(data) if data else parser.eof()):
                if a.get("interim"):
                    interim.append(a["status"])
                    continue
                a["interim"], a["at"] = list(interim), self.wall()
                interim.clear()
                conn.last_answer_at = a["at"]
                if conn.pending:
                    await self.resolve(conn.pending.pop(0), a)
                else:
                    conn.unasked.append(a)
            if not data:
                if not conn.closed_by_us:
                    conn.server_eof_at = self.wall()
                why = "the client closed the connection first" if conn.closed_by_us else \
                    "the server closed the connection without answering"
                for item in conn.pending:
                    await self.resolve(item, None, why)
                conn.pending.clear()
                return

    async def watch(self, conn: Conn) -> None:
        """The connection's end: the client's close (the schedule makes it), or the server's, expected."""
        assert conn.reading is not None and conn.writer is not None
        try:
            if conn.client_first:
                await conn.reading  # ends after our close, or earlier if the server closes (noted at our close)
                await conn.closed.wait()  # the schedule's close: what it had not sent by then is resolved there
            else:
                last = conn.items[-1]
                if not last.idle:
                    await last.done.wait()
                after = max((conn.server_close_t or 0.0) - (last.answered_t or conn.open_t), 0.0)
                try:
                    await asyncio.wait_for(asyncio.shield(conn.reading), after + SLACK)
                except TimeoutError:
                    last.notes.append(f"the server kept the connection open {after + SLACK:.1f} s after its last "
                                      f"answer; recorded: it closed it {after:.3f} s after")
        finally:
            conn.writer.close()
            conn.reading.cancel()
            for item in conn.items:
                await self.resolve(item, None, "the client closed the connection first")
        for a in conn.unasked:
            target = next((it for it in reversed(conn.items) if it.got is not None and it.got["at"] <= a["at"]),
                          conn.items[0])
            target.notes.append(f"the server sent an answer no request asked for: {a['status']} "
                                f"{a['body'][:120].decode('utf-8', 'replace')}")

    async def deadline(self, item: Item, seconds: float) -> None:
        try:
            await asyncio.wait_for(item.done.wait(), max(seconds, 0.1))
        except TimeoutError:
            await self.resolve(item, None, f"no answer within {seconds:.1f} s")

    @staticmethod
    def previous(conn: Conn, item: Item) -> Item | None:
        k = conn.items.index(item)
        return conn.items[k - 1] if k > 0 else None

    # -- the verdict

    def verdicts(self, strict: bool = False) -> list[tuple[Item, list[str] | None]]:
        """Each item with its differences ([] = the same; None = skipped).

        Where workers raced for the jobs of one collection (`contended`), which of them won a job
        hangs on sub-millisecond timing that no replay reproduces: there, unless `strict`, a
        statement with `require` may be answered 412 {error} where it was 200 {affected} with
        Fenec-Seq (or the reverse), and a held claim its client gave up may be answered before the
        close. Such an item is counted the same, and `raced`. Everything else about it is compared."""
        out: list[tuple[Item, list[str] | None]] = []
        for item in self.items:
            if item.skip:
                out.append((item, None))
                continue
            diffs = list(item.notes)
            if item.idle:
                pass
            elif not item.answered:
                if item.got is not None:
                    if item.contended and not strict and item.wait_s and item.got["status"] == 200:
                        item.raced = True
                    else:
                        diffs.append(f"answered {item.got['status']}; recorded: no answer before the client closed")
            elif item.got is None:
                diffs.append(f"no answer ({item.why}); recorded {item.line['status']}")
            else:
                want = recorded_look(item.line)
                got = look(item.got["status"], item.got["version"], item.got["headers"], item.got["body"],
                           item.got["interim"])
                found = [f"{key}: {got[key]!r}, recorded {want[key]!r}" for key in want if want[key] != got[key]]
                held = self.held_difference(item)
                if held and (strict or not item.contended):
                    found.append(held)
                elif held:
                    item.raced = True
                if found and item.contended and not strict and REQUIRE.search(item.query) and got == other_side(want):
                    item.raced = True
                    found = []
                diffs.extend(found)
            out.append((item, diffs))
        return out


    @staticmethod
    def held_difference(item: Item) -> str | None:
        """A claim sent with Fenec-Wait that was held when recorded (answered HELD_S or more after it
        was written) must be held again, and one answered at once (under PROMPT_S) answered at once,
        unless another connection wrote a request while it waited: then it may have been woken by that
        request, which a late answer before it can delay in the replay; between the two nothing is said
        (how long a wake takes is not the front's to keep)."""
        if not item.wait_s or item.got is None or item.sent_at is None:
            return None
        took = item.got["at"] - item.sent_at
        if item.latency >= HELD_S and took < PROMPT_S:
            return f"answered at once ({took * 1000:.0f} ms); recorded: held {item.latency * 1000:.0f} ms"
        if item.latency < PROMPT_S and took >= HELD_S and not item.woken_across:
            return f"held {took * 1000:.0f} ms; recorded: answered at once ({item.latency * 1000:.0f} ms)"
        return None


def other_side(look_: dict[str, Any]) -> dict[str, Any]:
    """The answer of the other side of a race, for a statement with `require`: 200 {affected} with
    Fenec-Seq where it was 412 {error}, or the reverse."""
    other = dict(look_)
    if look_["status"] == 200 and look_["keys"] == ["affected"]:
        other.update({"status": 412, "keys": ["error"], "fenec-seq": False})
    elif look_["status"] == 412 and look_["keys"] == ["error"]:
        other.update({"status": 200, "keys": ["affected"], "fenec-seq": True})
    return other


# ---------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, cmd: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="wire-replay-")
        args = shlex.split(cmd)
        port = free_port() if "{port}" in cmd else None
        args = [a.replace("{port}", str(port)).replace("{file}", os.path.join(self.folder, "replay.fenec"))
                for a in args]
        self.log = open(os.path.join(self.folder, "server.log"), "w+")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.url: str | None = None
        found = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.write(line)
                self.log.flush()
                m = LISTENING.search(line)
                if m and port is None and not found.is_set():
                    self.url = m.group(1).rstrip("/")
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        if port is not None:
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        self.url = f"http://127.0.0.1:{port}"
                        break
                except OSError:
                    time.sleep(0.1)
        else:
            found.wait(60)
        if self.url is None:
            self.stop()
            self.log.seek(0)
            raise RuntimeError("the server did not start; its output:\n" + self.log.read()[-2000:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- the command


def load(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def replay_sdk(sdk: str, lines: list[dict[str, Any]], url: str, show: int, strict: bool) -> tuple[int, int, int, int]:
    parts = urlsplit(url)
    started = time.monotonic()

    async def go() -> Replay:
        replay = Replay(lines, parts.hostname or "127.0.0.1", parts.port or 80)  # its events belong to this loop
        await replay.run()
        return replay

    replay = asyncio.run(go())
    verdicts = replay.verdicts(strict)
    skipped = sum(1 for _, d in verdicts if d is None)
    differ = [(it, d) for it, d in verdicts if d]
    replayed = len(verdicts) - skipped
    same = replayed - len(differ)
    raced = sum(1 for it, d in verdicts if d == [] and it.raced)
    contended = sum(1 for it, d in verdicts if d is not None and it.contended)
    print(f"{sdk}: {replayed} replayed, {same} same, {len(differ)} differ, {skipped} skipped", flush=True)
    print(f"  {len(replay.conns)} connections; {replay.cross} held claims answered after another connection's "
          f"request (replayed interleaved); {raced} of {contended} exchanges where workers raced for jobs answered "
          f"the other side of the race{' (not accepted: --strict)' if strict else ''}; "
          f"{time.monotonic() - started:.1f} s", flush=True)
    for item, diffs in differ[:show]:
        print(f"  DIFF {item.name()}: {item.request_line()}", flush=True)
        body = item.request.split(b"\r\n\r\n", 1)[1][:160] if b"\r\n\r\n" in item.request else b""
        if body:
            print(f"       body: {body.decode('utf-8', 'replace')}", flush=True)
        for d in diffs:
            print(f"       {d}", flush=True)
    if len(differ) > show:
        print(f"  ... and {len(differ) - show} more", flush=True)
    return replayed, same, len(differ), skipped


def recorded_span(path: Path) -> float:
    """How long the recorded run took, from its first connection's open to its last event (0 for no file)."""
    if not path.exists():
        return 0.0
    times = [line["t"] for line in load(path)]
    return max((max(v for v in t.values() if v is not None) for t in times), default=0.0) - \
        min((t["open"] for t in times), default=0.0)


def replay_file(sdk: str, corpus: Path, server_cmd: str | None, url: str | None, show: int, strict: bool) -> int:
    """Replays one corpus file (against a fresh server of `server_cmd`, else `url`); answers how many
    exchanges differ. RuntimeError when it could not replay."""
    path = corpus / f"{sdk}.jsonl"
    if not path.exists():
        raise RuntimeError(f"no {path}")
    if url and sdk in STARTED_WITH:
        print(f"{sdk}: left out: recorded against a server started with {STARTED_WITH[sdk]}", flush=True)
        return 0
    lines = load(path)
    server = None
    try:
        if server_cmd:
            server = Server(f"{server_cmd} {STARTED_WITH[sdk]}" if sdk in STARTED_WITH else server_cmd)
            url = server.url or ""
        return replay_sdk(sdk, lines, url or "", show, strict)[2]
    finally:
        if server is not None:
            server.stop()


def replay_file_apart(sdk: str, corpus: Path, server_cmd: str, show: int, strict: bool) -> tuple[str, int, str | None]:
    """replay_file in a process of its own (--jobs): what it printed, how many differ, why it could not."""
    out = io.StringIO()
    differ, why = 0, None
    with contextlib.redirect_stdout(out):
        try:
            differ = replay_file(sdk, corpus, server_cmd, None, show, strict)
        except RuntimeError as e:
            why = str(e)
    return out.getvalue(), differ, why


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--server-cmd", help="a server command, started fresh per SDK ({port}, {file} filled in)")
    where.add_argument("--url", help="a running server that has seen none of this corpus")
    p.add_argument("--corpus", default=str(HERE), help="the folder of <sdk>.jsonl [this script's]")
    p.add_argument("--sdk", action="append", choices=CORPORA, help="only this SDK's corpus (repeatable) [all present]")
    p.add_argument("--show", type=int, default=10, help="differences printed per SDK [10]")
    p.add_argument("--strict", action="store_true",
                   help="no race tolerance: where workers raced for jobs, the other side of the race differs too")
    p.add_argument("--jobs", type=int, default=1,
                   help="files replayed at once, each in a process of its own against its own server "
                        "(--server-cmd only); their reports are printed whole, in corpus order [1]")
    args = p.parse_args()
    corpus = Path(args.corpus)
    sdks = args.sdk or [s for s in CORPORA if (corpus / f"{s}.jsonl").exists()]
    if not sdks:
        print(f"replay: no <sdk>.jsonl in {corpus}", file=sys.stderr)
        return 2
    if args.jobs < 1 or (args.jobs > 1 and not args.server_cmd):
        print("replay: --jobs is 1 or more, and more than 1 only with --server-cmd (a server per file)", file=sys.stderr)
        return 2
    total_differ = 0
    if args.jobs == 1:
        for sdk in sdks:
            try:
                total_differ += replay_file(sdk, corpus, args.server_cmd, args.url, args.show, args.strict)
            except RuntimeError as e:
                print(f"{sdk}: could not replay: {e}", flush=True)
                return 2
    else:
        # spawned, not forked: each replay starts threads and a server of its own
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            # the longest recorded first, so that the last to end is a short one
            runs = {sdk: pool.submit(replay_file_apart, sdk, corpus, args.server_cmd, args.show, args.strict)
                    for sdk in sorted(sdks, key=lambda sdk: -recorded_span(corpus / f"{sdk}.jsonl"))}
            failed = False
            for sdk in sdks:
                text, differ, why = runs[sdk].result()
                print(text, end="", flush=True)
                if why is not None:
                    print(f"{sdk}: could not replay: {why}", flush=True)
                    failed = True
                total_differ += differ
            if failed:
                return 2
    print(f"replay total: {total_differ} exchanges differ" if total_differ else "replay total: every exchange the same",
          flush=True)
    return 1 if total_differ else 0


if __name__ == "__main__":
    sys.exit(main())
