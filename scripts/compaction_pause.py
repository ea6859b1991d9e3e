"""How long a compaction stops writes: `python scripts/compaction_pause.py [jobs]`.

A file database of `jobs` jobs (default 200 000) with half of them acked (dead bytes), one
thread writing puts without pause, and `Database.compact()` run three times beside it. Prints,
per compaction, the two waits it imposes on writers (`write_lock_us`: the copy of the row maps
under the engine's write lock; `lock_us`: the final copy and rename under the log's lock),
the longest put during it, and the same outside compactions (where Python's garbage collector and the other tenants of the
machine already cause pauses), for docs/operations.md.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from fenecdb_server import Database


def main() -> int:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(str(Path(tmp) / "pause.fenec"), sync=250)
        db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)")
        page = [{"payload": {"to": f"user{i}@example.com"}, "run_at": 0, "attempts": 0} for i in range(1000)]
        for _ in range(jobs // 1000):
            db.query("put jobs $1", [page])
        db.query("del jobs where id <= $1", [jobs // 2])
        puts: list[tuple[float, float]] = []  # (start, seconds)
        stop = threading.Event()

        def write() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                db.query("put jobs {payload: {}, run_at: now(), attempts: 0}")
                puts.append((t, time.perf_counter() - t))

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(1.0)
        windows = []
        for _ in range(3):
            t0 = time.perf_counter()
            done = db.compact()
            windows.append((t0, time.perf_counter(), done))
            time.sleep(1.0)
        stop.set()
        writer.join()
        db.close()
    outside = [s for t, s in puts if not any(a <= t <= b for a, b, _ in windows)]
    print(f"{jobs} jobs, {jobs // 2} acked; {len(puts)} puts by one writer thread")
    print(f"puts outside compactions: median {statistics.median(outside) * 1000:.3f} ms, "
          f"p99.9 {statistics.quantiles(outside, n=1000)[-1] * 1000:.1f} ms, the longest {max(outside) * 1000:.1f} ms")
    for a, b, done in windows:
        during = [s for t, s in puts if a <= t <= b]
        print(f"compaction {(b - a):.2f} s, {done['bytes_before']:,} -> {done['bytes_after']:,} bytes: "
              f"write lock {done['write_lock_us'] / 1000:.1f} ms, log lock {done['lock_us'] / 1000:.1f} ms, "
              f"{len(during)} puts during it, the longest {max(during, default=0) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
