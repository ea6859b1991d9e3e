"""The replication flags of the command line (server.md §1.7), checked together: `Flags`, or
`BadFlags` naming what is wrong (the command line exits 2 with its message)."""

from __future__ import annotations

import os
from typing import Any

# the replication flags' lines of `fenec-server --help` (cli.py FLAGS: flag, default, what it does)
HELP: list[tuple[str, str | None, str]] = [
    ("--replication-token <value>", "env FENEC_REPLICATION_TOKEN", "serve /_replication to replicas that present "
     "it (needs --file, refuses --sync off); a replica's token for its primary"),
    ("--replica-of <url>", "none", "follow the primary at this http:// URL into --file; every write is refused 403"),
    ("--promote", "off", "open a replica's file as a writable server: its history forks"),
    ("--replication-buffer <MiB>", "64", "records kept in memory for replicas behind; one further behind is sent "
     "an image"),
    ("--sync-replicas <n>", "0", "a primary answers a write once n replicas hold it on their disks, else 503 "
     "after --sync-replicas-wait"),
    ("--sync-replicas-wait <s>", "10", "how long a write's answer waits for --sync-replicas"),
    ("--etcd <url>[,<url>...]", "none", "join a cluster whose primary is elected through etcd (needs --cluster, "
     "--advertise, --replication-token, --file)"),
    ("--cluster <name>", "none", "the cluster's name: its keys in etcd are under /fenec/<name>/"),
    ("--advertise <url>", "none", "the http:// URL the other members and the clients reach this server at"),
    ("--lease-ttl <s>", "3", "the leader's etcd lease: a primary that cannot renew it stops acknowledging "
     "writes before it lapses; a new primary is elected after it does"),
]
VALUE_FLAGS = {"--replication-token", "--replica-of", "--replication-buffer", "--sync-replicas",
               "--sync-replicas-wait", "--etcd", "--cluster", "--advertise", "--lease-ttl"}
SWITCHES = {"--promote"}


class BadFlags(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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
        self.lease_ttl = 3


def _http_url(flag: str, text: str) -> str:
    t = text.strip()
    if not t.lower().startswith("http://") or not t[7:].strip("/"):
        raise BadFlags(f"{flag} expects an http://host:port URL, not {text!r}")
    return t.rstrip("/")


def _cluster(opts: dict[str, Any], flags: Flags) -> None:
    """`--etcd`, `--cluster`, `--advertise`, `--lease-ttl` (replication/cluster.py)."""
    etcd = opts.get("etcd")
    given = [f for f in ("cluster", "advertise", "lease-ttl") if opts.get(f) is not None]
    if etcd is None:
        if given:
            raise BadFlags(f"--{given[0]} is a cluster member's: it needs --etcd")
        return
    if flags.primary is not None or opts.get("promote"):
        raise BadFlags("--etcd excludes --replica-of and --promote: in a cluster the election decides who leads")
    flags.etcd = [_http_url("--etcd", e) for e in etcd.split(",") if e.strip()]
    if not flags.etcd:
        raise BadFlags("--etcd expects etcd's client URLs, comma-separated")
    name = (opts.get("cluster") or "").strip()
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise BadFlags("--etcd needs --cluster <name> (letters, digits, - _ .)")
    if opts.get("advertise") is None:
        raise BadFlags("--etcd needs --advertise <url>: the http:// URL the other members reach this server at")
    flags.cluster = name
    flags.advertise = _http_url("--advertise", opts["advertise"])
    flags.lease_ttl = _count("--lease-ttl", opts.get("lease-ttl", "3"), minimum=2)


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
        if opts.get("etcd") is not None:
            raise BadFlags("--etcd needs --replication-token: the members stream to each other with it")
        return None
    if not path:
        raise BadFlags("--replication-token needs --file: replication streams the data file's records")
    if sync == "off":
        raise BadFlags("--replication-token refuses --sync off: only writes on the primary's disk are sent, "
                       "and under --sync off none is until shutdown")
    flags = Flags(token, primary, buffer_mib << 20, sync_replicas, wait_s)
    _cluster(opts, flags)
    return flags
