"""The cluster of a `cluster` fault scenario (`faults.py`): a one-member etcd and N `fenec-server`
members joined through it (`--etcd`, `--cluster`, `--advertise`), each on a file and a port of its own.

No member is promoted by hand: etcd's lease elects the primary, and after the driver SIGKILLs it,
another (`elected`). `ETCD` is None when no `etcd` is on the PATH: the scenario is then skipped,
never passed. Every process started here is killed by `close`, whatever happened.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from fault_layer import ServerProcess

ETCD = shutil.which("etcd")
START_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str, token: str | None = None) -> tuple[int, Any]:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", path, headers={"authorization": f"Bearer {token}"} if token else {})
        answer = conn.getresponse()
        body = answer.read()
        conn.close()
        return answer.status, json.loads(body) if body.startswith(b"{") else None
    except (OSError, http.client.HTTPException, ValueError):
        return 0, None


class Cluster:
    """etcd on free ports with its data in `where/etcd`, and `members` servers (`where/m<n>.fenec`)."""

    def __init__(self, exe: Path, where: Path, token: str, members: int, flags: tuple[str, ...]) -> None:
        assert ETCD is not None, "no 'etcd' on PATH"
        self.token = token
        self.etcd_port, peer = free_port(), f"http://127.0.0.1:{free_port()}"
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.etcd: subprocess.Popen[bytes] | None = subprocess.Popen(
            [ETCD, "--data-dir", str(where / "etcd"), "--name", "f", "--listen-client-urls", etcd_url,
             "--advertise-client-urls", etcd_url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"f={peer}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.members: list[ServerProcess] = []
        if not self._wait(lambda: _get(self.etcd_port, "/health")[0] == 200):
            raise RuntimeError("etcd did not answer /health")
        for n in range(members):
            port = free_port()
            self.members.append(ServerProcess(
                exe, where / f"m{n}.fenec",
                ("--replication-token", token, "--etcd", etcd_url, "--cluster", "faults",
                 "--advertise", f"http://127.0.0.1:{port}", *flags), port=port))
        starting = [threading.Thread(target=m.start, daemon=True) for m in self.members]  # at once: each loads
        for t in starting:
            t.start()
        for t in starting:
            t.join()
        if any(m.port is None for m in self.members):
            raise RuntimeError("a member did not start: " + " | ".join(line for m in self.members for line in m.log[-3:]))

    @staticmethod
    def _wait(met: Any) -> bool:
        end = time.monotonic() + START_S
        while not met():
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        return True

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    def primary(self) -> ServerProcess | None:
        """The running member that says it is the primary, if one does."""
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None and m.port is not None:
                status, body = _get(m.port, "/_replication/status", self.token)
                if status == 200 and isinstance(body, dict) and body.get("role") == "primary":
                    return m
        return None

    def elected(self) -> ServerProcess:
        """Waits until a running member is primary (raises after START_S)."""
        found: list[ServerProcess] = []

        def met() -> bool:
            m = self.primary()
            if m is not None:
                found.append(m)
            return m is not None

        if not self._wait(met):
            raise RuntimeError(f"no member was elected primary within {START_S:.0f} s")
        return found[-1]

    def close(self) -> None:
        for m in self.members:
            m.kill()
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.kill()
            self.etcd.wait()
        self.etcd = None
