"""How long a large statement holds the GIL between two hand-overs (pacing.py), in process.

Loads --rows jobs into a `Database` (in memory, then on a file), runs a claim of that many rows, a
put of that many documents, a block of that many puts and a `get` of every row in pieces, each in a
worker thread under `gc_policy.held_off` as the server runs them, and prints per statement its time,
the hand-overs it made and its longest stretches between two of them (from its start to the first
and from the last to its end included): the longest the event loop could wait for the GIL. A
second thread asks for the GIL every 0.2 ms meanwhile (it sleeps that long, then takes it), as the
event loop does when requests come, and its longest wait is printed beside them.

    .venv/bin/python bench/pacing_stretches.py [--rows 100000]

The compiled modules call `hand_over` through their module's global, which this script wraps to
note the time of each call; on the sources (`FENECDB_PURE_PYTHON=1`) the interpreter's own switch
hands the GIL over too, so the stretches there are not the wait.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import fenecdb_server.engine.access as access
import fenecdb_server.engine.engine as engine
import fenecdb_server.engine.execute as execute
import fenecdb_server.engine.queues as queues
import fenecdb_server.engine.records as records
from fenecdb_server import Database, gc_policy, pacing

JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit %d returning *")

marks: list[float] = []


def noted() -> None:
    marks.append(time.perf_counter())
    pacing.hand_over()


class Asker:
    """A thread that sleeps 0.2 ms and takes the GIL again, in a loop: its longest wait."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.on = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while self.on:
            t0 = time.perf_counter()
            time.sleep(0.0002)
            self.longest = max(self.longest, time.perf_counter() - t0)

    def window(self) -> float:
        out, self.longest = self.longest, 0.0
        return out * 1000


def stretches(name: str, run: Callable[[], Any], asker: Asker) -> dict[str, Any]:
    marks.clear()
    asker.window()
    t0 = time.perf_counter()
    worker = threading.Thread(target=lambda: gc_policy.held_off(run))
    worker.start()
    worker.join()
    t1 = time.perf_counter()
    points = [t0, *marks, t1]
    gaps = sorted((b - a) * 1000 for a, b in zip(points, points[1:], strict=False))
    return {"statement": name, "s": round(t1 - t0, 3), "hand_overs": len(marks),
            "longest_stretches_ms": [round(g, 1) for g in gaps[-3:]], "asker_longest_ms": round(asker.window(), 1)}


def measure(db: Database, n: int, asker: Asker, on_file: bool) -> None:
    compiled = not (execute.__file__ or "").endswith(".py")
    print(f"{'a file' if on_file else 'memory'}, {n} rows, engine {'compiled' if compiled else 'python'}")
    docs = [{"attempts": 0}] * n
    runs: list[tuple[str, Callable[[], Any]]] = [
        ("claim", lambda: db.execute([(CLAIM % n, ["big"])])),
        ("put", lambda: db.execute([("put jobs $1", [docs])])),
        ("batch", lambda: db.execute([("put jobs {attempts: 0}", None)] * n, block=True)),
        ("get in pieces", lambda: db.execute([("get jobs", None)], pieces=pacing.PACE_ROWS)),
    ]
    for name, run in runs:
        print(" ", stretches(name, run, asker), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    n = parser.parse_args().rows
    for module in (access, engine, execute, queues, records):
        module.hand_over = noted  # type: ignore[attr-defined]
    gc_policy.apply()
    asker = Asker()
    with tempfile.TemporaryDirectory() as where:
        for path in (None, os.path.join(where, "stretches.fenec")):
            db = Database(path)
            db.query(JOBS)
            for at in range(0, n, 50_000):
                docs = [{"payload": {"n": i}, "run_at": 0, "attempts": 0} for i in range(at, min(n, at + 50_000))]
                db.execute([("put jobs $1", [docs])])
            measure(db, n, asker, path is not None)
            db.close()
    asker.on = False
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
