"""The replication flags of the command line (server.md §1.7), checked together: `Flags`, or
`BadFlags` naming what is wrong (the command line exits 2 with its message)."""

from __future__ import annotations

import os
from typing import Any


class BadFlags(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Flags:
    """The replication asked for: the token, the primary followed (None: this is a primary)."""

    __slots__ = ("token", "primary", "buffer_bytes", "sync_replicas", "sync_wait_s")

    def __init__(self, token: str, primary: str | None, buffer_bytes: int, sync_replicas: int,
                 sync_wait_s: float) -> None:
        self.token = token
        self.primary = primary
        self.buffer_bytes = buffer_bytes
        self.sync_replicas = sync_replicas
        self.sync_wait_s = sync_wait_s


def _count(flag: str, text: str, minimum: int = 0) -> int:
    t = text.strip()
    if not t.isdigit() or int(t) < minimum:
        raise BadFlags(f"{flag} expects a whole number of at least {minimum}, not {text!r}")
    return int(t)


def _seconds(flag: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 0 <= value < 10**9:
        raise BadFlags(f"{flag} expects seconds, not {text!r}")
    return value


def checked(opts: dict[str, Any], path: str | None, sync: str | int) -> Flags | None:
    """The replication flags of `opts` (the parsed command line), or None when replication is
    off. Raises BadFlags on a bad value or combination."""
    token = opts.get("replication-token") or os.environ.get("FENEC_REPLICATION_TOKEN") or None
    primary = opts.get("replica-of")
    buffer_mib = _count("--replication-buffer", opts.get("replication-buffer", "64"), minimum=1)
    sync_replicas = _count("--sync-replicas", opts.get("sync-replicas", "0"))
    wait_s = _seconds("--sync-replicas-wait", opts.get("sync-replicas-wait", "10"))
    if sync_replicas and (primary or not token):
        raise BadFlags("--sync-replicas is a primary's: it needs --replication-token, and no --replica-of")
    if opts.get("promote"):
        if primary:
            raise BadFlags("--promote and --replica-of exclude each other: a promoted server follows no one")
        if not path:
            raise BadFlags("--promote needs --file: the replica's file to open")
    if primary is not None:
        if primary.lower().startswith("https://"):
            raise BadFlags("--replica-of: no TLS to a primary; give its http:// URL")
        if not primary.lower().startswith("http://") or not primary[7:].strip("/"):
            raise BadFlags("--replica-of expects the primary's URL, http://host:port")
        if not token:
            raise BadFlags("--replica-of needs --replication-token (the primary's)")
        primary = primary.rstrip("/")
    if token is None:
        return None
    if not path:
        raise BadFlags("--replication-token needs --file: replication streams the data file's records")
    if sync == "off":
        raise BadFlags("--replication-token refuses --sync off: only writes on the primary's disk are sent, "
                       "and under --sync off none is until shutdown")
    return Flags(token, primary, buffer_mib << 20, sync_replicas, wait_s)
