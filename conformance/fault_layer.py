"""The fault layer of `faults.py`: the real `fenec-server` on a data file, and a TCP proxy before it.

Workers talk to the proxy only; the driver reads the server's rows directly. The proxy runs an
asyncio loop on a thread of its own and keeps its port for the whole run, whatever it does:

    pass      forward bytes both ways to the server's current port
    refuse    the listener is closed (a connect is refused) and every open connection is cut
    cut       every open connection is reset now (SO_LINGER 0); new ones pass
    freeze    new connections are accepted and never answered; open ones stop forwarding (what
              either side sends is dropped) until `pass`, which resets the frozen ones
    drop      the answer of each of the next N requests whose text holds a given string is cut:
              the request reaches the server and runs, its answer never reaches the client
    busy      each of the next N new connections is answered what the server answers past its
              `--max-connections`: 503 `{"error":"too many connections"}`, then closed; nothing is run

HTTP/1.1 without pipelining is assumed (every client here sends one request at a time on a
connection), so the first bytes from the server after a request are that request's answer.

`ServerProcess` restarts the server on the same file; the proxy is then pointed at its new port.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

LISTENING = re.compile(r"listening on: http://127\.0\.0\.1:([0-9]+)")
START_S = 60
STOP_S = 30
CHUNK = 65536
T = TypeVar("T")


class ServerProcess:
    """`fenec-server --file <path> --http 127.0.0.1:<port> [flags]`, in a process group of its own;
    port 0 (the default) lets the server pick a free one at each start."""

    def __init__(self, exe: Path, data_file: Path, flags: tuple[str, ...] = (), port: int = 0) -> None:
        self.exe = exe
        self.given_port = port
        self.data_file = data_file
        self.flags = flags
        self.proc: subprocess.Popen[str] | None = None
        self.port: int | None = None
        self.log: list[str] = []
        self.starts = 0

    @property
    def url(self) -> str:
        assert self.port is not None, "the server is not running"
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> int:
        """Starts the server and answers its port, once its data is loaded and it listens."""
        self.starts += 1
        self.port = None
        proc = subprocess.Popen([str(self.exe), "--file", str(self.data_file), "--http", f"127.0.0.1:{self.given_port}",
                                 *self.flags],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        self.proc = proc
        found = threading.Event()
        port: list[int] = []

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(f"[server {self.starts}] {line.rstrip()}")
                m = LISTENING.search(line)
                if m and not found.is_set():
                    port.append(int(m.group(1)))
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        found.wait(START_S)
        if not port:
            self.kill()
            raise RuntimeError("fenec-server did not start: " + " | ".join(self.log[-5:]))
        self.port = port[0]
        return self.port

    def stop(self) -> None:
        """SIGTERM (the server's clean stop), waited for; killed if it outlives STOP_S."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


class _Conn:
    def __init__(self, client: asyncio.StreamWriter, frozen: bool) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.frozen = frozen
        self.request = b""       # the bytes of the request in flight, for `drop`
        self.answering = False   # the server has begun to answer that request
        self.closed = False


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Closes a socket with a reset (RST), as a dying peer or a middlebox does."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
        b"Content-Length: 32\r\nConnection: close\r\n\r\n{\"error\":\"too many connections\"}")


async def _answer_busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads one request whole (head and Content-Length body), answers 503 and closes."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip() or 0)
        if length:
            await reader.readexactly(length)
        writer.write(BUSY)
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        pass
    writer.close()


