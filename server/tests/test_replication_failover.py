"""Failover with a sync replica (issue 43): the primary, under `--sync-replicas 1`, is SIGKILLed
while four writers put jobs and a claimer claims and acks them; its replica is promoted
(`POST /_replication/promote`) and checked against what the clients themselves were told:

  * every put answered 200 is on the promoted replica, unless the claimer took it and sent its
    ack (answered or in flight at the kill);
  * no ack answered 200 came back: its job is not there;
  * an `Idempotency-Key` retried on the promoted replica answers what the first try answered.

A trial is a fresh pair of real `fenec-server` processes (test_replication.py's `Server`), killed
after a random number of answered writes; TRIALS of them.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
from pathlib import Path
from typing import Any

from test_replication import CLAIM, JOBS, TOKEN, primary, replica, wait_for

TRIALS = 10
WRITERS = 4


class Client:
    """One keep-alive connection; `None` for an answer that never came (the kill)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def query(self, text: str, params: list, headers: dict[str, str] | None = None) -> tuple[int, Any] | None:
        try:
            self.conn.request("POST", "/query", body=json.dumps({"query": text, "params": params}),
                              headers=headers or {})
            resp = self.conn.getresponse()
            return resp.status, json.loads(resp.read())
        except (OSError, http.client.HTTPException, ValueError):
            self.conn.close()
            return None


def trial(where: Path, seed: int) -> None:
    rng = random.Random(seed)
    p = primary(where / "p.fenec", "--sync-replicas", "1")
    r = replica(where / "r.fenec", p, "--sync", "always")
    try:
        wait_for("the replica to connect", lambda: p.status()["replicas"])
        assert Client(p.port).query(JOBS, []) is not None
        put: list[str] = []  # payloads whose put was answered 200
        acked: list[str] = []  # payloads whose ack was answered 200
        acking: list[str] = []  # payloads whose ack was sent (answered or not)
        stop = threading.Event()

        def writer(n: int) -> None:
            c = Client(p.port)
            i = 0
            while not stop.is_set():
                token = f"w{n}-{i}"
                got = c.query("put jobs {payload: $1, run_at: now()}", [token])
                if got is None:
                    return
                if got[0] == 200:
                    put.append(token)
                i += 1

        def claimer() -> None:
            c = Client(p.port)
            while not stop.is_set():
                got = c.query(CLAIM.replace("returning id", "returning id, payload"), ["c1"])
                if got is None:
                    return
                if got[0] != 200 or not got[1]:
                    continue
                job = got[1][0]
                acking.append(job["payload"])
                done = c.query("del jobs where id = $1 and owner = $2 require 1", [job["id"], "c1"])
                if done is None:
                    return
                if done[0] == 200:
                    acked.append(job["payload"])

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
        threads.append(threading.Thread(target=claimer))
        for t in threads:
            t.start()
        kill_after = rng.randint(5, 60)
        wait_for("writes to be answered", lambda: len(put) + len(acked) >= kill_after, 120)
        p.kill()
        stop.set()
        for t in threads:
            t.join(60)
        code, _, done = r.request("POST", "/_replication/promote", headers={"authorization": f"Bearer {TOKEN}"})
        assert code == 200 and done["promoted"] is True
        code, _, rows = r.query("get jobs")
        there = {row["payload"] for row in rows}
        lost = [t for t in put if t not in there and t not in acking]
        assert not lost, f"answered puts missing after the failover: {lost[:10]} (of {len(put)})"
        back = [t for t in acked if t in there]
        assert not back, f"answered acks undone by the failover: {back[:10]}"
    finally:
        r.stop()
        if p.proc.poll() is None:
            p.kill()


def test_a_failover_to_a_sync_replica_loses_no_answered_write(tmp_path: Path) -> None:
    for n in range(TRIALS):
        where = tmp_path / f"t{n}"
        where.mkdir()
        trial(where, n)


def test_an_idempotent_claim_retried_on_the_promoted_replica_answers_the_first_try(tmp_path: Path) -> None:
    p = primary(tmp_path / "p.fenec", "--sync-replicas", "1")
    r = replica(tmp_path / "r.fenec", p, "--sync", "always")
    try:
        wait_for("the replica to connect", lambda: p.status()["replicas"])
        c = Client(p.port)
        assert c.query(JOBS, []) is not None
        for i in range(5):
            got = c.query("put jobs {payload: $1, run_at: now()}", [i])
            assert got is not None and got[0] == 200
        key = {"idempotency-key": "claim-1"}
        first = c.query(CLAIM, ["w1"], key)
        assert first is not None and first[0] == 200 and len(first[1]) == 1
        p.kill()
        code, _, _ = r.request("POST", "/_replication/promote", headers={"authorization": f"Bearer {TOKEN}"})
        assert code == 200
        code, headers, again = r.query(CLAIM, ["w1"], key)
        assert code == 200 and again == first[1]
        assert headers.get("idempotent-replayed") == "true"
        code, _, other = r.query(CLAIM, ["w1"], {"idempotency-key": "claim-2"})
        assert code == 200 and other != first[1]  # a new key claims another job
    finally:
        r.stop()
        if p.proc.poll() is None:
            p.kill()


