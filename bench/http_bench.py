"""HTTP rows of `make queue-bench`: held claims against polling, delayed-job lateness, many
workers claiming ten and acking by /batch, and the per-request costs behind the app's choices.

    .venv/bin/python bench/http_bench.py [--quick]

Each row starts its own `fenec-server` (in memory, 127.0.0.1:0) and prints one line.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from queue_bench import CAS, READ_BACK, READ_PAGE  # the same three statements as in process

ROOT = Path(__file__).resolve().parent.parent
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 1 returning *")
CLAIM10 = CLAIM.replace("limit 1", "limit 10")
ACK = "del jobs where id = $1 and owner = $2 require 1"


def start(*flags: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], tuple[str, int]]:
    """fenec-server (this environment's, else this interpreter's module) on a free loopback port with
    `flags` and `env`: the process, and the address it said it listens on (its stderr read on after)."""
    exe = Path(sys.executable).parent / "fenec-server"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fenecdb_server.cli"]
    proc = subprocess.Popen([*cmd, "--http", "127.0.0.1:0", "--max-connections", "0", *flags],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    assert proc.stderr is not None
    for raw in proc.stderr:
        m = re.search(rb"listening on: http://([\d.]+):(\d+)", raw)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
            return proc, (m.group(1).decode(), int(m.group(2)))
    raise RuntimeError("server did not start")


class Conn:
    """One keep-alive HTTP/1.1 connection, blocking, minimal (the client must not be the bottleneck)."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, path: str, body: bytes, headers: str = "") -> None:
        self.sock.sendall(f"POST {path} HTTP/1.1\r\nHost: b\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
                          .encode() + body)

    def recv(self) -> tuple[int, Any]:
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
                if len(rest) >= n:
                    self.buf = rest[n:]
                    return int(head.split(b" ", 2)[1]), json.loads(rest[:n])
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk

    def query(self, text: str, *params: Any, headers: str = "") -> Any:
        self.send("/query", json.dumps({"query": text, "params": list(params)}).encode(), headers)
        return self.recv()[1]

    def batch(self, lines: list[tuple[str, list[Any]]]) -> Any:
        self.send("/batch", b"\n".join(json.dumps({"query": t, "params": p}).encode() for t, p in lines))
        return self.recv()[1]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def wake_held(addr: tuple[str, int], n: int) -> tuple[list[float], int]:
    w, put = Conn(addr), Conn(addr)
    lat = []
    claims = 0
    for i in range(n):
        w.send("/query", json.dumps({"query": CLAIM, "params": ["w"]}).encode(), "Fenec-Wait: 30000\r\n")
        claims += 1
        time.sleep(0.01)  # let the claim be held
        t0 = time.perf_counter()
        put.query("put jobs {payload: $1, run_at: now(), attempts: 0}", i)
        _, rows = w.recv()
        lat.append(time.perf_counter() - t0)
        assert rows and rows[0]["payload"] == i
        w.query("del jobs where id = $1", rows[0]["id"])
    return lat, claims


def wake_polling(addr: tuple[str, int], n: int, every: float) -> tuple[list[float], int]:
    w, put = Conn(addr), Conn(addr)
    lat: list[float] = []
    claims = 0
    box: dict[str, float] = {}
    for i in range(n):
        # the put lands at a random point of the polling period
        def later(i: int = i) -> None:
            time.sleep(every * ((i * 7919) % 100) / 100)
            box["t0"] = time.perf_counter()
            put.query("put jobs {payload: $1, run_at: now(), attempts: 0}", i)

        t = threading.Thread(target=later)
        t.start()
        while True:
            rows = w.query(CLAIM, "w")
            claims += 1
            if rows:
                lat.append(time.perf_counter() - box["t0"])
                break
            time.sleep(every)
        t.join()
        w.query("del jobs where id = $1", rows[0]["id"])
    return lat, claims


def delayed_lateness(addr: tuple[str, int], n: int) -> list[float]:
    w, put = Conn(addr), Conn(addr)
    late = []
    for i in range(n):
        due = time.time() * 1000 + 50 + (i % 5) * 10
        put.query("put jobs {payload: $1, run_at: $2, attempts: 0}", i, int(due))
        w.send("/query", json.dumps({"query": CLAIM, "params": ["w"]}).encode(), "Fenec-Wait: 30000\r\n")
        _, rows = w.recv()
        late.append(time.time() * 1000 - int(due))
        assert rows
        w.query("del jobs where id = $1", rows[0]["id"])
    return late


