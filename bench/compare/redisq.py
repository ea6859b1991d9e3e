"""Redis: `redis-server` on a loopback port with its append-only file in a temporary directory, used as the
reliable queue of its documentation: producers RPUSH to `ready`; a worker moves jobs to `processing`
(BLMOVE when it waits for one, a Lua script claiming 10 when it takes a batch) and records each lease's end in
the `leases` sorted set; acking is LREM from `processing`. Delayed jobs wait in the `delayed` sorted set, and the
claim script moves those come due, and leases that lapsed, back to `ready` before it takes its batch.

Every-day setting: appendfsync everysec (Redis's recommended one); the durable one: appendfsync always."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from typing import Any

import redis

from . import procs

INSTALL = "apt-get install -y redis-server"
READY, PROCESSING, LEASES, DELAYED = "ready", "processing", "leases", "delayed"
CLAIM_LUA = """
local now, n, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for _, j in ipairs(redis.call('ZRANGE', KEYS[4], '-inf', now, 'BYSCORE', 'LIMIT', 0, 100)) do
  redis.call('ZREM', KEYS[4], j)
  redis.call('RPUSH', KEYS[1], j)
end
for _, j in ipairs(redis.call('ZRANGE', KEYS[3], '-inf', now, 'BYSCORE', 'LIMIT', 0, 100)) do
  redis.call('ZREM', KEYS[3], j)
  redis.call('LREM', KEYS[2], 1, j)
  redis.call('LPUSH', KEYS[1], j)
end
local out = {}
for i = 1, n do
  local j = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'LEFT')
  if not j then break end
  redis.call('ZADD', KEYS[3], now + lease, j)
  out[i] = j
end
return out
"""
LEASE_MS = 30_000
HOUR_MS = 3_600_000


class Session:
    def __init__(self, port: int) -> None:
        self.r = redis.Redis(host="127.0.0.1", port=port)
        self.claim_script = self.r.register_script(CLAIM_LUA)
        self.seq = itertools.count()
        self.tag = f"{os.getpid()}.{id(self)}"

    def claim(self, n: int, owner: str) -> list[Any]:
        return self.claim_script(keys=[READY, PROCESSING, LEASES, DELAYED],
                                 args=[int(time.time() * 1000), n, LEASE_MS])

    def ack(self, jobs: list[Any], owner: str) -> None:
        if jobs:
            p = self.r.pipeline(transaction=False)
            for j in jobs:
                p.lrem(PROCESSING, 1, j)
                p.zrem(LEASES, j)
            p.execute()

    def put(self, payload: dict) -> None:
        self.r.rpush(READY, json.dumps({"id": f"{self.tag}.{next(self.seq)}", **payload}))

    def wait_claim(self, timeout: float, owner: str) -> Any | None:
        r: Any = self.r  # redis-py's stubs say int seconds; BLMOVE takes decimals since Redis 6
        j = r.blmove(READY, PROCESSING, timeout, "LEFT", "LEFT")
        if j is not None:
            r.zadd(LEASES, {j: int(time.time() * 1000) + LEASE_MS})
        return j

    @staticmethod
    def payload(job: Any) -> Any:
        doc = json.loads(job)
        doc.pop("id", None)
        return doc

    def close(self) -> None:
        self.r.close()


class System:
    key = "redis"
    name = "Redis"
    durable_setting = "appendfsync always"
    everyday_setting = "appendonly yes, appendfsync everysec"
    load_method = "pipelined RPUSH / ZADD, 1 000 jobs a command"

    def __init__(self) -> None:
        self.exe = procs.need("redis-server", INSTALL)
        out = subprocess.run([self.exe, "--version"], capture_output=True, text=True, timeout=30).stdout
        self.version = out.split("v=")[1].split()[0] if "v=" in out else out.strip()
        if int(self.version.split(".")[0]) < 7:
            raise procs.Missing(f"Redis {self.version} found, 7+ needed: {INSTALL}")
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.loaded = 0  # loads append: each job's text carries an id of its own
        self.admin: redis.Redis | None = None

    def start(self, workdir: str, durable: bool) -> None:
        self.port = procs.free_port()
        self.proc = procs.spawn(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", workdir, "--save", "",
             "--appendonly", "yes", "--appendfsync", "always" if durable else "everysec",
             "--daemonize", "no", "--logfile", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        admin = self.admin = redis.Redis(host="127.0.0.1", port=self.port)

        def up() -> bool:
            try:
                return bool(admin.ping())
            except redis.ConnectionError:
                return False

        procs.wait_until(up, self.proc, "redis-server")

    def stop(self) -> None:
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        procs.stop(self.proc)
        self.proc = None

    def _admin(self) -> redis.Redis:
        if self.admin is None:
            raise RuntimeError("redis-server is not running")
        return self.admin

    def spec(self) -> tuple[str, tuple]:
        return ("redisq", (self.port,))

    def session(self) -> Session:
        return Session(self.port)

    def reset(self) -> None:
        self._admin().flushall()

    def load(self, n: int, ready: bool, chunk: int = 1000) -> None:
        """`n` jobs on the ready list, or half in `delayed` for an hour and half leased for an hour."""
        later = int(time.time() * 1000) + HOUR_MS
        p = self._admin().pipeline(transaction=False)
        first, self.loaded = self.loaded, self.loaded + n
        for start in range(first, first + n, chunk):
            jobs = [f'{{"id": {i}, "n": {i}}}' for i in range(start, min(first + n, start + chunk))]
            if ready:
                p.rpush(READY, *jobs)
            else:
                p.zadd(DELAYED, {j: later for j in jobs[0::2]})
                leased = jobs[1::2]
                p.rpush(PROCESSING, *leased)
                p.zadd(LEASES, {j: later for j in leased})
            if len(p) >= 50:
                p.execute()
        p.execute()
