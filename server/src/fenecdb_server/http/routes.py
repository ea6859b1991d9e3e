"""The routes nobody calls in a loop, as a FastAPI app behind the raw hot path (app.py):
`GET /`, `GET /collections`, `GET /_metrics`, `GET /_openapi.json` (HEAD alike).

The token, the method and the body ceilings were already checked by `App.http`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import Response

from .openapi import document_bytes

if TYPE_CHECKING:
    from .app import App

JSON = "application/json; charset=utf-8"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def schemas(db: Any) -> list[dict[str, Any]]:
    """`GET /collections`: every collection's fields, as the engine describes them."""
    describe = getattr(db, "schemas", None) or getattr(db, "collections", None)
    if callable(describe):
        return list(describe())
    return [{"name": name, "fields": []} for name in sorted(db.stats().get("collections", {}))]


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
    from .app import dumps

    api = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    version = app.config.version
    headers = {"x-fenecdb-version": version}
    cors = {k.decode(): v.decode() for k, v in app.cors_headers}

    @api.api_route("/", methods=["GET", "HEAD"])
    async def root() -> Response:
        names = [c["name"] for c in schemas(app.db)]
        return Response(dumps({"fenecdb": version, "collections": names}), media_type=JSON,
                        headers={**headers, **cors})

    @api.api_route("/collections", methods=["GET", "HEAD"])
    async def collections() -> Response:
        listed = [documented(c) for c in schemas(app.db)]
        return Response(dumps(listed), media_type=JSON, headers={**headers, **cors})

    @api.api_route("/_metrics", methods=["GET", "HEAD"])
    async def metrics() -> Response:
        text = app.metrics.render(app.db, app.waits, app.connections)
        return Response(text, headers={"content-type": PROMETHEUS, **cors})

    @api.api_route("/_openapi.json", methods=["GET", "HEAD"])
    async def openapi() -> Response:
        return Response(document_bytes(), media_type=JSON, headers=cors)

    return api
