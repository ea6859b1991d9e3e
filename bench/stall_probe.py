"""How long a large or hostile statement stops the other clients of a `fenec-server`.

Starts a server on a free port, keeps two clients busy beside it (one asking `GET /_health` in a
loop, one sending a claim that finds nothing in a loop, each on its own keep-alive connection),
sends one attack at a time on a third connection, and prints, per attack: its answer and how
long it took, and the longest answer each busy client waited for while it was pending (the
stall), beside the longest they waited for with no attack (the baseline).

    python bench/stall_probe.py                # the attacks of issue 18 (a few minutes)
    python bench/stall_probe.py --only quote   # one of them
    python bench/stall_probe.py --held 200     # what a held claim costs the server (RSS)

The 16 MB statements run twice: against the default `--max-statement-bytes` (refused, 413)
and with the ceiling off (`--max-statement-bytes 0`: parsed in a worker thread).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")


def in_list(size: int) -> str:
    head, tail = "get jobs where attempts in [", "] count"
    return head + ",".join(["1"] * ((size - len(head) - len(tail)) // 2)) + tail


def literal(size: int) -> str:
    head, tail = 'get jobs where owner = "', '" count'
    return head + "x" * (size - len(head) - len(tail)) + tail


MB = 1_000_000
# (name, server flags, the statement)
ATTACKS: list[tuple[str, list[str], Callable[[], str]]] = [
    ("quote", [], lambda: "(" * 600 + '"' + '\\"' * 50_000),
    ("quote-in-where", [], lambda: "get jobs where " + "(" * 600 + '"' + '\\"' * 50_000),
    ("in-list-1MB", [], lambda: in_list(MB)),
    ("literal-1MB", [], lambda: literal(MB)),
    ("in-list-16MB", [], lambda: in_list(16 * MB)),
    ("literal-16MB", [], lambda: literal(16 * MB)),
    ("literal-16MB-unlimited", ["--max-statement-bytes", "0"], lambda: literal(16 * MB)),
]


class Server:
    def __init__(self, *flags: str) -> None:
        exe = Path(sys.executable).parent / "fenec-server"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fenecdb_server.cli"]
        self.proc = subprocess.Popen([*cmd, "--http", "127.0.0.1:0", "--max-connections", "0", *flags],
                                     stderr=subprocess.PIPE, env=dict(os.environ))
        assert self.proc.stderr is not None
        while True:
            line = self.proc.stderr.readline().decode()
            if not line:
                raise RuntimeError("the server did not start")
            m = re.search(r"listening on: http://([\d.]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
        threading.Thread(target=lambda: [None for _ in self.proc.stderr or ()], daemon=True).start()

    def request(self, conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None) -> int:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=600)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Busy:
    """A client asking one thing in a loop; records the longest wait of each window."""

    def __init__(self, server: Server, method: str, path: str, body: bytes | None) -> None:
        self.server, self.method, self.path, self.body = server, method, path, body
        self.longest = 0.0
        self.count = 0
        self.errors = 0
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        conn = self.server.connect()
        while not self.stopped.is_set():
            t0 = time.perf_counter()
            status = self.server.request(conn, self.method, self.path, self.body)
            took = time.perf_counter() - t0
            with self.lock:
                self.longest = max(self.longest, took)
                self.count += 1
                self.errors += status != 200

    def window(self) -> tuple[float, int]:
        """(longest wait in ms, answers) since the last call; starts a new window."""
        with self.lock:
            out = (self.longest * 1000, self.count)
            self.longest, self.count = 0.0, 0
        return out

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(600)


def probe(name: str, flags: list[str], make: Callable[[], str]) -> dict[str, object]:
    server = Server(*flags)
    try:
        conn = server.connect()
        server.request(conn, "POST", "/query", json.dumps(
            {"query": "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"}
        ).encode())
        text = make()
        body = json.dumps({"query": text}).encode()
        health = Busy(server, "GET", "/_health", None)
        claim = Busy(server, "POST", "/query", json.dumps({"query": CLAIM, "params": ["w1"]}).encode())
        time.sleep(2.0)
        base = (health.window(), claim.window())
        t0 = time.perf_counter()
        status = server.request(conn, "POST", "/query", body)
        took = time.perf_counter() - t0
        during = (health.window(), claim.window())
        health.stop()
        claim.stop()
        return {"attack": name, "statement_bytes": len(text.encode()), "status": status, "attack_s": round(took, 2),
                "health_baseline_ms": round(base[0][0], 1), "health_stall_ms": round(during[0][0], 1),
                "health_answers": during[0][1], "claim_baseline_ms": round(base[1][0], 1),
                "claim_stall_ms": round(during[1][0], 1), "claim_answers": during[1][1]}
    finally:
        server.stop()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def held_cost(n: int) -> dict[str, object]:
    """The server's resident memory with n claims held (Fenec-Wait) against none."""
    server = Server()
    try:
        conn = server.connect()
        server.request(conn, "POST", "/query", json.dumps(
            {"query": "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"}
        ).encode())
        for _ in range(50):  # warm: every code path of a held claim has run once
            server.request(conn, "GET", "/_health")
        time.sleep(0.5)
        before = rss_kb(server.proc.pid)
        socks = []
        for i in range(n):
            c = server.connect()
            c.request("POST", "/query", body=json.dumps({"query": CLAIM, "params": [f"w{i}"]}).encode(),
                      headers={"Content-Type": "application/json", "Fenec-Wait": "30000"})
            socks.append(c)
        time.sleep(2.0)
        after = rss_kb(server.proc.pid)
        for c in socks:
            c.close()
        return {"held": n, "rss_before_kb": before, "rss_after_kb": after,
                "kb_per_held_claim": round((after - before) / n, 1)}
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="run only the attacks whose name contains this")
    parser.add_argument("--held", type=int, default=0, help="measure what this many held claims cost instead")
    args = parser.parse_args()
    if args.held:
        print(json.dumps(held_cost(args.held)), flush=True)
        return 0
    for name, flags, make in ATTACKS:
        if args.only and args.only not in name:
            continue
        print(json.dumps(probe(name, flags, make)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
