"""The Python client's own cost of one request: a claim of 10 against a live local `fenec-server`.

    .venv/bin/python bench/client_cost.py                 # CPU time (time.process_time), sync and async
    .venv/bin/python bench/client_cost.py --callgrind     # instructions (valgrind --tool=callgrind), both

Only the client's process is measured; the server runs in its own process (in memory, 127.0.0.1:0).

* CPU: `time.process_time()` (user + system time of this process) over N claims, divided by N,
  after a warm-up. It moves with the machine's load; on a shared machine take the lowest of rounds.
* The floor row is the same claim over a bare socket with orjson (`run_floor`): what any Python
  client must spend at least, measured in the same run and conditions. The httpx rows post the
  same claim through `httpx.Client` / `httpx.AsyncClient` with orjson (httpx's own cost; skipped
  when httpx is not installed: the client does not need it, the test tools bring it).
* Instructions: this script runs itself under callgrind twice, with N1 and N2 claims, and the
  difference of the two totals divided by N2 - N1 is one claim's instructions: the start-up, the
  load and the warm-up are the same in both runs and cancel. Instruction counts do not depend on
  the load of the machine.

Each claim is `db.query(claim, [owner])`, the statement `bench/compare` sends (a claim of 10 that
takes 10 ready jobs, leased for 30 s); the server is loaded with enough ready jobs first.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import fenecdb

SCHEMA = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
PUT = "put jobs $1"
WARM = 50


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    exe = Path(sys.executable).parent / "fenec-server"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fenecdb_server.cli"]
    proc = subprocess.Popen([*cmd, "--http", "127.0.0.1:0", "--max-connections", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stderr is not None
    for raw in proc.stderr:
        m = re.search(rb"listening on: (http://[\d.]+:\d+)", raw)
        if m:
            return proc, m.group(1).decode()
    proc.kill()
    raise SystemExit("fenec-server did not start")


def load(url: str, claims: int) -> None:
    with fenecdb.Client(url, timeout=60) as db:
        db.query(SCHEMA)
        docs = [{"payload": {"to": f"u{i}@example.com"}, "run_at": 1_000_000, "attempts": 0}
                for i in range(10 * claims)]
        for at in range(0, len(docs), 5000):
            db.query(PUT, [docs[at:at + 5000]])


def run_sync(url: str, n: int) -> float:
    with fenecdb.Client(url) as db:
        for i in range(WARM):
            db.query(CLAIM, [f"w:{i}"])
        started = time.process_time()
        for i in range(n):
            rows = db.query(CLAIM, [f"w:{i}"])
        spent = time.process_time() - started
        assert len(rows) == 10, rows
    return spent / n


def run_async(url: str, n: int) -> float:
    async def main() -> float:
        async with fenecdb.AsyncClient(url) as db:
            for i in range(WARM):
                await db.query(CLAIM, [f"w:{i}"])
            started = time.process_time()
            for i in range(n):
                rows = await db.query(CLAIM, [f"w:{i}"])
            spent = time.process_time() - started
            assert len(rows) == 10, rows
        return spent / n

    return asyncio.run(main())


def run_floor(url: str, n: int) -> float:
    """The floor: the same claim over one blocking socket, the request's bytes made by an f-string,
    the answer framed by its Content-Length alone and decoded by orjson; no checks, no errors."""
    import socket
    from urllib.parse import urlsplit

    import orjson

    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def claim(owner: str) -> list[dict[str, object]]:
        body = orjson.dumps({"query": CLAIM, "params": [owner]})
        sock.sendall(f"POST /query HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        data = sock.recv(65536)
        while (end := data.find(b"\r\n\r\n")) < 0:
            data += sock.recv(65536)
        at = data.find(b"content-length:")
        need = end + 4 + int(data[at + 15:data.find(b"\r\n", at)])
        while len(data) < need:
            data += sock.recv(65536)
        return orjson.loads(data[end + 4:])

    for i in range(WARM):
        claim(f"w:{i}")
    started = time.process_time()
    for i in range(n):
        rows = claim(f"w:{i}")
    spent = time.process_time() - started
    assert len(rows) == 10, rows
    sock.close()
    return spent / n


def run_httpx(url: str, n: int) -> float:
    """httpx's own cost: the same claim posted by `httpx.Client`, its answer decoded by orjson."""
    import httpx
    import orjson

    with httpx.Client(base_url=url) as http:
        def claim(owner: str) -> list[dict[str, object]]:
            body = orjson.dumps({"query": CLAIM, "params": [owner]})
            answer = http.post("/query", content=body, headers={"Content-Type": "application/json"})
            return orjson.loads(answer.content)

        for i in range(WARM):
            claim(f"w:{i}")
        started = time.process_time()
        for i in range(n):
            rows = claim(f"w:{i}")
        spent = time.process_time() - started
    assert len(rows) == 10, rows
    return spent / n


def run_httpx_async(url: str, n: int) -> float:
    """The same through `httpx.AsyncClient`."""
    import httpx
    import orjson

    async def main() -> float:
        async with httpx.AsyncClient(base_url=url) as http:
            async def claim(owner: str) -> list[dict[str, object]]:
                body = orjson.dumps({"query": CLAIM, "params": [owner]})
                answer = await http.post("/query", content=body, headers={"Content-Type": "application/json"})
                return orjson.loads(answer.content)

            for i in range(WARM):
                await claim(f"w:{i}")
            started = time.process_time()
            for i in range(n):
                rows = await claim(f"w:{i}")
            spent = time.process_time() - started
        assert len(rows) == 10, rows
        return spent / n

    return asyncio.run(main())


RUNS = {"sync": run_sync, "async": run_async, "floor": run_floor, "httpx": run_httpx,
        "httpx-async": run_httpx_async}


def child(kind: str, url: str, n: int) -> float:
    return RUNS[kind](url, n)


def instructions(kind: str, url: str, n: int) -> int:
    """The instructions of one whole run of this script (`--child`) under callgrind."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           sys.executable, __file__, "--child", kind, "--url", url, "--requests", str(n)],
                          capture_output=True, text=True, check=True)
    m = re.search(r"Collected : (\d+)", done.stderr)
    assert m, done.stderr[-2000:]
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="claims per measurement (CPU time) [2000]")
    ap.add_argument("--rounds", type=int, default=3, help="CPU-time rounds; the lowest is kept [3]")
    ap.add_argument("--callgrind", action="store_true", help="count instructions instead of CPU time")
    ap.add_argument("--child", choices=list(RUNS), help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.url, args.requests)
        return 0
    if args.callgrind and shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    small, big = 50, 250  # claims in the two callgrind runs
    per_kind = 2 * (WARM + small + big) if args.callgrind else args.rounds * (WARM + args.requests)
    proc, url = start_server()
    try:
        load(url, len(RUNS) * per_kind + 10)
        print(f"fenecdb client {fenecdb.__version__}, {fenecdb.Client.__module__}; a claim of 10 over HTTP")
        for kind in RUNS:
            if kind.startswith("httpx") and importlib.util.find_spec("httpx") is None:
                print(f"{kind:11}  skipped: httpx is not installed")
                continue
            if args.callgrind:
                a, b = instructions(kind, url, small), instructions(kind, url, big)
                print(f"{kind:11}  {(b - a) / (big - small):10,.0f} instructions a request (callgrind)")
            else:
                best = min(child(kind, url, args.requests) for _ in range(args.rounds))
                print(f"{kind:11}  {best * 1e6:8.1f} us of client CPU a request (process_time, lowest of "
                      f"{args.rounds} x {args.requests})")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
