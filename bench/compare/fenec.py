"""FenecDB: `fenec-server` with a file in a temporary directory (--sync 250, its default, or --sync always),
used over HTTP through its own Python client, the claim of the seed page, a /batch of acks, Fenec-Wait.

With a replica: a second `fenec-server --replica-of` the first, on a file of its own, at the same `--sync`;
"sync" starts the primary with `--sync-replicas 1` (a write is answered once the replica's disk holds it too);
"feed" starts the primary as for a replica (`--replication-token`: it keeps its records for one) and no replica
(bench/replica_interference.py).

`Before`: another build's server (`--before <checkout>`, a checkout with its own `make venv`), run in every round
beside this one's, through this checkout's client, so that a change is measured before and after in the same
rounds, alternated with the peers as they are."""

from __future__ import annotations

import http.client
import importlib.metadata
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import fenecdb

from . import procs

SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
CLAIM = ("set jobs {{owner: $1, run_at: now() + 30000, attempts: attempts + 1}} "
         "where run_at <= now() order run_at limit {n} returning *")  # limit takes a literal, not a parameter
ACK = "del jobs where id = $1 and owner = $2 require 1"
PUT = "put jobs {payload: $1, run_at: now(), attempts: 0}"
HOUR_MS = 3_600_000
REPLICATION_TOKEN = "queue-compare-replication"
LOAD_IN_FLIGHT = 2  # measured: 147 000-149 000 jobs/s with one, 214 000-220 000 with two, 211 000-217 000 with three


class Session:
    def __init__(self, url: str) -> None:
        self.db = fenecdb.Client(url, timeout=60)

    def claim(self, n: int, owner: str) -> list[Any]:
        return list(self.db.query(CLAIM.format(n=n), [owner]))

    def ack(self, jobs: list[Any], owner: str) -> None:
        if jobs:
            self.db.batch([(ACK, [j["id"], owner]) for j in jobs])

    def put(self, payload: dict) -> None:
        self.db.query(PUT, [payload])

    def wait_claim(self, timeout: float, owner: str) -> Any | None:
        rows = self.db.query(CLAIM.format(n=1), [owner], wait=timeout)
        return rows[0] if rows else None

    @staticmethod
    def payload(job: Any) -> Any:
        return job["payload"]

    def close(self) -> None:
        self.db.close()


