"""PostgreSQL: initdb into a temporary directory and `postgres` on a loopback port, the seed page's
FOR UPDATE SKIP LOCKED claim, LISTEN/NOTIFY to wake a waiting worker, COPY to load.

Every-day setting: synchronous_commit off (a crash loses at most about 3 × wal_writer_delay of commits, as
FenecDB's --sync 250 loses the last quarter second); the durable one: synchronous_commit on, fsync on.

With a synchronous replica: a standby made with `pg_basebackup -R` from the running primary, started on a
port of its own (hot_standby, fsync on), then `synchronous_standby_names = '*'` on the primary: a commit
under synchronous_commit on is answered once the standby has flushed its WAL to its disk."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import procs

INSTALL = "apt-get install -y postgresql"
SCHEMA = """
CREATE TABLE jobs (id bigserial PRIMARY KEY, payload jsonb, run_at timestamptz NOT NULL, owner text,
                   attempts int NOT NULL DEFAULT 0, error text);
CREATE INDEX jobs_run_at ON jobs (run_at);
CREATE FUNCTION jobs_notify() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN PERFORM pg_notify('jobs', ''); RETURN NULL; END $$;
CREATE TRIGGER jobs_put AFTER INSERT ON jobs FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify();
"""
CLAIM = """UPDATE jobs SET owner = %s, run_at = now() + interval '30 seconds', attempts = attempts + 1
WHERE id IN (SELECT id FROM jobs WHERE run_at <= now() ORDER BY run_at LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING *"""
ACK = "DELETE FROM jobs WHERE id = ANY(%s) AND owner = %s"
PUT = "INSERT INTO jobs (payload, run_at) VALUES (%s, now())"


def bindir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[-3]))
    if found:
        return os.path.dirname(found[-1])
    exe = shutil.which("postgres")
    if exe:
        return os.path.dirname(exe)
    raise procs.Missing(f"postgres not found; install it with: {INSTALL}")


class Session:
    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.listening = False

    def claim(self, n: int, owner: str) -> list[Any]:
        return self.conn.execute(CLAIM, (owner, n)).fetchall()

    def ack(self, jobs: list[Any], owner: str) -> None:
        if jobs:
            self.conn.execute(ACK, ([j[0] for j in jobs], owner))

    def put(self, payload: dict) -> None:
        self.conn.execute(PUT, (Jsonb(payload),))

    def wait_claim(self, timeout: float, owner: str) -> Any | None:
        """Claim; when none is ready, wait for a NOTIFY from a put and claim again."""
        if not self.listening:
            self.conn.execute("LISTEN jobs")
            self.listening = True
        end = time.monotonic() + timeout
        while True:
            rows = self.claim(1, owner)
            if rows:
                return rows[0]
            left = end - time.monotonic()
            if left <= 0:
                return None
            # a NOTIFY that came while the claim ran is kept for this call (psycopg >= 3.3 keeps a backlog)
            for _ in self.conn.notifies(timeout=left, stop_after=1):
                pass

    @staticmethod
    def payload(job: Any) -> Any:
        return job[1]  # RETURNING *: id, payload, ...

    def close(self) -> None:
        self.conn.close()


class System:
    key = "postgres"
    name = "PostgreSQL"
    durable_setting = "synchronous_commit on, fsync on"
    everyday_setting = "synchronous_commit off"
    load_method = "COPY"
    replicas = ("sync",)

    def __init__(self) -> None:
        self.bin = bindir()
        out = subprocess.run([os.path.join(self.bin, "postgres"), "--version"], capture_output=True, text=True,
                             timeout=30)
        self.version = out.stdout.split(")", 1)[-1].split()[0]  # "postgres (PostgreSQL) 15.18 (Debian ...)"
        if int(self.version.split(".")[0]) < 15:
            raise procs.Missing(f"PostgreSQL {self.version} found, 15+ needed: {INSTALL}")
        self.proc: subprocess.Popen | None = None
        self.standby: subprocess.Popen | None = None
        self.dsn = ""
        self.admin: psycopg.Connection | None = None

    def _as_owner(self) -> dict:
        """PostgreSQL will not run as root: as root, run it as the `postgres` user the package creates."""
        if os.geteuid() != 0:
            return {}
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError as e:
            raise procs.Missing("running as root and there is no `postgres` user to run the server as") from e
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def start(self, workdir: str, durable: bool, replica: str | None = None) -> None:
        as_owner = self._as_owner()
        data = os.path.join(workdir, "pg")
        os.makedirs(data)
        if as_owner:
            os.chown(workdir, as_owner["user"], as_owner["group"])
            os.chown(data, as_owner["user"], as_owner["group"])
        procs.run([os.path.join(self.bin, "initdb"), "-D", data, "-U", "bench", "--auth", "trust",
                   "-E", "UTF8", "--no-sync", "--locale", "C"], timeout=120, cwd=workdir, **as_owner)
        port = procs.free_port()
        settings = {"listen_addresses": "127.0.0.1", "fsync": "on",
                    "synchronous_commit": "on" if durable else "off",
                    "shared_buffers": "256MB", "max_connections": "50", "max_wal_size": "4GB"}
        self.proc = self._postgres(data, port, settings, workdir, as_owner)
        self.dsn = f"host=127.0.0.1 port={port} user=bench dbname=postgres"

        def up() -> bool:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                return False

        procs.wait_until(up, self.proc, "postgres")
        self.admin = psycopg.connect(self.dsn, autocommit=True)
        self.admin.execute(SCHEMA)
        if replica == "sync":
            self._start_standby(workdir, port, settings, as_owner)

    def _postgres(self, data: str, port: int, settings: dict[str, str], workdir: str,
                  as_owner: dict) -> subprocess.Popen:
        """`postgres` serving the data directory `data` on 127.0.0.1:`port` (its Unix socket in `data`),
        with `settings`: the primary's, or the standby's (the primary's and hot_standby)."""
        cmd = [os.path.join(self.bin, "postgres"), "-D", data]
        for k, v in {**settings, "port": str(port), "unix_socket_directories": data}.items():
            cmd += ["-c", f"{k}={v}"]
        # if the harness dies, SIGINT: PostgreSQL's fast shutdown, which does not wait for clients to leave
        return procs.spawn(cmd, die_signal=signal.SIGINT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd=workdir, **as_owner)

    def _start_standby(self, workdir: str, port: int, settings: dict[str, str], as_owner: dict) -> None:
        standby = os.path.join(workdir, "standby")
        procs.run([os.path.join(self.bin, "pg_basebackup"), "-D", standby, "-h", "127.0.0.1", "-p", str(port),
                   "-U", "bench", "-X", "stream", "-R", "--no-sync"], timeout=300, cwd=workdir, **as_owner)
        self.standby = self._postgres(standby, procs.free_port(), {**settings, "hot_standby": "on"}, workdir,
                                      as_owner)
        admin = self._admin()
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        admin.execute("SELECT pg_reload_conf()")

        def synchronous() -> bool:
            row = admin.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").fetchone()
            return bool(row and row[0])

        procs.wait_until(synchronous, self.standby, "the standby")

    def stop(self) -> None:
        if self.admin is not None:
            try:
                self.admin.close()
            except Exception:
                pass
            self.admin = None
        # SIGINT, the fast shutdown: SIGTERM's smart one would wait for every session to end, and a worker
        # that failed may have left one open
        procs.stop(self.standby, signal.SIGINT)
        self.standby = None
        procs.stop(self.proc, signal.SIGINT)
        self.proc = None

    def _admin(self) -> psycopg.Connection:
        if self.admin is None:
            raise RuntimeError("postgres is not running")
        return self.admin

    def spec(self) -> tuple[str, tuple]:
        return ("postgres", (self.dsn,))

    def session(self) -> Session:
        return Session(self.dsn)

    def reset(self) -> None:
        self._admin().execute("TRUNCATE jobs RESTART IDENTITY")

    def load(self, n: int, ready: bool, chunk: int = 50_000) -> None:
        """COPY `n` jobs: ready now, or half delayed an hour and half leased for an hour."""
        with self._admin().cursor() as cur:
            with cur.copy("COPY jobs (payload, run_at, owner, attempts) FROM STDIN") as cp:
                for start in range(0, n, chunk):
                    lines = []
                    later = _in_an_hour()
                    for i in range(start, min(n, start + chunk)):
                        if ready:
                            lines.append(f'{{"n": {i}}}\t2000-01-01 00:00:00+00\t\\N\t0\n')
                        elif i % 2:
                            lines.append(f'{{"n": {i}}}\t{later}\tw0\t1\n')
                        else:
                            lines.append(f'{{"n": {i}}}\t{later}\t\\N\t0\n')
                    cp.write("".join(lines))
        self._admin().execute("ANALYZE jobs")


def _in_an_hour() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(time.time() + 3600))
