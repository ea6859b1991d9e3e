"""The clients of the failover tests and the checker of their history.

Writers put jobs, each with a payload of its own; a worker claims jobs and acks them (a delete of
the claimed row). Each client talks to one member at a time, directly: a 403 naming a primary
(`Fenec-Primary`) sends it there, a 503 or a failed connection to the next member. Every answer
200 is recorded with the term it carries (`Fenec-Term`), when its request was sent and when the
answer came (one monotonic clock: the clients are threads of the test's process).

`History.check(rows)`, the rows read from the primary at the end:

* every put answered 200 is there, unless the worker claimed its job (it may have acked it);
* no job whose ack was answered 200 is there;
* fencing: no write was acknowledged in a term below one that any client had already been
  acknowledged in when its request was sent (the server that answered it had been deposed).
"""

from __future__ import annotations

import bisect
import http.client
import json
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness import Member

CLAIM = "set jobs {owner: $1, run_at: now() + 60000} where run_at <= now() order run_at limit 1 returning id, payload"

REQUEST_S = 5.0  # a client's wait for an answer (a frozen server's requests are given up after it)


class Acked:
    __slots__ = ("kind", "token", "term", "sent", "answered", "member")

    def __init__(self, kind: str, token: str, term: int, sent: float, answered: float, member: str) -> None:
        self.kind, self.token, self.term, self.sent, self.answered, self.member = kind, token, term, sent, answered, member

    def __repr__(self) -> str:
        return f"{self.kind} {self.token} term {self.term} by {self.member} sent {self.sent:.3f} at {self.answered:.3f}"


class History:
    def __init__(self) -> None:
        self.acked: list[Acked] = []
        self.claimed: set[str] = set()  # payloads the worker claimed (its ack sent or not)
        self.refused = 0
        self._lock = threading.Lock()

    def add(self, a: Acked) -> None:
        with self._lock:
            self.acked.append(a)

    def terms_after(self, term: int, since: float) -> list[Acked]:
        with self._lock:
            return [a for a in self.acked if a.term > term and a.answered >= since]

    def count(self) -> int:
        return len(self.acked)

    def check(self, rows: list[dict[str, Any]], lossless: bool = True) -> None:
        """The module's docstring; `lossless` False (no sync replica) checks the fencing alone."""
        self.check_fenced()
        if not lossless:
            return
        there = {str(r["payload"]) for r in rows}
        puts = [a for a in self.acked if a.kind == "put"]
        lost = [a for a in puts if a.token not in there and a.token not in self.claimed]
        assert not lost, f"{len(lost)} acknowledged puts lost (of {len(puts)}): {lost[:5]}"
        back = [a for a in self.acked if a.kind == "ack" and a.token in there]
        assert not back, f"{len(back)} acknowledged acks undone: {back[:5]}"

    def check_fenced(self) -> None:
        by_answer = sorted(self.acked, key=lambda a: a.answered)
        times = [a.answered for a in by_answer]
        highest: list[int] = []
        top = 0
        for a in by_answer:
            top = max(top, a.term)
            highest.append(top)
        late = []
        for a in self.acked:
            at = bisect.bisect_left(times, a.sent)  # the answers received before this request was sent
            if at and highest[at - 1] > a.term:
                late.append(a)
        assert not late, f"{len(late)} writes acknowledged by a deposed primary: {late[:5]}"


class Client:
    """A client of the cluster that follows its primary (see the module's docstring)."""

    def __init__(self, members: list[Member], by_url: dict[str, Member]) -> None:
        self.members = members
        self.by_url = by_url
        self.at = 0
        self.conn: http.client.HTTPConnection | None = None

    def _move(self, to: Member | None = None) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.at = self.members.index(to) if to is not None else (self.at + 1) % len(self.members)

    def query(self, text: str, params: list) -> tuple[int, dict[str, str], Any, float, float, str] | None:
        """(status, headers, body, sent, answered, member) of a 200; None after a refusal or a failure
        (the client moved on)."""
        member = self.members[self.at]
        if self.conn is None:
            self.conn = http.client.HTTPConnection(member.host, member.port, timeout=REQUEST_S)
        sent = time.monotonic()
        try:
            self.conn.request("POST", "/query", body=json.dumps({"query": text, "params": params}))
            resp = self.conn.getresponse()
            body = json.loads(resp.read())
        except (OSError, http.client.HTTPException, ValueError):
            self._move()
            time.sleep(0.05)
            return None
        answered = time.monotonic()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status == 200:
            return resp.status, headers, body, sent, answered, member.name
        primary = headers.get("fenec-primary")
        if resp.status == 403 and primary in self.by_url:
            self._move(self.by_url[primary])
        else:
            self._move()
            time.sleep(0.05)
        return None


class Load:
    """WRITERS writers and a worker, on threads, until `stop`."""

    def __init__(self, members: list[Member], by_url: dict[str, Member], writers: int = 3) -> None:
        self.history = History()
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._writer, args=(n, members, by_url), daemon=True)
                        for n in range(writers)]
        self.threads.append(threading.Thread(target=self._worker, args=(members, by_url), daemon=True))
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(30)

    def _writer(self, n: int, members: list[Member], by_url: dict[str, Member]) -> None:
        c = Client(members, by_url)
        i = 0
        while not self._stop.is_set():
            token = f"w{n}-{i}"
            got = c.query("put jobs {payload: $1, run_at: now()}", [token])
            if got is not None:
                self.history.add(Acked("put", token, int(got[1].get("fenec-term", 0)), got[3], got[4], got[5]))
                i += 1
            else:
                i += 1  # the put may have been made: a fresh payload, so the checker never confuses two

    def _worker(self, members: list[Member], by_url: dict[str, Member]) -> None:
        c = Client(members, by_url)
        while not self._stop.is_set():
            got = c.query(CLAIM, ["worker"])
            if got is None or not got[2]:
                time.sleep(0.01)
                continue
            job = got[2][0]
            token = str(job["payload"])
            self.history.claimed.add(token)
            self.history.add(Acked("claim", token, int(got[1].get("fenec-term", 0)), got[3], got[4], got[5]))
            done = c.query("del jobs where id = $1 and owner = $2 require 1", [job["id"], "worker"])
            if done is not None:
                self.history.add(Acked("ack", token, int(done[1].get("fenec-term", 0)), done[3], done[4], done[5]))
