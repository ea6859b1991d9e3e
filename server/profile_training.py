"""The training run of the profile-guided build (setup.py, `FENECDB_PROFILE`; the README's "Compiled
modules"): a worker's life played against a server built with `FENECDB_PROFILE=generate`, so that
the compiler, rebuilding with `FENECDB_PROFILE=use`, lays out and optimizes the compiled modules by
what that life runs. The server writes its counts when it exits cleanly.

    python server/profile_training.py [--server <fenec-server>]

What it plays, bounded by counts (never by time): jobs loaded in bulk; single puts; claims of ten
acked by id in a `/batch`, some extended first; a claim failed back with a backoff, and the dead
letters read; tasks by priority taken with a `del ... returning`; held claims (`Fenec-Wait`) woken
by a put; reads of the queue and `/_metrics`, all with an async replica following; then, on a
server under `--sync always`, single puts from several connections at once, without a replica
and with a sync replica (`--sync-replicas 1`). Only the standard library: it runs in `make serve`'s
environment, before any test tool is installed. Exits 0 once the server exited cleanly; any
failure says what failed on stderr and exits 1 (the build then goes on without a profile).
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
PUT = "put jobs {payload: $1, run_at: now(), attempts: 0}"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
HELD_CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
              "where run_at <= now() order run_at limit 1 returning *")
ACK = "del jobs where id = $1 and owner = $2 require 1"
EXTEND = "set jobs {run_at: now() + 30000} where id = $1 and owner = $2 require 1"
DEAD = "get jobs select id, error where run_at is null"
TASKS = "create collection tasks (payload json, run_at timestamp @sorted, priority int @sorted, owner text, attempts int)"
TAKE = "del tasks where run_at <= now() order priority desc limit 10 returning id, payload"
FAIL = ("set jobs {owner: null, error: $3, run_at: case when attempts >= 5 then null else now() + 1000 * attempts * attempts end} "
        "where id = $1 and owner = $2 require 1")

LOADED = 20_000  # jobs put in bulk, then claimed and acked by WORKERS
WORKERS = 4
SINGLE_PUTS = 2_000
HELD = 200  # held claims, each woken by a put
DURABLE_PUTS = 400  # a writer, under --sync always
DURABLE_WRITERS = 4
REPLICATION_TOKEN = "profile-training"
START_S = 60.0  # generous: a first start may compile nothing but imports a lot


class Conn:
    """One keep-alive connection: a statement or a block, its decoded answer."""

    def __init__(self, port: int) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def send(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, object]:
        self.http.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})
        answer = self.http.getresponse()
        return answer.status, json.loads(answer.read() or b"null")

    def query(self, text: str, params: list | None = None, wait_ms: int | None = None) -> object:
        status, body = self.send("/query", json.dumps({"query": text, "params": params or []}).encode(),
                                 {"Fenec-Wait": str(wait_ms)} if wait_ms is not None else None)
        if status != 200:
            raise RuntimeError(f"{text!r} answered {status}: {body}")
        return body

    def batch(self, lines: list[tuple[str, list]]) -> None:
        body = "\n".join(json.dumps({"query": q, "params": p}) for q, p in lines).encode()
        status, answer = self.send("/batch", body)
        if status != 200:
            raise RuntimeError(f"a /batch answered {status}: {answer}")

    def get(self, path: str) -> None:
        self.http.request("GET", path)
        self.http.getresponse().read()

    def close(self) -> None:
        self.http.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(server: str, data: Path, *flags: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([server, "--file", str(data), "--http", f"127.0.0.1:{port}", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.monotonic() + START_S
    while not answers(port, "/_health"):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited at start: {proc.stderr.read().decode() if proc.stderr else ''}")
        if time.monotonic() > end:
            proc.kill()
            raise RuntimeError(f"the server did not answer /_health in {START_S:g} s")
        time.sleep(0.05)
    return proc, port


def answers(port: int, path: str, token: str | None = None) -> dict | None:
    """The JSON `path` answers with 200, or None (not yet up, or another status)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        answer = conn.getresponse()
        body = answer.read()
        conn.close()
        return dict(json.loads(body or b"{}")) if answer.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):  # not up yet, or cut off as it starts
        return None


def follow(server: str, data: Path, primary: int, sync: str) -> subprocess.Popen:
    """A replica of the server on `primary`, once that server counts it among its replicas."""
    replica, _port = start(server, data, "--sync", sync, "--replication-token", REPLICATION_TOKEN,
                           "--replica-of", f"http://127.0.0.1:{primary}")
    end = time.monotonic() + START_S
    while not (answers(primary, "/_replication/status", REPLICATION_TOKEN) or {}).get("replicas"):
        if time.monotonic() > end:
            stop(replica)
            raise RuntimeError(f"the replica did not connect to its primary in {START_S:g} s")
        time.sleep(0.05)
    return replica