class Proxy:
    """A TCP proxy on 127.0.0.1:<its own port> before the server's current port."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fault-proxy", daemon=True)
        self.listener: asyncio.Server | None = None
        self.port = 0
        self.upstream_port = 0
        self.mode = "pass"
        self.drop_left = 0
        self.drop_match = b""
        self.busy_left = 0
        self.conns: set[_Conn] = set()
        self.accepted = 0
        self.cut_conns = 0      # connections reset by `cut`, `refuse` and the end of a `freeze`
        self.dropped = 0
        self.busied = 0         # connections answered 503 by `busy`

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await make()
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(30)

    def start(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.thread.start()
        self._run(self._listen)

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        try:
            self._run(self._close)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    # the modes, called from the driver's thread

    def pass_(self, upstream_port: int | None = None) -> None:
        self._run(lambda: self._pass(upstream_port))

    def refuse(self) -> None:
        self._run(self._refuse)

    def cut(self) -> None:
        self._run(self._cut)

    def freeze(self) -> None:
        self._run(self._freeze)

    def reset(self) -> None:
        """Back to `pass`, nothing to drop, the counters at zero: a scenario's start."""
        self.pass_()

        async def zero() -> None:
            self.drop_left, self.drop_match, self.busy_left = 0, b"", 0
            self.accepted = self.cut_conns = self.dropped = self.busied = 0
        self._run(zero)

    def busy(self, n: int) -> None:
        async def set_busy() -> None:
            self.busy_left = n
        self._run(set_busy)

    def drop_answers(self, n: int, match: str) -> None:
        async def set_drop() -> None:
            self.drop_left = n
            self.drop_match = match.lower().encode()
        self._run(set_drop)

    # the loop's side

    async def _listen(self) -> None:
        self.listener = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = self.listener.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        await self._cut()
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    async def _pass(self, upstream_port: int | None) -> None:
        if upstream_port is not None:
            self.upstream_port = upstream_port
        if self.mode == "freeze":
            for conn in [c for c in self.conns if c.frozen]:
                self._drop_conn(conn)
        self.mode = "pass"
        if self.listener is None:
            for _ in range(100):  # the port was ours a moment ago; a connect may hold it for a while
                try:
                    await self._listen()
                    break
                except OSError:
                    await asyncio.sleep(0.1)
            else:
                raise RuntimeError(f"the proxy could not listen again on port {self.port}")

    async def _refuse(self) -> None:
        self.mode = "refuse"
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        await self._cut()

    async def _cut(self) -> None:
        for conn in list(self.conns):
            self._drop_conn(conn)
            self.cut_conns += 1

    async def _freeze(self) -> None:
        self.mode = "freeze"
        for conn in self.conns:
            conn.frozen = True

    def _drop_conn(self, conn: _Conn) -> None:
        conn.closed = True
        _reset(conn.client)
        _reset(conn.upstream)
        self.conns.discard(conn)

    def _end_conn(self, conn: _Conn) -> None:
        """One side closed: close both, after what was already written has gone out."""
        conn.closed = True
        for writer in (conn.client, conn.upstream):
            if writer is not None and not writer.transport.is_closing():
                writer.close()
        self.conns.discard(conn)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == "refuse":
            _reset(writer)
            return
        if self.busy_left > 0 and self.mode == "pass":
            self.busy_left -= 1
            self.busied += 1
            await _answer_busy(reader, writer)
            return
        conn = _Conn(writer, frozen=self.mode == "freeze")
        self.conns.add(conn)
        if conn.frozen:
            await self._swallow(reader, conn)
            return
        try:
            up_reader, conn.upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            self._drop_conn(conn)
            return
        if conn.closed:
            _reset(conn.upstream)
            return
        await asyncio.gather(self._to_server(reader, conn), self._to_client(up_reader, conn))

    async def _swallow(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        try:
            while not conn.closed and await reader.read(CHUNK):
                pass
        except OSError:
            pass
        if not conn.closed:
            self._end_conn(conn)

    async def _to_server(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        try:
            while not conn.closed:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if conn.frozen:
                    continue
                if conn.answering:
                    conn.answering, conn.request = False, b""
                conn.request = (conn.request + data)[-CHUNK:]
                assert conn.upstream is not None
                conn.upstream.write(data)
                await conn.upstream.drain()
        except OSError:
            pass
        if not conn.closed:
            self._end_conn(conn)

    async def _to_client(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        try:
            while not conn.closed:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if conn.frozen:
                    continue
                if not conn.answering:
                    conn.answering = True
                    if self.drop_left > 0 and self.drop_match in conn.request.lower():
                        self.drop_left -= 1
                        self.dropped += 1
                        self._drop_conn(conn)
                        return
                conn.client.write(data)
                await conn.client.drain()
        except OSError:
            pass
        if not conn.closed:
            self._end_conn(conn)
