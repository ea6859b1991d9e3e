"""beanstalkd: `beanstalkd -l 127.0.0.1 -p <port> -b <tempdir>`, spoken to by our own few lines of its
protocol (beanstalk_proto): a put per job, a claim of 10 as ten pipelined `reserve-with-timeout 0`, a
waiting worker's `reserve-with-timeout <s>`, and `delete` to ack. The lease is the job's ttr.

Every-day setting: -f 250 (fsync the binlog at most every 250 ms); the durable one: -f 0 (fsync every write)."""

from __future__ import annotations

import json
import math
import subprocess
from typing import Any

from . import procs
from .beanstalk_proto import Beanstalk

INSTALL = "apt-get install -y beanstalkd"
HOUR_S = 3600


class Session:
    def __init__(self, port: int, tube: str) -> None:
        self.c = Beanstalk("127.0.0.1", port, tube)

    def claim(self, n: int, owner: str) -> list[Any]:
        for _ in range(n):
            self.c.reserve_later(0)
        got = [self.c.reserve_answer() for _ in range(n)]
        return [j for j in got if j is not None]

    def ack(self, jobs: list[Any], owner: str) -> None:
        for jid, _ in jobs:
            self.c.delete_later(jid)
        for _ in jobs:
            self.c.delete_answer()

    def put(self, payload: dict) -> None:
        self.c.put(json.dumps(payload).encode())

    def wait_claim(self, timeout: float, owner: str) -> Any | None:
        return self.c.reserve(math.ceil(timeout))

    @staticmethod
    def payload(job: Any) -> Any:
        return json.loads(job[1])

    def close(self) -> None:
        self.c.close()


class System:
    key = "beanstalkd"
    name = "beanstalkd"
    durable_setting = "-f 0"
    everyday_setting = "-b <dir> -f 250"
    load_method = "pipelined puts, 1 000 a write"

    def __init__(self) -> None:
        self.exe = procs.need("beanstalkd", INSTALL)
        out = subprocess.run([self.exe, "-v"], capture_output=True, text=True, timeout=30)
        self.version = (out.stdout or out.stderr).strip().split()[-1]
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.tubes = 0
        self.tube = "jobs0"
        self.holder: Beanstalk | None = None

    def start(self, workdir: str, durable: bool) -> None:
        self.port = procs.free_port()
        self.proc = procs.spawn([self.exe, "-l", "127.0.0.1", "-p", str(self.port), "-b", workdir,
                                 "-f", "0" if durable else "250"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.wait_until(lambda: procs.port_open(self.port), self.proc, "beanstalkd")

    def stop(self) -> None:
        if self.holder is not None:
            self.holder.close()
            self.holder = None
        procs.stop(self.proc)
        self.proc = None

    def spec(self) -> tuple[str, tuple]:
        return ("beanstalk", (self.port, self.tube))

    def session(self) -> Session:
        return Session(self.port, self.tube)

    def reset(self) -> None:
        """beanstalkd has no flush: the next phase uses a fresh tube (and the jobs held for it are released)."""
        if self.holder is not None:
            self.holder.close()
            self.holder = None
        self.tubes += 1
        self.tube = f"jobs{self.tubes}"

    def load(self, n: int, ready: bool, chunk: int = 1000) -> None:
        """`n` jobs ready, or half delayed an hour and half reserved (leased) for an hour by a connection
        kept open until the next reset or stop."""
        c = Beanstalk("127.0.0.1", self.port, self.tube)
        leased = 0
        for start in range(0, n, chunk):
            span = range(start, min(n, start + chunk))
            for i in span:
                body = f'{{"n": {i}}}'.encode()
                if ready:
                    c.put_later(body)
                elif i % 2:
                    c.put_later(body, ttr=HOUR_S)
                    leased += 1
                else:
                    c.put_later(body, delay=HOUR_S)
            for _ in span:
                c.put_answer()
        if ready:
            c.close()
            return
        for start in range(0, leased, chunk):
            span = range(start, min(leased, start + chunk))
            for _ in span:
                c.reserve_later(0)
            for _ in span:
                if c.reserve_answer() is None:
                    raise RuntimeError("beanstalkd: a job to lease was not there")
        self.holder = c