class System:
    key = "fenecdb"
    name = "FenecDB"
    durable_setting = "--sync always"
    everyday_setting = "--sync 250 (its default)"
    load_method = "`put jobs $1`, 10 000 documents a request, two requests in flight"
    replicas = ("sync", "async")

    def __init__(self, server: list[str] | None = None) -> None:
        self.server = server if server is not None else _server_command()
        self.proc: subprocess.Popen | None = None
        self.replica: subprocess.Popen | None = None
        self.url = ""
        self.replica_url = ""
        try:  # the server's version: it is the server that is compared, whatever the client's is
            self.version = importlib.metadata.version("fenecdb-server")
        except importlib.metadata.PackageNotFoundError:
            self.version = "unknown"
        self.admin: Session | None = None

    def start(self, workdir: str, durable: bool, timeout: float = 60, replica: str | None = None) -> None:
        sync = ["--sync", "always" if durable else "250"]
        flags = ["--file", os.path.join(workdir, "q.fenec"), *sync]
        if replica is not None:
            flags += ["--replication-token", REPLICATION_TOKEN]
            if replica == "sync":
                flags += ["--sync-replicas", "1"]
        self.proc, self.url = _spawn(self.server, flags, timeout)
        if replica in self.replicas:  # "feed": the primary keeps its records for replicas, none follows
            self.replica, self.replica_url = _spawn(
                self.server, ["--file", os.path.join(workdir, "r.fenec"), *sync, "--replication-token", REPLICATION_TOKEN,
                 "--replica-of", self.url], timeout)
            end = time.monotonic() + timeout
            while not _status(self.url)["replicas"]:  # connected: under --sync-replicas a write waits for it
                if time.monotonic() > end:
                    raise RuntimeError("the replica did not connect to its primary")
                time.sleep(0.05)
        self.admin = Session(self.url)
        self.admin.db.query(SCHEMA)

    def replica_level(self, timeout: float = 600) -> None:
        """Wait until the replica holds every change its primary has."""
        end = time.monotonic() + timeout
        while _status(self.replica_url)["seq"] < _status(self.url)["seq"]:
            if time.monotonic() > end:
                raise RuntimeError("the replica did not catch up with its primary")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.admin is not None:
            try:
                self.admin.close()
            except Exception:
                pass
            self.admin = None
        procs.stop(self.replica)
        self.replica = None
        procs.stop(self.proc)
        self.proc = None

    def _admin(self) -> Session:
        if self.admin is None:
            raise RuntimeError("fenec-server is not running")
        return self.admin

    def spec(self) -> tuple[str, tuple]:
        return ("fenec", (self.url,))

    def session(self) -> Session:
        return Session(self.url)

    def reset(self) -> None:
        self._admin().db.query("drop collection jobs")
        self._admin().db.query(SCHEMA)

    def load(self, n: int, ready: bool, chunk: int = 10_000) -> None:
        """`n` jobs ready now, or (ready=False) half delayed an hour and half leased for an hour:
        requests of `chunk` documents on LOAD_IN_FLIGHT connections, each sending its next as soon
        as its last is answered, so the client builds one while the server stores another, as
        the peers' pipelined loads and PostgreSQL's COPY overlap theirs."""
        self._admin()  # running
        now = int(time.time() * 1000)
        starts = iter(range(0, n, chunk))
        lock = threading.Lock()
        failed: list[BaseException] = []

        def sender() -> None:
            client = fenecdb.Client(self.url, timeout=60)
            try:
                while not failed:
                    with lock:
                        start = next(starts, None)
                    if start is None:
                        return
                    client.query("put jobs $1", [_jobs(start, min(n, start + chunk), ready, now)])
            except BaseException as e:
                failed.append(e)
            finally:
                client.close()

        threads = [threading.Thread(target=sender) for _ in range(LOAD_IN_FLIGHT)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            raise failed[0]


class Before(System):
    """The server of another build of FenecDB: `<checkout>/.venv/bin/fenec-server` (its `make venv`)."""

    key = "before"
    name = "FenecDB before"

    def __init__(self, checkout: str) -> None:
        exe = Path(checkout) / ".venv" / "bin" / "fenec-server"
        if not exe.exists():
            raise procs.Missing(f"{exe} not found: run `make venv` in {checkout}")
        super().__init__([str(exe)])
        try:
            self.version = subprocess.run(["git", "-C", checkout, "describe", "--always", "--dirty"],
                                          capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            self.version = "unknown"


def _server_command() -> list[str]:
    """This checkout's server: the `fenec-server` beside this interpreter, or its module."""
    exe = Path(sys.executable).parent / "fenec-server"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fenecdb_server.cli"]


def _spawn(server: list[str], flags: list[str], timeout: float) -> tuple[subprocess.Popen, str]:
    """A `fenec-server` on a free loopback port, and its URL once it listens."""
    cmd = [*server, "--http", "127.0.0.1:0", "--max-connections", "0", *flags]
    proc = procs.spawn(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    found: queue.Queue = queue.Queue()
    threading.Thread(target=_read_stderr, args=(proc.stderr, found), daemon=True).start()
    try:  # bounded: a server that neither prints its address nor exits must not hang the run
        url = found.get(timeout=timeout)
    except queue.Empty:
        url = None
    if not url:
        procs.stop(proc)
        raise RuntimeError(f"fenec-server did not start (exit status {proc.poll()})")
    return proc, url


def _status(url: str) -> dict[str, Any]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/_replication/status", headers={"authorization": f"Bearer {REPLICATION_TOKEN}"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        if resp.status != 200:
            raise RuntimeError(f"/_replication/status answered {resp.status}: {body}")
        return dict(body)
    finally:
        conn.close()


def _jobs(first: int, end: int, ready: bool, now: int) -> list[dict[str, Any]]:
    docs = []
    for i in range(first, end):
        doc: dict[str, Any] = {"payload": {"n": i}, "attempts": 0}
        if ready:
            doc["run_at"] = now - 1000
        else:
            doc["run_at"] = now + HOUR_MS
            if i % 2:
                doc["owner"] = "w0"
                doc["attempts"] = 1
        docs.append(doc)
    return docs


def _read_stderr(err: IO[bytes], found: queue.Queue) -> None:
    """Hands the listening address over, then drains the server's stderr so it never blocks on a full pipe."""
    try:
        for raw in err:
            m = re.search(rb"listening on: (http://[\d.]+:\d+)", raw)
            if m:
                found.put(m.group(1).decode())
    except (OSError, ValueError):  # the pipe closed under us as the server was stopped
        pass
    found.put(None)  # the server exited (or closed stderr) without printing its address
