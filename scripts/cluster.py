"""`make cluster`: etcd and three `fenec-server` members of one cluster on this machine, to try failover.

    python scripts/cluster.py [--dir ./cluster-data] [--port 8081] [--etcd-port 2379] [--etcd-peer-port 2380]

Starts etcd (its data in <dir>/etcd) and three members on 127.0.0.1:<port>, <port>+1, <port>+2
(files <dir>/m1.fenec ..., `--sync-replicas 1`, `--sync always`, replication token `try-me`, or
$FENEC_REPLICATION_TOKEN), waits for one to be elected, and prints each member's URL and role.
Each member's log is <dir>/m<n>.log. Ctrl-C stops them all (and etcd). docs/operations.md,
"Failover", says what to try: kill the primary and watch another take over.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TOKEN = os.environ.get("FENEC_REPLICATION_TOKEN", "try-me")


def status(port: int) -> dict[str, Any]:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/_replication/status", headers={"authorization": f"Bearer {TOKEN}"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        conn.close()
        return body if resp.status == 200 and isinstance(body, dict) else {}
    except (OSError, http.client.HTTPException, ValueError):
        return {}


def etcd_up(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def server_command() -> list[str]:
    """The `fenec-server` beside this interpreter (the repository's .venv), else on PATH, else this
    interpreter's module."""
    here = Path(sys.executable).parent / "fenec-server"
    if here.exists():
        return [str(here)]
    found = shutil.which("fenec-server")
    return [found] if found else [sys.executable, "-m", "fenecdb_server.cli"]


def main() -> int:
    ap = argparse.ArgumentParser(description="etcd and three fenec-server members of one cluster")
    ap.add_argument("--dir", default="./cluster-data")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--etcd-port", type=int, default=2379)
    ap.add_argument("--etcd-peer-port", type=int, default=2380)
    args = ap.parse_args()
    etcd = shutil.which("etcd")
    if etcd is None:
        print("no 'etcd' on PATH: install it (Debian: apt-get install etcd-server)", file=sys.stderr)
        return 1
    where = Path(args.dir)
    where.mkdir(parents=True, exist_ok=True)
    client = f"http://127.0.0.1:{args.etcd_port}"
    peer = f"http://127.0.0.1:{args.etcd_peer_port}"
    procs: list[subprocess.Popen[bytes]] = []

    def stop_all() -> None:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)  # even where it was started ignoring it (in the background)
    try:
        with open(where / "etcd.log", "ab") as out:
            procs.append(subprocess.Popen(
                [etcd, "--data-dir", str(where / "etcd"), "--name", "fenec", "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer,
                 "--initial-advertise-peer-urls", peer, "--initial-cluster", f"fenec={peer}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out))
        deadline = time.monotonic() + 30
        while not etcd_up(args.etcd_port):
            if time.monotonic() > deadline or procs[0].poll() is not None:
                print(f"etcd did not start: see {where / 'etcd.log'}", file=sys.stderr)
                return 1
            time.sleep(0.1)
        ports = [args.port + n for n in range(3)]
        for n, port in enumerate(ports, 1):
            url = f"http://127.0.0.1:{port}"
            with open(where / f"m{n}.log", "ab") as out:
                procs.append(subprocess.Popen(
                    [*server_command(), "--file", str(where / f"m{n}.fenec"), "--http", f"127.0.0.1:{port}",
                     "--replication-token", TOKEN, "--sync", "always", "--sync-replicas", "1",
                     "--etcd", client, "--cluster", "try", "--advertise", url],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out))
        deadline = time.monotonic() + 60
        while not any(status(p).get("role") == "primary" for p in ports):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                print(f"no primary was elected: see the logs in {where}", file=sys.stderr)
                stop_all()
                return 1
            time.sleep(0.2)
        print(f"etcd: {client} (cluster 'try', keys under /fenec/try/)")
        for n, port in enumerate(ports, 1):
            st = status(port)
            print(f"m{n}: http://127.0.0.1:{port}  {st.get('role', '?')}  (log {where / f'm{n}.log'})")
        print(f"replication token: {TOKEN}; status: curl -H 'authorization: Bearer {TOKEN}' "
              f"http://127.0.0.1:{ports[0]}/_replication/status")
        print("cluster up: Ctrl-C stops it", flush=True)
        while all(p.poll() is None for p in procs[:1]):
            time.sleep(0.5)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        stop_all()


if __name__ == "__main__":
    sys.exit(main())