def workers(addr: tuple[str, int], jobs: int, clients: int, mode: str) -> tuple[float, list[float], float]:
    fill = Conn(addr)
    for s in range(0, jobs, 1000):
        items = ", ".join(f"{{payload: {i}, run_at: now(), attempts: 0}}" for i in range(s, min(s + 1000, jobs)))
        fill.query(f"put jobs [{items}]")
    claim_lat: list[float] = []
    done = [0]
    read = [0]
    lock = threading.Lock()

    def run(k: int) -> None:
        c = Conn(addr)
        owner = f"w{k}"
        n = 0
        while True:
            n += 1
            t0 = time.perf_counter()
            if mode == "three":
                # what a client without `returning` sends: read the ready page, set those still
                # ready, read back which it won (a race lost between the first two is a job read again)
                page = [r["id"] for r in c.query(READ_PAGE)]
                if not page:
                    break
                mine = f"{owner}:{n}"
                c.query(CAS(len(page)), mine, *page)
                rows = c.query(READ_BACK(len(page)), mine, *page)
                dt = time.perf_counter() - t0
                r = c.batch([(ACK, [row["id"], mine]) for row in rows]) if rows else {"ok": 0}
                assert r["ok"] == len(rows), r
                with lock:
                    claim_lat.append(dt)
                    done[0] += len(rows)
                    read[0] += len(page)
                continue
            rows = c.query(CLAIM10, owner)
            dt = time.perf_counter() - t0
            if not rows:
                break
            if mode == "batch":
                r = c.batch([(ACK, [row["id"], owner]) for row in rows])
                assert r["ok"] == len(rows), r
            else:
                for row in rows:
                    assert c.query(ACK, row["id"], owner) == {"affected": 1}
            with lock:
                claim_lat.append(dt)
                done[0] += len(rows)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    assert done[0] == jobs, done
    lost = 1 - done[0] / read[0] if read[0] else 0.0
    return jobs / elapsed, claim_lat, lost


def micro() -> list[str]:
    """In-process costs: the raw /query route against a FastAPI route doing the same, json
    against orjson, db.execute on the loop against a thread hop."""
    import httpx
    from fastapi import FastAPI, Request
    from fastapi.responses import Response
    from fenecdb_server import Database
    from fenecdb_server.http.app import App, Config
    from fenecdb_server.http.bodies import _dumps_json

    out = []
    db = Database()
    db.query(JOBS)
    items = ", ".join(f"{{payload: {{\"to\": \"a{i}@example.com\"}}, run_at: now() + 3600000, attempts: 0}}"
                      for i in range(10))
    db.query(f"put jobs [{items}]")
    rows = db.query("get jobs")
    app = App(db, Config(version="b"))
    fast = FastAPI()

    @fast.post("/query")
    async def q(request: Request) -> Response:
        doc = json.loads(await request.body())
        r = db.execute([(doc["query"], doc.get("params"))])
        return Response(_dumps_json(r.answers[0]), media_type="application/json")

    body = json.dumps({"query": "get jobs select id limit 1"}).encode()

    async def per_request(target: Any, n: int = 3000) -> float:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=target), base_url="http://b") as c:
            for _ in range(200):
                await c.post("/query", content=body)
            t0 = time.perf_counter()
            for _ in range(n):
                await c.post("/query", content=body)
            return (time.perf_counter() - t0) / n * 1e6

    # the ASGI client's own cost is the same for both, so the difference is the route's
    raw_us = asyncio.run(per_request(app))
    fast_us = asyncio.run(per_request(fast))
    out.append(f"in-process /query via ASGI client: raw route {raw_us:.0f} us, FastAPI route {fast_us:.0f} us "
               f"(difference {fast_us - raw_us:.0f} us a request)")
    try:
        import orjson

        n = 20000
        t0 = time.perf_counter()
        for _ in range(n):
            _dumps_json(rows)
        j = (time.perf_counter() - t0) / n * 1e6
        t0 = time.perf_counter()
        for _ in range(n):
            orjson.dumps(rows)
        o = (time.perf_counter() - t0) / n * 1e6
        out.append(f"encode a 10-row claim answer: json {j:.1f} us, orjson {o:.1f} us")
    except ImportError:
        out.append("orjson not installed")

    async def hop(threaded: bool, n: int = 3000) -> float:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(1)
        loop = asyncio.get_running_loop()
        stmt = [("get jobs select id limit 1", None)]
        t0 = time.perf_counter()
        for _ in range(n):
            if threaded:
                await loop.run_in_executor(pool, lambda: db.execute(stmt))
            else:
                db.execute(stmt)
        pool.shutdown()
        return (time.perf_counter() - t0) / n * 1e6

    on_loop = asyncio.run(hop(False))
    in_thread = asyncio.run(hop(True))
    out.append(f"db.execute of a one-row get: on the loop {on_loop:.1f} us, with a thread hop {in_thread:.1f} us")
    return out


