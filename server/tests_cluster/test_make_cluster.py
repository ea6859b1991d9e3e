"""`make cluster` (scripts/cluster.py): etcd and three members come up, one of them primary, the
others following it; a write on the primary is read on a replica; Ctrl-C stops them all."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from harness import ETCD, wait_for
from network import free_port

pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd: no 'etcd' on PATH")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cluster.py"


def query(port: int, text: str, headers: dict[str, str] | None = None) -> tuple[int, object]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/query", body=json.dumps({"query": text}), headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def three_free() -> int:
    """A port whose next two are free too (0: not found this time)."""
    base = free_port()
    for port in (base + 1, base + 2):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return 0
    return base


def test_make_cluster_starts_three_members_and_stops_them(tmp_path: Path) -> None:
    base = wait_for("three free ports in a row", three_free)
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--dir", str(tmp_path), "--port", str(base),
                             "--etcd-port", str(free_port()), "--etcd-peer-port", str(free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "cluster up" in line:
                break
        assert any("cluster up" in line for line in lines), "".join(lines)
        roles = {line.split()[1]: line.split()[2] for line in lines if line.startswith("m")}
        assert list(roles.values()).count("primary") == 1, roles
        primary = next(url for url, role in roles.items() if role == "primary")
        port = int(primary.rsplit(":", 1)[1])
        assert query(port, "create collection t (n int)")[0] == 200
        code, _ = query(port, "put t {n: 7}")
        assert code == 200
        replica = next(int(url.rsplit(":", 1)[1]) for url, role in roles.items() if role != "primary")
        wait_for("the replica to hold the row", lambda: query(replica, "get t")[1] == [{"id": 1, "n": 7}])
        code, refused = query(replica, "put t {n: 8}")
        assert code == 403 and primary in str(refused)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines) + out
