"""The server's own CPU per claim over HTTP: a `fenec-server` child, one keep-alive connection, a
claim of 10 sent --claims times; the child's user+system CPU (from /proc) divided by the claims.

The client here is `http.client` from the standard library, so the figure is the server's alone
(its share of each request: the kernel's socket work, HTTP parsing, JSON, the engine, the answer).
`--src DIR` runs the server from another checkout's `server/src` (to measure a change against main
in one sitting); the engine's own share is `bench/claim_bytecodes.py` and `make queue-bench`.

`--door asgi` sends every request through the ASGI door instead of the direct path (the server
runs with `--access-log /dev/null`, which the direct path leaves to that door): the difference is
what the direct path saves, the access log's own lines included. `--get PATH` sends `GET PATH`
instead of the claims (the door's own cost, on a route of no data: `/_health`, `/_metrics`).

`--wakes` measures a wake cycle instead (the harness's wake row, `bench/compare/loadgen.py`
`wake_latency`): a worker's claim of 1 held (`Fenec-Wait`), a pause, a put on a connection of its
own, the job in the worker's hand, --claims times; the server runs on a file at its default
`--sync`, as the harness's, and with `--busy-poll 0`, so its count holds no spin that depends on time.

`--puts` measures a durable put instead (the harness's durable row, `bench/compare/fenec.py`'s put):
the server on a file under `--sync always` and `--busy-poll 0`, one put on one connection at a time,
--claims times; its sync thread's instructions are counted with its loop's.

`--callgrind` runs the server under valgrind's callgrind and prints its instructions a claim
instead (the counters zeroed after the warm-up, dumped after the claims): a count, not a time, so
it holds on a loaded machine. `--cache-sim` adds callgrind's cache simulation, with a last level
of 128 KiB (`CACHE_SIM`): the cache lines a claim (or a wake cycle) reads that are not among the
last 128 KiB it touched, a count of its code and data's footprint rather than of its work. It
prints them a claim, by where they were read (the interpreter, the compiled engine, the head
parser, ...), the largest first. A wake comes after 10 ms in which other processes ran, so it
starts with cold caches, and this count may say more of its time than its instructions do
(bench/README.md, "The wake's footprint").

    .venv/bin/python bench/server_cost.py [--claims 3000] [--src other/server/src] [--door direct|asgi]
                                          [--get /_health] [--wakes] [--puts] [--callgrind [--cache-sim]]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 10 returning *")
# the harness's waiting worker's claim (bench/compare/fenec.py), its lease an hour: under valgrind the
# cycles outlast 30 s, and a lapsed lease would hand an old job to the next claim before the one put
WAIT_CLAIM = CLAIM.replace("limit 10", "limit 1").replace("30000", "3600000")
PUT = "put jobs {payload: $1, run_at: now(), attempts: 0}"
# callgrind's caches: the first level split, 32 KiB each, as a common x86 core's; a last level of 128 KiB,
# smaller than any real one, so that what a cycle misses there is what it touches beyond its hottest part
CACHE_SIM = ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=131072,8,64"]
WAKE_PAUSE = 0.01  # the harness's pause between the held claim and the put (loadgen.WAKE_PAUSE)


def wait_for_server(port: int, proc: subprocess.Popen, seconds: float = 60) -> None:
    """Until the server started as `proc` accepts a connection on `port` (also bench/durable_cost.py)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("fenec-server did not start") from None
            time.sleep(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=int, default=3000)
    ap.add_argument("--src", default=None, help="a server/src to import the server from")
    ap.add_argument("--door", choices=("direct", "asgi"), default="direct",
                    help="asgi: every request through the ASGI door (--access-log /dev/null)")
    ap.add_argument("--get", default=None, help="send GET of this path instead of the claims (e.g. /_health)")
    ap.add_argument("--wakes", action="store_true", help="a wake cycle of a held claim, --claims times")
    ap.add_argument("--puts", action="store_true", help="a durable put (--sync always), --claims times")
    ap.add_argument("--callgrind", action="store_true", help="count the server's instructions (valgrind)")
    ap.add_argument("--cache-sim", action="store_true", help="with --callgrind: also its cache misses, by library")
    args = ap.parse_args()
    if args.cache_sim and not args.callgrind:
        ap.error("--cache-sim counts under --callgrind: give both")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, **({"PYTHONPATH": args.src} if args.src else {}))
    server = shutil.which("fenec-server", path=os.path.dirname(sys.executable)) or "fenec-server"
    door = ["--access-log", os.devnull] if args.door == "asgi" else []
    on_file = args.wakes or args.puts
    # a wake: a file at its default --sync, as the harness's; a put: under --sync always
    data = tempfile.mkdtemp(prefix="fenec-cost-") if on_file else ""
    command = [server, "--http", f"127.0.0.1:{port}", *door,
               *(["--busy-poll", "0", "--file", os.path.join(data, "q.fenec")] if on_file else []),
               *(["--sync", "always"] if args.puts else [])]
    dumps = tempfile.mkdtemp(prefix="fenec-callgrind-") if args.callgrind else ""
    if args.callgrind:  # the console script run by this interpreter, under valgrind
        command = ["valgrind", "--tool=callgrind", *(CACHE_SIM if args.cache_sim else []),
                   f"--callgrind-out-file={dumps}/out", sys.executable, *command]
    proc = subprocess.Popen(command, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_server(port, proc, 600 if args.callgrind else 60)
        conn = http.client.HTTPConnection("127.0.0.1", port)

        def query(body: dict) -> bytes:
            conn.request("POST", "/query", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            answer = conn.getresponse()
            data = answer.read()
            if answer.status != 200:  # a refused put leaves claims that find nothing: a count of nothing
                raise RuntimeError(f"the server answered {answer.status}: {data[:200]!r}")
            return data

        if on_file:
            query({"query": "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"})
        elif not args.get:
            query({"query": "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"})
            jobs = 10 * (args.claims + 300)
            query({"query": "put jobs $1",
                   "params": [[{"payload": {"n": i}, "run_at": 0, "attempts": 0} for i in range(jobs)]]})

        def get() -> bytes:
            conn.request("GET", str(args.get))
            answer = conn.getresponse()
            data = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"the server answered {answer.status}: {data[:200]!r}")
            return data

        worker = http.client.HTTPConnection("127.0.0.1", port)
        pause = 0.5 if args.callgrind else WAKE_PAUSE  # the claim held before the put, however slow the server
        done = [0]

        def wake() -> bytes:
            n = done[0] = done[0] + 1
            worker.request("POST", "/query", body=json.dumps({"query": WAIT_CLAIM, "params": ["w"]}).encode(),
                           headers={"Content-Type": "application/json", "Fenec-Wait": "30000"})
            time.sleep(pause)
            query({"query": PUT, "params": [{"n": n}]})
            answer = worker.getresponse()
            data = answer.read()
            rows = json.loads(data)
            if answer.status != 200 or len(rows) != 1 or rows[0]["payload"] != {"n": n}:
                raise RuntimeError(f"the worker was not handed the job just put: {answer.status} {data[:200]!r}")
            return data

        def one(params: list[str]) -> bytes:
            if args.wakes:
                return wake()
            if args.puts:
                return query({"query": PUT, "params": [{"n": 1}]})
            return get() if args.get else query({"query": CLAIM, "params": params})

        for _ in range(20 if args.wakes else 300):
            one(["warm"])

        def cpu() -> float:
            f = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

        if args.callgrind:
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        before, started = cpu(), time.perf_counter()
        for _ in range(args.claims):
            one(["w"])
        used, wall = cpu() - before, time.perf_counter() - started
        if args.callgrind:
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
            out = {"claims": args.claims, "server_instructions_per_claim": round(_instructions(dumps) / args.claims),
                   "src": args.src or "installed", "door": args.door, "get": args.get,
                   "wakes": args.wakes, "puts": args.puts}
            if args.cache_sim:
                out.update(cache_misses(_last_dump(dumps), args.claims))
            print(json.dumps(out))
            return 0
        print(json.dumps({"claims": args.claims, "server_cpu_us_per_claim": round(1e6 * used / args.claims),
                          "wall_us_per_claim": round(1e6 * wall / args.claims), "src": args.src or "installed",
                          "door": args.door}))
    finally:
        proc.terminate()
        proc.wait(30)
        if data:
            shutil.rmtree(data, ignore_errors=True)
    return 0


def _last_dump(folder: str) -> str:
    return max((os.path.join(folder, f) for f in os.listdir(folder)), key=os.path.getmtime)


def _instructions(folder: str) -> int:
    """The instructions of the last callgrind dump in `folder` (its `totals:` or `summary:` line)."""
    last = _last_dump(folder)
    with open(last) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {last}")


def cache_misses(dump: str, claims: int) -> dict:
    """A cache-simulating dump's misses a claim: the first level's (code, data read) and the last
    level's (code read, data read and written), in all and by the library whose code ran (each
    function's own cost, without what it called; the compiled engine's library, named by a hash,
    as "engine")."""
    events: list[str] = []
    by_object: dict[str, list[int]] = {}
    objects: dict[str, str] = {}
    where = ""
    skip = False  # the line after `calls=` is a call's inclusive cost, counted where it was spent
    with open(dump) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("ob="):
                ref, _, name = line[3:].strip().partition(" ")
                if name:
                    objects[ref] = name
                where = objects.get(ref, ref)
            elif line.startswith("cob="):
                ref, _, name = line[4:].strip().partition(" ")
                if name:
                    objects[ref] = name
            elif line.startswith("calls="):
                skip = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip:
                    skip = False
                    continue
                costs = by_object.setdefault(where, [0] * len(events))
                for i, v in enumerate(line.split()[1:]):
                    costs[i] += int(v)
    if "ILmr" not in events:
        raise RuntimeError(f"{dump} holds no cache simulation")
    at = {e: i for i, e in enumerate(events)}

    def last_level(c: list[int]) -> int:
        return c[at["ILmr"]] + c[at["DLmr"]] + c[at["DLmw"]]

    def library(path: str) -> str:
        base = os.path.basename(path)
        return "engine" if "__mypyc" in base else base.split(".cpython")[0].split(".so")[0]

    named: dict[str, int] = {}
    for path, c in by_object.items():
        named[library(path)] = named.get(library(path), 0) + last_level(c)
    total = [sum(c[i] for c in by_object.values()) for i in range(len(events))]
    return {"l1_code_misses": round(total[at["I1mr"]] / claims), "l1_data_misses": round(total[at["D1mr"]] / claims),
            "ll_misses": round(last_level(total) / claims),
            "ll_misses_by_library": {k: round(v / claims) for k, v in sorted(named.items(), key=lambda kv: -kv[1])
                                     if v >= claims}}


if __name__ == "__main__":
    sys.exit(main())