def measure(quick: bool) -> dict[str, dict[str, float]]:
    """One round of every HTTP row: {row: {measure: value}}."""
    n = 60 if quick else 200
    rows: dict[str, dict[str, float]] = {}
    proc, addr = start()
    try:
        Conn(addr).query(JOBS)
        put = Conn(addr)
        rtt = []
        for i in range(n):
            time.sleep(0.01)  # the same pause as the wake rows: a server idle 10 ms answers slower
            t0 = time.perf_counter()
            put.query("put jobs {payload: $1, run_at: null, attempts: 0}", i)
            rtt.append(time.perf_counter() - t0)
        put.query("del jobs")
        rows["a put's round trip after 10 ms idle (baseline)"] = {"p50_ms": pct(rtt, .5) * 1e3,
                                                                 "p99_ms": pct(rtt, .99) * 1e3}
        lat, claims = wake_held(addr, n)
        rows["wake: held claim (Fenec-Wait) woken by a put"] = {
            "p50_ms": pct(lat, .5) * 1e3, "p99_ms": pct(lat, .99) * 1e3, "claims_per_job": claims / n}
        for every in (0.010, 0.100):
            m = n if every < 0.05 else max(n // 4, 30)
            lat, claims = wake_polling(addr, m, every)
            rows[f"wake: polling every {every * 1e3:.0f} ms"] = {
                "p50_ms": pct(lat, .5) * 1e3, "p99_ms": pct(lat, .99) * 1e3, "claims_per_job": claims / m}
        late = delayed_lateness(addr, max(n // 4, 30))
        rows["a delayed job's lateness (answer after run_at)"] = {
            "p50_ms": pct(late, .5), "p99_ms": pct(late, .99), "min_ms": min(late)}
    finally:
        proc.terminate()
        proc.wait()
    jobs = 4000 if quick else 20000
    for mode, how in (("batch", "claim 10 + one /batch of acks (2 round trips)"),
                      ("single", "claim 10 + 10 single acks (11 round trips)"),
                      ("three", "read page / set if ready / read back + /batch of acks (4 round trips)")):
        proc, addr = start()
        try:
            Conn(addr).query(JOBS)
            rate, cl, lost = workers(addr, jobs, 16, mode)
            row = {"jobs_per_s": rate, "claim_p50_ms": pct(cl, .5) * 1e3, "claim_p99_ms": pct(cl, .99) * 1e3}
            if mode == "three":
                row["lost_share"] = lost
            rows[f"16 HTTP clients, {how}"] = row
        finally:
            proc.terminate()
            proc.wait()
    return rows


def line(name: str, row: dict[str, float], spread: dict[str, list[float]] | None = None) -> str:
    parts = []
    for k, v in row.items():
        txt = f"{v:,.2f}" if v < 100 else f"{v:,.0f}"
        if spread and k in spread and spread[k][0] != spread[k][1]:
            lo, hi = spread[k]
            txt += f" ({lo:,.2f}–{hi:,.2f})" if hi < 100 else f" ({lo:,.0f}–{hi:,.0f})"
        parts.append(f"{k} {txt}")
    return f"  {name:<76} " + ", ".join(parts)


def run(rounds: int = 3, quick: bool = False) -> dict[str, Any]:
    """The HTTP rows of `make queue-bench`: medians over `rounds` (min–max in brackets), and the
    in-process costs behind the app's choices."""
    print(f"\nover HTTP, {rounds} round(s), medians (min–max)" + (" (quick)" if quick else ""), flush=True)
    runs = []
    for r in range(rounds):
        runs.append(measure(quick))
        print(f"  round {r + 1} of {rounds} done", flush=True)
    out: dict[str, Any] = {}
    for name in runs[0]:
        med = {k: statistics.median(x[name][k] for x in runs) for k in runs[0][name]}
        spread = {k: [min(x[name][k] for x in runs), max(x[name][k] for x in runs)] for k in runs[0][name]}
        out[name] = {**med, "spread": spread}
        print(line(name, med, spread), flush=True)
    micro_lines = micro()
    for m in micro_lines:
        print(f"  {m}", flush=True)
    out["micro"] = micro_lines
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    rounds = 1 if quick else 3
    run(rounds, quick)


if __name__ == "__main__":
    main()