def stop(proc: subprocess.Popen) -> None:
    """A clean shutdown: the server writes its profile counts as it exits."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError("the server did not exit within 60 s of SIGTERM") from None
    if code != 0:
        raise RuntimeError(f"the server exited {code}")


def in_threads(count: int, work: Callable[[int], None]) -> None:
    failed: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]


def worker_life(port: int) -> None:
    admin = Conn(port)
    admin.query(SCHEMA)
    for start_at in range(0, LOADED, 1_000):
        admin.query("put jobs $1", [[{"payload": {"n": n}, "run_at": "2026-01-01T00:00:00Z", "attempts": 0}
                                     for n in range(start_at, start_at + 1_000)]])

    def work(w: int) -> None:
        conn = Conn(port)
        k = 0
        while True:
            k += 1
            owner = f"w{w}:{k}"
            jobs = conn.query(CLAIM, [owner])
            assert isinstance(jobs, list)
            if not jobs:
                break
            if k % 50 == 0:  # one job of the claim fails back, to be claimed again after its backoff
                failed, jobs = jobs[0], jobs[1:]
                conn.query(FAIL, [failed["id"], owner, "trained to fail"])
            if k % 10 == 0 and jobs:  # a long job's lease extended
                conn.query(EXTEND, [jobs[0]["id"], owner])
            if jobs:
                conn.batch([(ACK, [job["id"], owner]) for job in jobs])
        conn.close()

    in_threads(WORKERS, work)

    admin.query(DEAD)
    admin.query(TASKS)
    admin.query("put tasks $1", [[{"payload": {"n": n}, "run_at": "2026-01-01T00:00:00Z", "priority": n % 7,
                                   "attempts": 0} for n in range(2_000)]])
    while admin.query(TAKE):
        pass

    for n in range(SINGLE_PUTS):
        admin.query(PUT, [{"single": n}])
        if n % 10 == 9:
            jobs = admin.query(CLAIM, ["solo"])
            assert isinstance(jobs, list)
            admin.batch([(ACK, [job["id"], "solo"]) for job in jobs])

    holder = Conn(port)

    def hold(got: list[object]) -> None:
        got.append(holder.query(HELD_CLAIM, ["held"], wait_ms=10_000))

    for n in range(HELD):
        got: list[object] = []
        t = threading.Thread(target=hold, args=(got,))
        t.start()
        time.sleep(0.002)  # usually held by then; a put before the hold is claimed at once, which is trained too
        admin.query(PUT, [{"held": n}])
        t.join()
        jobs = got[0]
        assert isinstance(jobs, list) and jobs, f"the held claim took nothing: {got}"
        admin.query(ACK, [jobs[0]["id"], "held"])
    admin.query("get jobs count")
    admin.get("/_metrics")
    holder.close()
    admin.close()


def durable_writes(port: int) -> None:
    Conn(port).query(SCHEMA)

    def write(w: int) -> None:
        conn = Conn(port)
        for n in range(DURABLE_PUTS):
            conn.query(PUT, [{"w": w, "n": n}])
        conn.close()

    in_threads(DURABLE_WRITERS, write)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=str(Path(sys.executable).parent / "fenec-server"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="fenecdb-profile-"))
    t0 = time.monotonic()
    lives = (  # the primary's flags, the replica's --sync (None: no replica), what is played
        (("--sync", "250", "--replication-token", REPLICATION_TOKEN), "250", worker_life),
        (("--sync", "always"), None, durable_writes),
        (("--sync", "always", "--replication-token", REPLICATION_TOKEN, "--sync-replicas", "1"), "always",
         durable_writes),
    )
    try:
        for i, (flags, replica_sync, life) in enumerate(lives):
            procs: list[subprocess.Popen] = []
            try:
                proc, port = start(args.server, work / f"train{i}.fenec", *flags)
                procs.append(proc)
                if replica_sync is not None:
                    procs.insert(0, follow(args.server, work / f"replica{i}.fenec", port, replica_sync))
                life(port)
            finally:
                for p in procs:  # the replica first: its primary stays until it is gone
                    if p.poll() is None:
                        stop(p)
    except Exception as e:  # noqa: BLE001 - the build goes on without a profile, said loudly
        print(f"profile training failed: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"profile training: done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
