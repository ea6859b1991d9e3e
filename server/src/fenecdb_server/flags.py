"""The flags of `fenec-server`: one table, that `cli.py` parses the command line and prints
`--help` from, and every module with a default for a flag reads it from (`DEFAULTS`: the auth
delay, the HTTP limits and timeouts, the replication flags). It imports nothing of ours, so that
any layer checking a flag reads this table rather than a copy of a row.

A row is (flag, default, what it does). `flag` spells the flag's names, then its value when it
takes one ("-f, --file <path>", "--sync off|always|<ms>"); a switch is its names alone
("--promote"). The default is what `--help` shows in brackets; where the flag, not given, has a
value, it is that value as it would be typed ("64", "127.0.0.1:8080"), and `given` answers it.

A refused value or combination raises `BadFlag`: the command line says its message and exits 2.
"""

from __future__ import annotations

from typing import Any

FLAGS: list[tuple[str, str | None, str]] = [
    ("-f, --file <path>", "none: in memory", "the database file, created if missing"),
    ("--http <host:port>", "127.0.0.1:8080", "where the listener binds (port 0: any free port)"),
    ("--insecure", "off", "allow a non-loopback bind with no token"),
    ("--sync off|always|<ms>", "250", "when writes reach the disk"),
    ("--auto-compact <ratio>|off", "0.5", "compact once this share of the file is dead (and >= 64 MB)"),
    ("--max-connections <n>", "100", "concurrent connections, held claims included, 0 = unlimited; at it (with tokens) a new "
     "one closes the longest-idle one that presented no accepted token, else 503 (8 more may ask /_health or "
     "/_metrics)"),
    ("--idle-timeout <s>", "60", "close a keep-alive connection silent this long, and cut one that reads none of "
     "its answer this long; 0 = never"),
    ("--header-timeout <s>", "10", "a request head must arrive within this, else 408 and close; 0 = never"),
    ("--body-timeout <s>", "60", "a request body must arrive within this of its head, else 408; 0 = never"),
    ("--max-statement-bytes <n>", "1048576", "statement text of one request (a batch's distinct texts "
     "together), else 413; 0 = no ceiling"),
    ("--max-answer-rows <n>", "100000", "rows one statement may answer, else 413; 0 = no ceiling"),
    ("--max-write-rows <n>", "100000", "rows one statement or batch may write (documents put, rows set or "
     "deleted), else 413 and nothing written; 0 = no ceiling"),
    ("--idempotency-ttl <s>", "86400", "how long an Idempotency-Key and its answer are kept"),
    ("--http-token <value>", "env FENEC_HTTP_TOKEN", "the server token: full access"),
    ("--jwt-secret <value>", "env FENEC_JWT_SECRET", "HS256 secret (>= 32 bytes) of scoped tokens"),
    ("--jwt-secret-file <path>", "none", "the HS256 secret read from a file (trailing CR/LF trimmed)"),
    ("--jwt-require-exp on|off", "on", "refuse tokens without exp"),
    ("--jwt-max-age <s>", "0", "refuse tokens whose exp is further ahead; 0 = no bound"),
    ("--policy <path>", "none", "the rules of scoped tokens (needs a JWT secret)"),
    ("--mint-token <claims>", "", "print an HS256 token of these claims (exp: now + 3600) and exit"),
    ("--admin-token <value>", "none", "may read /_metrics and /_metrics/recent, and nothing else"),
    ("--auth-delay <ms>", "100", "delay before a 401, doubled per refusal from an address, max 5 s; 0 = off"),
    ("--http-read-only", "off", "every write over HTTP is refused 403"),
    # replication (server.md §1.7; checked together by replication/options.py)
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
    ("--http-cors <origin>", "none", "send CORS headers for this origin (* allowed)"),
    ("--busy-poll <us>", "100", "after an answer, poll the sockets this many microseconds before sleeping "
     "(0 = off; by default off where the server may use only one CPU)"),
    ("--slow-ms <ms>", "off", "log each statement at least this slow (0 = every statement)"),
    ("--access-log <path>|-", "off", "one line per request (method, path, status, ms, bytes; - = stdout)"),
    ("--no-mmap", "off", "accepted for compatibility; no effect (the file is never mapped)"),
    ("--no-checkpoint", "off", "accepted for compatibility; no effect (there is no checkpoint to skip)"),
    ("--ping", "", "GET /_health on --http; exit 0 on a 200, 1 otherwise"),
    ("-h, --help", "", "this text"),
]


def spelled(flag: str) -> tuple[list[str], bool]:
    """A row's names, and whether the flag takes a value: "-f, --file <path>" -> (["-f", "--file"], True)."""
    words = flag.replace(",", " ").split()
    names = [w for w in words if w.startswith("-")]
    return names, len(names) < len(words)


_SPELLED = [(*spelled(flag), default or "") for flag, default, _ in FLAGS]
VALUE_FLAGS = {name for names, value, _ in _SPELLED if value for name in names}
SWITCHES = {name for names, value, _ in _SPELLED if not value for name in names}
DEFAULTS = {names[-1]: default for names, _, default in _SPELLED}  # by the long name


class BadFlag(Exception):
    """A flag's value, or a combination of flags, refused: the command line says `message` and exits 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def given(opts: dict[str, Any], flag: str) -> str:
    """`flag`'s value in `opts` (the parsed command line, keyed by the long name without its dashes),
    else its default in the table."""
    return opts.get(flag.lstrip("-"), DEFAULTS[flag])


def whole(flag: str, text: str, minimum: int = 0) -> int:
    t = text.strip()
    if not t.isdigit() or int(t) < minimum:
        raise BadFlag(f"{flag} expects a whole number of at least {minimum}, not {text!r}")
    return int(t)


def seconds(flag: str, text: str, *, never: bool = False) -> float:
    """`text` as seconds, from 0 (`never`: 0 turns the timer off, as the message says) up to 10**9."""
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 0 <= value < 10**9:  # also refuses nan and inf
        raise BadFlag(f"{flag} expects seconds{' (0 = never)' if never else ''}, not {text!r}")
    return value
