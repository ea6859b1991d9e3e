"""The operator's routes (docs/operations.md), on the cold app of routes.py:

* `POST /_admin/compact`: compact the data file now, whatever `--auto-compact` says. Writes go
  on while the snapshot is written; they wait only for the copy of the row maps under the write
  lock and for the final swap under the log's lock. Answers the bytes before and after and both
  waits (`write_lock_us`, `lock_us`). 409 in memory, or while another compaction runs.
* `GET /_admin/backup`: a consistent copy of the running database, streamed as a data file
  (`fenec-server --file <it>` opens it). `Fenec-Seq` is the change number it holds: every write
  answered with a lower or equal `Fenec-Seq` is in it, none after. The copy is written to a
  temporary file first (one backup at a time), then sent from it as its reader takes it.
* `GET /_metrics/recent`: the last ten minutes of per-second samples of the queue counters'
  totals, and per queue their rates over about the last minute (metrics.Recent), for the
  dashboard's rates; read like `/_metrics`, whose tokens may read every queue. With replication on,
  `replication` holds what `GET /_replication/status` answers (its history id left out): the
  dashboard shows the role, a replica's primary and lag, a primary's replicas.

The ASGI door (asgi.py) checked the token before routing here: `/_admin/*` takes the server token (or a
server with no token at all, which binds only loopback); a scoped token is refused 403.
"""

from __future__ import annotations

import asyncio
import logging
from typing import IO, TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from ..database import Pace
from ..errors import FenecError
from . import errors as E

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("fenec.http")
JSON = "application/json; charset=utf-8"
CHUNK = 256 << 10  # bytes of a backup read from its file at a time
ADMIN_ONLY = "the server token only: /_admin routes are not for scoped tokens"


def _refused(request: Request) -> Response | None:
    caller = request.scope.get("fenec.caller")
    if caller is not None and caller.scoped:
        return Response(E.body(ADMIN_ONLY), status_code=E.FORBIDDEN, media_type=JSON)
    return None


class FileAnswer(Response):
    """A backup's temporary file (`Database.backup_file`) as the answer's body, CHUNK bytes at a
    time, each read only once the last is in the transport: the transport's `send` (cycle.py) waits while the
    transport is paused (its buffer past the high mark), so a connection holds at most that buffer
    and one chunk, whoever reads it and however slowly. A reader paused past --idle-timeout is cut
    (connection.py); the chunks stop at the cut, and the file is closed, which frees its room on
    the disk, however the answer ends."""

    def __init__(self, file: IO[bytes], headers: dict[str, str]) -> None:
        super().__init__(headers=headers, media_type="application/octet-stream")
        self.file = file

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        conn = scope.get("fenec.conn")  # the connection's protocol: its transport tells a cut
        loop = asyncio.get_running_loop()
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            while True:
                if conn is not None and conn.transport.is_closing():
                    return
                piece = await loop.run_in_executor(None, self.file.read, CHUNK)
                await send({"type": "http.response.body", "body": piece, "more_body": bool(piece)})
                if not piece:
                    return
        finally:
            self.file.close()


def add_admin_routes(api: FastAPI, app: App) -> None:
    from .bodies import dumps

    @api.post("/_admin/compact")
    async def compact(request: Request) -> Response:
        refused = _refused(request)
        if refused is not None:
            return refused
        if app.db.path is None:
            return Response(E.body("an in-memory database has no file to compact"), status_code=E.CONFLICT,
                            media_type=JSON)
        loop = asyncio.get_running_loop()
        try:
            done = await loop.run_in_executor(None, lambda: app.db.compact(pace=Pace(app.requests)))
        except FenecError as e:
            status, body = E.answer(e)
            return Response(body, status_code=status, media_type=JSON)
        log.warning("compacted on demand: %s -> %s bytes, write lock held %.1f ms, log lock held %.1f ms",
                    f"{done['bytes_before']:,}", f"{done['bytes_after']:,}", done["write_lock_us"] / 1000,
                    done["lock_us"] / 1000)
        return Response(dumps(done), media_type=JSON)

    building = asyncio.Lock()  # one backup's copy written at a time: each holds a copy of the row maps

    @api.get("/_admin/backup")
    async def backup(request: Request) -> Response:
        refused = _refused(request)
        if refused is not None:
            return refused
        loop = asyncio.get_running_loop()
        try:
            async with building:
                seq, size, file = await loop.run_in_executor(
                    None, lambda: app.db.backup_file(pace=Pace(app.requests)))
        except FenecError as e:
            status, body = E.answer(e)
            return Response(body, status_code=status, media_type=JSON)
        headers = {"fenec-seq": str(seq), "content-length": str(size),
                   "content-disposition": f'attachment; filename="fenec-backup-{seq}.fenec"'}
        return FileAnswer(file, headers)

    @api.api_route("/_metrics/recent", methods=["GET", "HEAD"])
    async def recent() -> Response:
        doc = app.recent.render()
        node = app.config.replication
        if node is not None:
            status = node.status()
            status.pop("history", None)
            doc["replication"] = status
        return Response(dumps(doc), media_type=JSON)
