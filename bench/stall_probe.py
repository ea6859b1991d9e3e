"""How long a large or hostile statement stops the other clients of a `fenec-server`.

Starts a server on a free port, keeps two clients busy beside it (one asking `GET /_health` in a
loop, one sending a claim that finds nothing in a loop, each on its own keep-alive connection),
sends one attack at a time on a third connection, and prints, per attack: its answer and how
long it took, and the longest answer each busy client waited for while it was pending (the
stall), beside the longest they waited for with no attack (the baseline).

    python bench/stall_probe.py                # the attacks of issue 18 (a few minutes)
    python bench/stall_probe.py --only quote   # one of them
    python bench/stall_probe.py --held 200     # what a held claim costs the server (RSS)
    python bench/stall_probe.py --large 100000 # a claim, a put and a /batch of that many rows (issue 40)
    python bench/stall_probe.py --unread 6     # six `get jobs` of 1 000 000 rows nobody reads (RSS)
    python bench/stall_probe.py --unread 6 --backup   # six backups of them nobody reads (RSS)
    python bench/stall_probe.py --unread 6 --rows 200000   # the same over fewer jobs
    python bench/stall_probe.py --ceiling 100  # 100 idle health-only connections, then a token holder

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


JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"


def load(server: Server, conn: http.client.HTTPConnection, n: int) -> None:
    for at in range(0, n, 50_000):
        docs = [{"payload": {"n": i}, "run_at": 0, "attempts": 0} for i in range(at, min(n, at + 50_000))]
        server.request(conn, "POST", "/query", json.dumps({"query": "put jobs $1", "params": [docs]}).encode())


def large(n: int, flags: list[str]) -> list[dict[str, object]]:
    """The stall of a claim of n rows over n jobs, a put of n documents, and a /batch of n puts."""
    cases: list[tuple[str, str, bytes]] = [
        ("claim", "/query", json.dumps({"query": CLAIM.replace("limit 10", f"limit {n}"), "params": ["big"]}).encode()),
        ("put", "/query", json.dumps({"query": "put jobs $1", "params": [[{"attempts": 0}] * n]}).encode()),
        ("batch", "/batch", "\n".join([json.dumps({"query": "put jobs {attempts: 0}"})] * n).encode()),
    ]
    out = []
    for name, path, body in cases:
        server = Server("--max-write-rows", "0", *flags)
        try:
            conn = server.connect()
            server.request(conn, "POST", "/query", json.dumps({"query": JOBS}).encode())
            if name == "claim":
                load(server, conn, n)
            health = Busy(server, "GET", "/_health", None)
            claim = Busy(server, "POST", "/query", json.dumps({"query": CLAIM, "params": ["w1"]}).encode())
            time.sleep(2.0)
            base = (health.window(), claim.window())
            rss0 = rss_kb(server.proc.pid)
            t0 = time.perf_counter()
            status = server.request(server.connect(), "POST", path, body)
            took = time.perf_counter() - t0
            during = (health.window(), claim.window())
            health.stop()
            claim.stop()
            out.append({"statement": f"{name} of {n}", "flags": flags, "status": status, "s": round(took, 2),
                        "health_baseline_ms": round(base[0][0], 1), "health_stall_ms": round(during[0][0], 1),
                        "health_answers": during[0][1], "claim_stall_ms": round(during[1][0], 1),
                        "rss_before_mb": rss0 // 1024, "rss_after_mb": rss_kb(server.proc.pid) // 1024})
        finally:
            server.stop()
    return out


def unread(k: int, rows: int, idle: int, backup: bool = False) -> dict[str, object]:
    """RSS and the longest /_health wait while k clients ask `get jobs` over `rows` jobs (or, with
    `backup`, `GET /_admin/backup` of a data file of them) and never read, and RSS once
    --idle-timeout has passed."""
    import socket
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        flags = ["--file", str(Path(where) / "probe.fenec")] if backup else []
        server = Server("--max-write-rows", "0", "--max-answer-rows", "0", "--idle-timeout", str(idle), *flags)
        try:
            conn = server.connect()
            server.request(conn, "POST", "/query", json.dumps({"query": JOBS}).encode())
            load(server, conn, rows)
            health = Busy(server, "GET", "/_health", None)
            time.sleep(2.0)
            before = rss_kb(server.proc.pid)
            health.window()
            if backup:
                ask = b"GET /_admin/backup HTTP/1.1\r\nHost: x\r\n\r\n"
            else:
                body = b'{"query":"get jobs"}'
                ask = b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
            socks = []
            peak = before
            for _ in range(k):
                sock = socket.create_connection((server.host, server.port))
                sock.sendall(ask)
                socks.append(sock)
            deadline = time.monotonic() + idle + 10
            while time.monotonic() < deadline:
                peak = max(peak, rss_kb(server.proc.pid))
                time.sleep(0.1)
            stall = health.window()[0]
            after = rss_kb(server.proc.pid)
            health.stop()
            for sock in socks:
                sock.close()
            return {"unread": k, "what": "backup" if backup else "get jobs", "rows": rows,
                    "rss_before_mb": before // 1024, "rss_peak_mb": peak // 1024, "rss_after_mb": after // 1024,
                    "health_longest_ms": round(stall, 1)}
        finally:
            server.stop()


def ceiling(n: int) -> dict[str, object]:
    """On a server that takes tokens and allows n connections: n connections ask `/_health` once
    (no token) and stay idle, then a token holder asks a query on a new connection."""
    token = "stall-probe-token-0123456789abcdef"
    server = Server("--max-connections", str(n), "--http-token", token)
    try:
        idle = []
        for _ in range(n):
            c = server.connect()
            server.request(c, "GET", "/_health")
            idle.append(c)
        holder = server.connect()
        t0 = time.perf_counter()
        holder.request("POST", "/query", body=json.dumps({"query": JOBS}).encode(),
                       headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
        response = holder.getresponse()
        response.read()
        took = time.perf_counter() - t0
        still = 0
        for c in idle:  # which of the idle ones are still served
            try:
                still += server.request(c, "GET", "/_health") == 200
            except (OSError, http.client.HTTPException):
                pass
        return {"idle_connections": n, "token_holder_status": response.status, "token_holder_ms": round(took * 1000, 1),
                "idle_still_served": still}
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
    parser.add_argument("--large", type=int, default=0, help="a claim, put and /batch of this many rows instead")
    parser.add_argument("--unread", type=int, default=0, help="this many unread gets of --rows jobs instead")
    parser.add_argument("--rows", type=int, default=1_000_000, help="the jobs of --unread (1 000 000)")
    parser.add_argument("--backup", action="store_true", help="--unread asks for backups, not `get jobs`")
    parser.add_argument("--ceiling", type=int, default=0, help="this many idle connections, then a token holder")
    args = parser.parse_args()
    if args.large:
        for row in large(args.large, []):
            print(json.dumps(row), flush=True)
        return 0
    if args.unread:
        print(json.dumps(unread(args.unread, args.rows, 5, args.backup)), flush=True)
        return 0
    if args.ceiling:
        print(json.dumps(ceiling(args.ceiling)), flush=True)
        return 0
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
