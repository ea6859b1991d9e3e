"""Who gets the job, measured: one order at a time to couriers waiting in a city 10 km across.

    .venv/bin/python bench/bidding_bench.py [--couriers 10,100,1000] [--orders 40] [--seed 7]

Each courier holds the nearest-job claim (`order distance(pickup, $2) limit 1`, `Fenec-Wait`) on
its own connection from its own point. The bench places one order at a random point, waits for
the first courier's answer, sends that courier's claim again (it waits for the next order), and
lets the server settle before the next order. Each row reports:

* p50 and p99 latency from the put to the winner's answer;
* how often the nearest waiting courier took the order, and how much further than the nearest
  the winner was (median, metres);
* the server's CPU per order (its process's user + system time over the whole series, divided by
  the orders: the put, every look, the winner's run and its claim sent again);
* held-claim runs per order (`fenec_held_runs_total`).

`bidding` is the server as it is. `raced` is the same server started with
`FENEC_HELD_BIDDING=off`: every courier's line is woken, looks and runs on its own, and the
first run to write wins. A raced order costs a run per courier, so the raced rows place fewer
orders at 1 000 couriers (8 by default).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import http_bench  # run as a script: bench/ is on the path

RIDES = "create collection rides (pickup geo @geo, run_at timestamp @sorted, owner text, attempts int)"
NEAREST = ("set rides {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
           "where run_at <= now() order distance(pickup, $2) limit 1 returning id, pickup")
ORDER = "put rides {pickup: $1, run_at: now(), attempts: 0}"
CENTRE = (29.0, 41.0)
HALF_KM = 5.0  # the city is 10 km across
SETTLE_S = 0.02  # between orders: the winner's claim is held again, the others have looked again


def start(bidding: bool) -> tuple[subprocess.Popen[bytes], tuple[str, int]]:
    return http_bench.start(env={**os.environ, "FENEC_HELD_BIDDING": "on" if bidding else "off"})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metres(a: list[float], b: list[float]) -> float:
    """Great-circle distance, as the server's distance() works it out."""
    lon1, lat1, lon2, lat2 = map(math.radians, (a[0], a[1], b[0], b[1]))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6_371_008.8 * math.asin(math.sqrt(h))


def random_point(rng: random.Random) -> list[float]:
    dlat = HALF_KM / 111.2
    dlon = HALF_KM / (111.2 * math.cos(math.radians(CENTRE[1])))
    return [CENTRE[0] + rng.uniform(-dlon, dlon), CENTRE[1] + rng.uniform(-dlat, dlat)]


class Conn:
    """One keep-alive HTTP/1.1 connection, minimal and blocking."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, body: dict[str, Any], headers: str = "") -> None:
        data = json.dumps(body).encode()
        self.sock.sendall(f"POST /query HTTP/1.1\r\nHost: b\r\nContent-Length: {len(data)}\r\n{headers}\r\n"
                          .encode() + data)

    def answer(self) -> tuple[int, Any] | None:
        """A whole answer if the buffer holds one."""
        head, sep, rest = self.buf.partition(b"\r\n\r\n")
        if not sep:
            return None
        n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        if len(rest) < n:
            return None
        self.buf = rest[n:]
        return int(head.split(b" ", 2)[1]), json.loads(rest[:n])

    def recv(self) -> tuple[int, Any]:
        while True:
            got = self.answer()
            if got is not None:
                return got
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk

    def get(self, path: str) -> str:
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
                if len(rest) >= n:
                    self.buf = rest[n:]
                    return rest[:n].decode()
            self.buf += self.sock.recv(65536)


def held_and_runs(c: Conn) -> tuple[int, int]:
    text = c.get("/_metrics")
    held = int(re.search(r"^fenec_held_claims (\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
    runs = int(re.search(r"^fenec_held_runs_total (\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
    return held, runs


def row(couriers: int, orders: int, bidding: bool, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    proc, addr = start(bidding)
    conns: list[Conn] = []
    try:
        admin = Conn(addr)
        admin.send({"query": RIDES})
        assert admin.recv()[0] == 200
        points = [random_point(rng) for _ in range(couriers)]
        wait = "Fenec-Wait: 30000\r\n"
        sel = selectors.DefaultSelector()
        for i, p in enumerate(points):
            c = Conn(addr)
            c.send({"query": NEAREST, "params": [f"c{i}", p]}, wait)
            sel.register(c.sock, selectors.EVENT_READ, i)
            conns.append(c)
        deadline = time.monotonic() + 60
        while held_and_runs(admin)[0] < couriers:
            if time.monotonic() > deadline:
                raise RuntimeError("the couriers were never all held")
            time.sleep(0.05)
        latencies: list[float] = []
        further: list[float] = []
        nearest_took = 0
        _, runs0 = held_and_runs(admin)
        cpu0 = cpu_seconds(proc.pid)
        for _ in range(orders):
            at = random_point(rng)
            best = min(metres(at, p) for p in points)
            t0 = time.perf_counter()
            admin.send({"query": ORDER, "params": [at]})
            winner = None
            while winner is None:
                for key, _ in sel.select(10):
                    c = conns[key.data]
                    chunk = c.sock.recv(65536)
                    if not chunk:
                        raise ConnectionError("a courier's connection closed")
                    c.buf += chunk
                    got = c.answer()
                    if got is not None:
                        winner = (key.data, got)
                        break
            t1 = time.perf_counter()
            assert admin.recv()[0] == 200
            k, (status, rows) = winner
            assert status == 200 and len(rows) == 1, (status, rows)
            latencies.append((t1 - t0) * 1000)
            d = metres(at, points[k])
            further.append(d - best)
            nearest_took += d - best < 0.01
            conns[k].send({"query": NEAREST, "params": [f"c{k}", points[k]]}, wait)  # it waits again
            time.sleep(SETTLE_S)
        cpu = cpu_seconds(proc.pid) - cpu0
        _, runs1 = held_and_runs(admin)
        latencies.sort()
        return {
            "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "nearest_took": f"{nearest_took}/{orders}",
            "further_m_median": statistics.median(further),
            "server_cpu_ms_per_order": cpu * 1000 / orders,
            "runs_per_order": (runs1 - runs0) / orders,
        }
    finally:
        for c in conns:
            c.sock.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(sizes: tuple[int, ...] = (10, 100, 1000), orders: int = 40, seed: int = 7) -> dict[str, Any]:
    """The rows of `make queue-bench`'s held-nearest table; prints them as they come."""
    print(f"\nheld nearest, one order at a time, couriers in a city 10 km across ({orders} orders a row)",
          flush=True)
    out: dict[str, Any] = {}
    for n in sizes:
        for bidding in (True, False):
            name = f"{n} couriers, {'bidding' if bidding else 'raced'}"
            # a raced order costs a run per courier: fewer of them at 1 000 keep the bench short
            res = row(n, orders if bidding else min(orders, max(8, 4000 // n)), bidding, seed + n)
            out[name] = res
            print(f"  {name:<26} p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms, "
                  f"nearest took {res['nearest_took']}, winner further (median) {res['further_m_median']:.0f} m, "
                  f"server CPU {res['server_cpu_ms_per_order']:.2f} ms/order, "
                  f"{res['runs_per_order']:.1f} runs/order", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--couriers", default="10,100,1000", help="comma-separated courier counts")
    ap.add_argument("--orders", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    run(tuple(int(x) for x in args.couriers.split(",")), args.orders, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
