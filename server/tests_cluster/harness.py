"""What the failover tests run: a real etcd, three real `fenec-server` members of one cluster, a
fault proxy (conformance/fault_layer.py) in front of etcd for each member and in front of each
member for the others, and the clients whose own records the history checker reads.

Each member is `python -m fenecdb_server.cli` (the `fenec-server` entry point, on the sources this
interpreter imports) with `--etcd <its etcd proxy> --advertise <its proxy>`: freezing a member's
two proxies cuts it off from etcd and from the other members, while the test's clients still reach
every member directly (the worst case: a deposed primary that clients can still write to).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance"))
from fault_layer import Proxy  # noqa: E402

TOKEN = "cluster-secret"
START_S = 60.0
DEADLINE_S = 30.0
TTL = int(os.environ.get("FENEC_LEASE_TTL", "2"))  # the lease, seconds (--lease-ttl)
ETCD = shutil.which("etcd")
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text)"
CLAIM = "set jobs {owner: $1, run_at: now() + 60000} where run_at <= now() order run_at limit 1 returning id, payload"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Any, deadline: float = DEADLINE_S) -> Any:
    end = time.monotonic() + deadline
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Etcd:
    """A one-member etcd on a data directory of its own; `restart` keeps the directory."""

    def __init__(self, where: Path) -> None:
        assert ETCD is not None
        self.dir = where / "etcd"
        self.port = free_port()
        self.peer = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert ETCD is not None
        peer = f"http://127.0.0.1:{self.peer}"
        self.proc = subprocess.Popen(
            [ETCD, "--data-dir", str(self.dir), "--name", "t", "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"t={peer}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("etcd to answer", self.healthy)

    def healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/health")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


class Member:
    """One server of the cluster; its file, its port and its name survive a kill and a restart."""

    def __init__(self, where: Path, name: str, etcd: Etcd, *flags: str) -> None:
        self.name = name
        self.file = where / f"{name}.fenec"
        self.port = free_port()
        self.etcd_proxy = Proxy()
        self.etcd_proxy.start(etcd.port)
        self.proxy = Proxy()  # the URL the others reach this one at
        self.proxy.start(self.port)
        self.flags = flags
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    @property
    def advertise(self) -> str:
        return self.proxy.url

    def start(self) -> None:
        argv = [sys.executable, "-m", "fenecdb_server.cli", "--file", str(self.file),
                "--http", f"127.0.0.1:{self.port}", "--replication-token", TOKEN, "--sync", "always",
                "--etcd", self.etcd_proxy.url, "--cluster", "t", "--advertise", self.advertise,
                "--lease-ttl", str(TTL), *self.flags]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        threading.Thread(target=self._read, args=(self.proc, ready), daemon=True).start()
        ready.wait(START_S)
        assert any("listening on" in line for line in self.lines), "\n".join(self.lines)

    def _read(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if "listening on" in line:
                ready.set()
        ready.set()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self.stop()
        self.proxy.close()
        self.etcd_proxy.close()

    def request(self, method: str, path: str, body: Any = None, timeout: float = 5.0) -> tuple[int, dict, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"authorization": f"Bearer {TOKEN}"})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(raw) if raw else None
        finally:
            conn.close()

    def status(self) -> dict[str, Any]:
        try:
            code, _, body = self.request("GET", "/_replication/status", timeout=2.0)
        except (OSError, http.client.HTTPException, ValueError):
            return {}
        return body if code == 200 and isinstance(body, dict) else {}


class Cluster:
    """etcd and three members (a, b, c)."""

    def __init__(self, where: Path, *flags: str) -> None:
        self.etcd = Etcd(where)
        self.members: list[Member] = []
        try:
            for name in ("a", "b", "c"):
                self.members.append(Member(where, name, self.etcd, *flags))
        except BaseException:
            self.close()
            raise
        self.by_url = {m.advertise: m for m in self.members}

    def close(self) -> None:
        for m in self.members:
            m.close()
        self.etcd.stop()

    def primary(self, deadline: float = DEADLINE_S) -> Member:
        """The member that says it leads (and whose lease is current), waited for."""
        def leading() -> Member | None:
            for m in self.members:
                if m.proc is not None and m.proc.poll() is None:
                    st = m.status()
                    if st.get("cluster", {}).get("leading"):
                        return m
            return None
        return wait_for("a primary", leading, deadline)

    def settled(self, deadline: float = DEADLINE_S) -> Member:
        """A primary, and each live member following it with nothing behind."""
        p = self.primary(deadline)

        def level() -> bool:
            seq = p.status().get("seq")
            return all(m is p or (m.status().get("role") == "replica" and m.status().get("seq") == seq)
                       for m in self.members if m.proc is not None and m.proc.poll() is None)
        wait_for("every member to follow the primary", level, deadline)
        return p


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def record_times(name: str, times: list[float], elected: list[float] | None = None) -> None:
    """The failover times measured, printed (pytest -s) and appended where FENEC_FAILOVER_TIMES names:
    to a new primary elected (`elected`), and to the first write a client had acknowledged by it."""
    line = f"{name}: {len(times)} failovers"
    if elected:
        line += f"; elected after p50 {percentile(elected, 0.5):.2f} s, max {max(elected):.2f} s"
    line += f"; first write acknowledged after p50 {percentile(times, 0.5):.2f} s, max {max(times):.2f} s"
    print(line)
    out = os.environ.get("FENEC_FAILOVER_TIMES")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
