"""The routes nobody calls in a loop, as a FastAPI app behind the ASGI door (asgi.py):
`GET /`, `GET /collections`, `GET /_metrics`, `GET /_openapi.json` (HEAD alike), and the
operator's: `/_admin/*` and `/_metrics/recent` (admin.py), `/_dashboard` (dashboard.py).

The token, the method and the body ceilings were already checked by the ASGI door (asgi.py), which leaves
the caller in the ASGI scope (`fenec.caller`): a scoped token is listed only the collections it
may read (access.md §3.2: one it may only insert into is not listed to it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from .openapi import document_bytes
from .replication import metrics_text

if TYPE_CHECKING:
    from ..database import Database
    from .app import App

JSON = "application/json; charset=utf-8"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def schemas(db: Database, scope: Any = None) -> list[dict[str, Any]]:
    """`GET /collections`: every collection's fields, as the engine describes them; under a
    scoped token only the collections it may read."""
    found = db.schemas()
    if scope is None:
        return found
    return [c for c in found if scope.grants(c["name"]).has("read")]


def _scope(request: Request) -> Any:
    caller = request.scope.get("fenec.caller")
    return caller.scope if caller is not None else None


FIELD_KEYS = ("name", "type", "index", "required")


def documented(schema: dict[str, Any]) -> dict[str, Any]:
    """A collection in exactly http.md's `GET /collections` shape: its name and its fields'
    name, type, index and required (the engine's own description also holds path indexes and
    @ttl durations, which the protocol does not list)."""
    fields = [{k: f.get(k) for k in FIELD_KEYS} for f in schema.get("fields", [])]
    for f in fields:
        f["required"] = bool(f["required"])
    return {"name": schema["name"], "fields": fields}


def build_routes(app: App) -> FastAPI:
    from .bodies import dumps

    api = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    version = app.config.version
    headers = {"x-fenecdb-version": version}
    cors = {k.decode(): v.decode() for k, v in app.cors_headers}

    @api.api_route("/", methods=["GET", "HEAD"])
    async def root(request: Request) -> Response:
        names = [c["name"] for c in schemas(app.db, _scope(request))]
        return Response(dumps({"fenecdb": version, "collections": names}), media_type=JSON,
                        headers={**headers, **cors})

    @api.api_route("/collections", methods=["GET", "HEAD"])
    async def collections(request: Request) -> Response:
        listed = [documented(c) for c in schemas(app.db, _scope(request))]
        return Response(dumps(listed), media_type=JSON, headers={**headers, **cors})

    @api.api_route("/_metrics", methods=["GET", "HEAD"])
    async def metrics() -> Response:
        text = app.metrics.render(app.db, app.lines, app.connections)
        text += metrics_text(app.config.replication)
        return Response(text, headers={"content-type": PROMETHEUS, **cors})

    @api.api_route("/_openapi.json", methods=["GET", "HEAD"])
    async def openapi() -> Response:
        return Response(document_bytes(), media_type=JSON, headers=cors)

    from .admin import add_admin_routes
    from .dashboard import add_dashboard_routes

    add_admin_routes(api, app)
    add_dashboard_routes(api)
    return api
