"""What the failover tests run: a real etcd, three real `fenec-server` members of one cluster on
a network the tests can cut (network.py: namespaces and veth pairs, or fault proxies where a
namespace cannot be made), and the clients whose own records the history checker reads.

Each member is a child_server.Server (`python -m fenecdb_server.cli`, on the sources this
interpreter imports) with `--etcd` and `--advertise` at its place in the network. `Member.cut`
cuts it off from etcd, from the other members or both, while the test's clients still reach it
(the worst case: a deposed primary that clients can still write to must refuse them).
`under_load` is a cluster with writers and a worker on it, closed whatever the test did.
"""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from child_server import Server  # noqa: E402
from history import Load  # noqa: E402
from network import Network, Place, network  # noqa: E402

TOKEN = "cluster-secret"
DEADLINE_S = 30.0
TTL = int(os.environ.get("FENEC_LEASE_TTL", "2"))  # the lease, seconds (--lease-ttl)
ETCD = shutil.which("etcd")
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text)"
SYNC = ("--sync-replicas", "1")


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
    """A one-member etcd at its place in `net`, on a data directory of its own; `restart` keeps
    the directory."""

    def __init__(self, where: Path, net: Network) -> None:
        assert ETCD is not None
        self.dir = where / "etcd"
        self.net = net
        self.host, self.port = net.etcd_host, net.etcd_port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        assert ETCD is not None
        peer = self.net.etcd_peer
        self.proc = subprocess.Popen(
            [*self.net.etcd_prefix, ETCD, "--data-dir", str(self.dir), "--name", "t",
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"t={peer}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("etcd to answer", self.healthy)

    def healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=2)
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


class Member(Server):
    """One server of the cluster at its place; its file, its address and its name survive a kill
    and a restart (`start`)."""

    def __init__(self, where: Path, name: str, place: Place, *flags: str) -> None:
        self.name = name
        self.place = place
        self.file = where / f"{name}.fenec"
        # no answer ceiling: the checks read every row at once, and how many the load wrote depends
        # on how fast this machine is (past 100 000 rows a `get jobs` would be a 413)
        super().__init__("--file", str(self.file), "--replication-token", TOKEN, "--sync", "always",
                         "--etcd", place.etcd, "--cluster", "t", "--advertise", place.advertise,
                         "--lease-ttl", str(TTL), "--max-answer-rows", "0", *place.flags, *flags,
                         http=f"{place.host}:{place.port}", prefix=place.prefix)
        self.ready()

    @property
    def advertise(self) -> str:
        return self.place.advertise

    def start(self) -> None:
        self.spawn()
        self.ready()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def cut(self, etcd: bool = True, peers: bool = True) -> None:
        """Its path to etcd, to the other members, or both, silent until `heal`; the clients still
        reach it."""
        self.place.cut(etcd, peers)

    def heal(self) -> None:
        self.place.heal()

    def close(self) -> None:
        self.stop()
        self.place.close()

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                timeout: float = 5.0) -> tuple[int, dict[str, str], Any]:
        return super().request(method, path, body, {"authorization": f"Bearer {TOKEN}", **(headers or {})},
                               timeout)

    def status(self) -> dict[str, Any]:
        try:
            code, _, body = self.request("GET", "/_replication/status", timeout=2.0)
        except (OSError, http.client.HTTPException, ValueError):
            return {}
        return body if code == 200 and isinstance(body, dict) else {}


class Cluster:
    """etcd and three members (a, b, c) on a network of their own; a context manager that closes
    them all, network included."""

    NAMES = ("a", "b", "c")

    def __init__(self, where: Path, *flags: str) -> None:
        self.net = network(list(self.NAMES))
        self.etcd = Etcd(where, self.net)
        self.members: list[Member] = []
        try:
            self.etcd.start()
            for name in self.NAMES:
                self.members.append(Member(where, name, self.net.place(name), *flags))
        except BaseException:
            self.close()
            raise
        self.by_url = {m.advertise: m for m in self.members}

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            for m in self.members:
                m.close()
            self.etcd.stop()
        finally:
            self.net.close()

    def primary(self, deadline: float = DEADLINE_S) -> Member:
        """The member that says it leads (and whose lease is current), waited for."""
        def leading() -> Member | None:
            for m in self.members:
                if m.running() and m.status().get("cluster", {}).get("leading"):
                    return m
            return None
        return wait_for("a primary", leading, deadline)

    def settled(self, deadline: float = DEADLINE_S) -> Member:
        """A primary, and each live member following it with nothing behind."""
        p = self.primary(deadline)

        def level() -> bool:
            seq = p.status().get("seq")
            return all(m is p or (m.status().get("role") == "replica" and m.status().get("seq") == seq)
                       for m in self.members if m.running())
        wait_for("every member to follow the primary", level, deadline)
        return p


@contextmanager
def under_load(where: Path, *flags: str) -> Iterator[tuple[Cluster, Load]]:
    """A cluster whose primary holds `jobs`, with three writers and a worker on it (history.Load);
    the load stopped and the cluster closed on the way out, whatever happened."""
    with Cluster(where, *flags) as cluster:
        assert cluster.settled().request("POST", "/query", {"query": JOBS})[0] == 200
        load = Load(cluster.members, cluster.by_url)
        try:
            yield cluster, load
        finally:
            load.stop()


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
