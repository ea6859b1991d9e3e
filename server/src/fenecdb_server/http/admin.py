"""The operator's routes (docs/operations.md), on the cold app of routes.py:

* `POST /_admin/compact`: compact the data file now, whatever `--auto-compact` says. Writes go
  on while the snapshot is written; they wait only for the copy of the row maps under the write
  lock and for the final swap under the log's lock. Answers the bytes before and after and both
  waits (`write_lock_us`, `lock_us`). 409 in memory, or while another compaction runs.
* `GET /_admin/backup`: a consistent copy of the running database, streamed as a data file
  (`fenec-server --file <it>` opens it). `Fenec-Seq` is the change number it holds: every write
  answered with a lower or equal `Fenec-Seq` is in it, none after.
* `GET /_metrics/recent`: the last ten minutes of per-second samples of the queue counters'
  totals, and per queue their rates over about the last minute (metrics.Recent), for the
  dashboard's rates; read like `/_metrics`, whose tokens may read every queue.

`App.http` checked the token before routing here: `/_admin/*` takes the server token (or a
server with no token at all, which binds only loopback); a scoped token is refused 403.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from ..database import Pace
from ..errors import FenecError
from . import errors as E

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("fenec.http")
JSON = "application/json; charset=utf-8"
CHUNK = 1 << 20
ADMIN_ONLY = "the server token only: /_admin routes are not for scoped tokens"


def _refused(request: Request) -> Response | None:
    caller = request.scope.get("fenec.caller")
    if caller is not None and caller.scoped:
        return Response(E.body(ADMIN_ONLY), status_code=403, media_type=JSON)
    return None


def add_admin_routes(api: FastAPI, app: App) -> None:
    from .app import dumps

    @api.post("/_admin/compact")
    async def compact(request: Request) -> Response:
        refused = _refused(request)
        if refused is not None:
            return refused
        if getattr(app.db, "path", None) is None:
            return Response(E.body("an in-memory database has no file to compact"), status_code=409,
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

    @api.get("/_admin/backup")
    async def backup(request: Request) -> Response:
        refused = _refused(request)
        if refused is not None:
            return refused
        loop = asyncio.get_running_loop()
        try:
            seq, data = await loop.run_in_executor(None, lambda: app.db.backup(pace=Pace(app.requests)))
        except FenecError as e:
            status, body = E.answer(e)
            return Response(body, status_code=status, media_type=JSON)
        headers = {"fenec-seq": str(seq), "content-length": str(len(data)),
                   "content-disposition": f'attachment; filename="fenec-backup-{seq}.fenec"'}

        async def chunks() -> Any:
            view = memoryview(data)
            for at in range(0, len(data), CHUNK):
                yield bytes(view[at:at + CHUNK])

        return StreamingResponse(chunks(), headers=headers, media_type="application/octet-stream")

    @api.api_route("/_metrics/recent", methods=["GET", "HEAD"])
    async def recent() -> Response:
        return Response(dumps(app.recent.render()), media_type=JSON)
