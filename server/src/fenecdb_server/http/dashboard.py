"""`GET /_dashboard`: the one-page dashboard, static files shipped in the package (dashboard/).

The page holds no data and needs no token to load; everything it shows it reads in the browser
through `/query`, `/batch`, `/collections`, `/_whoami`, `/_metrics` and `/_metrics/recent`
with the token the user pastes, so it sees and may do exactly what that token may. The
Content-Security-Policy keeps it to this server: no script, style or request goes elsewhere.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
PATHS = frozenset("/_dashboard" + suffix for suffix in FILES)
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'",
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def _read(name: str) -> bytes:
    return resources.files("fenecdb_server.http").joinpath("dashboard", name).read_bytes()


def add_dashboard_routes(api: FastAPI) -> None:
    for suffix, (name, media) in FILES.items():
        body = _read(name)

        def serve(body: bytes = body, media: str = media) -> Response:
            return Response(body, media_type=media, headers=HEADERS)

        api.add_api_route("/_dashboard" + suffix, serve, methods=["GET", "HEAD"])
