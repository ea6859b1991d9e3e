"""The replication flags of the command line (server.md §1.7), checked together: `Flags`, or
`BadFlag` naming what is wrong (the command line exits 2 with its message). The flags, their
defaults and help lines are rows of the command line's table (flags.py)."""

from __future__ import annotations

import os
from typing import Any

from ..flags import DEFAULTS, BadFlag, given, seconds, whole


class Flags:
    """The replication asked for: the token, the primary followed (None: this is a primary)."""

    __slots__ = ("token", "primary", "buffer_bytes", "sync_replicas", "sync_wait_s", "etcd", "cluster",
                 "advertise", "lease_ttl")

    def __init__(self, token: str, primary: str | None, buffer_bytes: int, sync_replicas: int,
                 sync_wait_s: float) -> None:
        self.token = token
        self.primary = primary
        self.buffer_bytes = buffer_bytes
        self.sync_replicas = sync_replicas
        self.sync_wait_s = sync_wait_s
        self.etcd: list[str] = []  # --etcd's endpoints (none: no cluster)
        self.cluster = ""
        self.advertise = ""
        self.lease_ttl = int(DEFAULTS["--lease-ttl"])


def _http_url(flag: str, text: str) -> str:
    t = text.strip()
    if not t.lower().startswith("http://") or not t[7:].strip("/"):
        raise BadFlag(f"{flag} expects an http://host:port URL, not {text!r}")
    return t.rstrip("/")


def _cluster(opts: dict[str, Any], flags: Flags) -> None:
    """`--etcd`, `--cluster`, `--advertise`, `--lease-ttl` (replication/cluster.py)."""
    etcd = opts.get("etcd")
    if etcd is None:
        return
    if flags.primary is not None or opts.get("promote"):
        raise BadFlag("--etcd excludes --replica-of and --promote: in a cluster the election decides who leads")
    flags.etcd = [_http_url("--etcd", e) for e in etcd.split(",") if e.strip()]
    if not flags.etcd:
        raise BadFlag("--etcd expects etcd's client URLs, comma-separated")
    name = (opts.get("cluster") or "").strip()
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise BadFlag("--etcd needs --cluster <name> (letters, digits, - _ .)")
    if opts.get("advertise") is None:
        raise BadFlag("--etcd needs --advertise <url>: the http:// URL the other members reach this server at")
    flags.cluster = name
    flags.advertise = _http_url("--advertise", opts["advertise"])
    flags.lease_ttl = whole("--lease-ttl", given(opts, "--lease-ttl"), minimum=2)


def checked(opts: dict[str, Any], path: str | None, sync: str | int) -> Flags | None:
    """The replication flags of `opts` (the parsed command line), or None when replication is
    off. Raises BadFlag on a bad value or combination."""
    token = opts.get("replication-token") or os.environ.get("FENEC_REPLICATION_TOKEN") or None
    primary = opts.get("replica-of")
    member = next((f for f in ("--cluster", "--advertise", "--lease-ttl") if f[2:] in opts), None)
    if member is not None and "etcd" not in opts:  # with or without a token: never taken silently
        raise BadFlag(f"{member} is a cluster member's: it needs --etcd")
    buffer_mib = whole("--replication-buffer", given(opts, "--replication-buffer"), minimum=1)
    sync_replicas = whole("--sync-replicas", given(opts, "--sync-replicas"))
    wait_s = seconds("--sync-replicas-wait", given(opts, "--sync-replicas-wait"))
    if sync_replicas and (primary or not token):
        raise BadFlag("--sync-replicas is a primary's: it needs --replication-token, and no --replica-of")
    if opts.get("promote"):
        if primary:
            raise BadFlag("--promote and --replica-of exclude each other: a promoted server follows no one")
        if not path:
            raise BadFlag("--promote needs --file: the replica's file to open")
    if primary is not None:
        if primary.lower().startswith("https://"):
            raise BadFlag("--replica-of: no TLS to a primary; give its http:// URL")
        if not primary.lower().startswith("http://") or not primary[7:].strip("/"):
            raise BadFlag("--replica-of expects the primary's URL, http://host:port")
        if not token:
            raise BadFlag("--replica-of needs --replication-token (the primary's)")
        primary = primary.rstrip("/")
    if token is None:
        if opts.get("etcd") is not None:
            raise BadFlag("--etcd needs --replication-token: the members stream to each other with it")
        return None
    if not path:
        raise BadFlag("--replication-token needs --file: replication streams the data file's records")
    if sync == "off":
        raise BadFlag("--replication-token refuses --sync off: only writes on the primary's disk are sent, "
                      "and under --sync off none is until shutdown")
    flags = Flags(token, primary, buffer_mib << 20, sync_replicas, wait_s)
    _cluster(opts, flags)
    return flags
