"""The one routing table: every route the server answers, by method and path, and how.

Both doors read it: the transport (protocol.py) answers the DIRECT routes itself when it can
(`Service.handle`), and the ASGI door (asgi.py) answers every route, handing the COLD and PUBLIC
ones to the FastAPI app of routes.py. A (method, path) not in the table is 404.

How a route is answered, in the order its checks run (asgi.py):

* HEALTH: before anything else, with no token;
* PUBLIC: a FastAPI route with no data in it, with no token (the OpenAPI document, the dashboard's files);
* DIRECT: `/query` and `/batch`, the service (app.py) with the data token;
* COLD: a FastAPI route (routes.py, admin.py) with the token its path asks: a metrics token for
  METRICS_PATHS, else the data token;
* WHOAMI: the caller's token, as the server reads it;
* REPLICATION: replication's routes (replication.py), with the replication token alone.
"""

from __future__ import annotations

from typing import Final

HEALTH = 1
PUBLIC = 2
DIRECT = 3
COLD = 4
WHOAMI = 5
REPLICATION = 6

DASHBOARD_PATHS = ("/_dashboard", "/_dashboard/app.js", "/_dashboard/style.css")

ROUTES: dict[tuple[str, str], int] = {
    ("GET", "/_health"): HEALTH,
    ("HEAD", "/_health"): HEALTH,
    ("GET", "/_openapi.json"): PUBLIC,
    ("HEAD", "/_openapi.json"): PUBLIC,
    **{(method, path): PUBLIC for path in DASHBOARD_PATHS for method in ("GET", "HEAD")},
    ("POST", "/query"): DIRECT,
    ("POST", "/batch"): DIRECT,
    **{(method, path): COLD for path in ("/", "/collections", "/_metrics", "/_metrics/recent")
       for method in ("GET", "HEAD")},
    ("POST", "/_admin/compact"): COLD,
    ("GET", "/_admin/backup"): COLD,
    ("GET", "/_whoami"): WHOAMI,
    ("HEAD", "/_whoami"): WHOAMI,
    ("GET", "/_replication"): REPLICATION,
    ("GET", "/_replication/status"): REPLICATION,
    ("POST", "/_replication/promote"): REPLICATION,
    ("POST", "/_replication/ack"): REPLICATION,
}

# read with a metrics token (the admin token may read them; access.md §2), whatever the method
METRICS_PATHS = frozenset({"/_metrics", "/_metrics/recent"})
# the targets the transport hands the service (`Service.handle`), all of them POST: the DIRECT routes,
# and a replica's ack, which the service answers at once with the replication token (else the door does)
DIRECT_TARGETS: Final = frozenset([*(path.encode() for (method, path), how in ROUTES.items() if how == DIRECT),
                            b"/_replication/ack"])
# what a connection in the reserve past --max-connections may ask (protocol.py)
SPARE_TARGETS: Final = frozenset({b"/_health", b"/_metrics"})


def route(method: str, path: str) -> int:
    """How (method, path) is answered; 0 for no route (404)."""
    return ROUTES.get((method, path), 0)
