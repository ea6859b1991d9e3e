"""Where a call goes, given one server or a list (docs/clients.md, "Replicas and failover").

`Servers` is the list a client was given and its current *primary* (at first the first URL),
shared by the client and its keyed copies. `Route` walks one call through the rules:

* **Refusal.** A 403 with `Fenec-Primary: <url>` means nothing was done there: that URL becomes
  the primary (added to the list if it was not in it) and the same request is sent there at once,
  whatever it is (a held claim too: it is never left held on a replica). At most `MAX_HOPS` such
  hops per call; past them the 403 is the caller's. A 403 without the header is an ordinary 403.
* **Unreachable.** A connection that could not be opened (`unsent`: nothing was sent) moves the
  primary to the next URL of the list, round robin, and the call is sent there; once every URL has
  failed in the call (or a refusal names one that has), the call fails with that error, as it did
  with one server. A request that was sent and whose answer was lost is the caller's, as before.
* **503 with `Retry-After`** on a list: raised as before, and the next call goes to the next URL.
* **Reads where told.** With `read_from="replica"`, a call marked as a read goes to a URL that is
  not the primary (round robin), with `Fenec-After: <the client's highest Fenec-Seq>` once it has
  seen one; a 504 there, or a replica that cannot be reached, sends it to the primary.

`Servers` is read and changed under its lock: the threads of a blocking client share it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ._wire import Request, check_header

MAX_HOPS = 2
READ_FROM = ("primary", "replica")


class Unsent(ConnectionError):
    """The connection could not be opened (refused, unreachable): nothing was sent."""


class UnsentTimeout(TimeoutError):
    """The connection could not be opened within the timeout: nothing was sent."""


def unsent(exc: BaseException) -> bool:
    """Whether a transport failure happened before anything was sent (a refused connect included,
    as a test's transport raises it)."""
    return isinstance(exc, (Unsent, UnsentTimeout, ConnectionRefusedError))


def urls_of(url: str | Sequence[str]) -> list[str]:
    """The list of base URLs a client takes: one text, or a non-empty sequence of texts."""
    given = [url] if isinstance(url, str) else list(url) if isinstance(url, Sequence) else None
    if not given or not all(isinstance(u, str) and u.strip() for u in given):
        raise ValueError(f"a client takes a server's URL or a non-empty list of them (got {url!r})")
    out: list[str] = []
    for u in given:
        u = u.strip().rstrip("/")
        check_header("a server's URL", u)
        if u not in out:
            out.append(u)
    return out


class Servers:
    """The URLs of a client, its current primary, and where its replica reads go next."""

    def __init__(self, url: str | Sequence[str], read_from: str = "primary") -> None:
        if read_from not in READ_FROM:
            raise ValueError(f"read_from is 'primary' or 'replica' (got {read_from!r})")
        self.urls = urls_of(url)
        self.primary = self.urls[0]
        self.replica_reads = read_from == "replica"
        self._reads = 0
        self._lock = threading.Lock()

    def make_primary(self, url: str) -> None:
        with self._lock:
            if url not in self.urls:
                self.urls = [*self.urls, url]
            self.primary = url

    def move_on(self, url: str) -> str:
        """`url` failed: when it is still the primary, the next URL of the list becomes it. Answers
        the primary now."""
        with self._lock:
            if self.primary == url and url in self.urls:
                self.primary = self.urls[(self.urls.index(url) + 1) % len(self.urls)]
            return self.primary

    def replica(self) -> str | None:
        """A URL that is not the primary, in turn; None when there is none."""
        with self._lock:
            others = [u for u in self.urls if u != self.primary]
            if not others:
                return None
            self._reads += 1
            return others[self._reads % len(others)]


class Route:
    """One call's way through the servers: `target()` is where (and what) to send now; after an
    answer `refused(...)`, after a transport failure `unreachable(...)`, each True when the call is
    to be sent again (to the new `target()`)."""

    __slots__ = ("servers", "request", "url", "reading", "hops", "failed", "seq")

    def __init__(self, servers: Servers, request: Request, seq: int) -> None:
        self.servers = servers
        self.request = request
        self.hops = 0
        self.failed: dict[str, BaseException] = {}
        self.seq = seq
        replica = servers.replica() if servers.replica_reads and request.read else None
        self.reading = replica is not None
        self.url = replica if replica is not None else servers.primary

    def target(self) -> tuple[str, Request]:
        if self.reading and self.seq > 0:
            return self.url, replace(self.request, headers={**self.request.headers, "Fenec-After": str(self.seq)})
        return self.url, self.request

    def _to_primary(self) -> bool:
        self.reading = False
        self.url = self.servers.primary
        return self.url not in self.failed

    def refused(self, status: int, headers: Mapping[str, str]) -> bool:
        """After an answer: True to send again (a replica's 403 naming its primary, a replica read's
        504). A refusal naming a server this call could not reach raises that failure instead."""
        if self.reading:
            return status == 504 and self._to_primary()
        if status == 403:
            named = headers.get("fenec-primary")
            if not named or self.hops >= MAX_HOPS:
                return False
            named = named.strip().rstrip("/")
            if named in self.failed:
                raise self.failed[named]
            self.hops += 1
            self.servers.make_primary(named)
            self.url = named
            return True
        if status == 503 and "retry-after" in headers and len(self.servers.urls) > 1:
            self.servers.move_on(self.url)
        return False

    def unreachable(self, exc: BaseException) -> bool:
        """After a transport failure: True to send again (nothing was sent, and a URL of the list
        is left to try)."""
        if not unsent(exc):
            return False
        self.failed[self.url] = exc
        if self.reading:
            return self._to_primary()
        self.url = self.servers.move_on(self.url)
        return self.url not in self.failed
