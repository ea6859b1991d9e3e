"""What a compaction holds the interpreter for: `python scripts/compaction_stall.py [jobs] [runs]`.

A file database of `jobs` jobs (default 300 000), its rows frozen out of the collector's sight as
the server freezes them after a bulk put, and `Database.compact()` run `runs` times (default 3) in a
thread while the main thread reads one row by id in a tight loop. Every gap between two reads is
time the reader could not run: the interpreter was held elsewhere (the compaction's encoding between
its hand-overs, a copy, the write lock). Prints, per compaction, the longest gap and the sum of the
gaps over 5 ms, for bench/README.md. The reader never lets go of the interpreter by itself, so the
compaction waits the interpreter's switch interval at each hand-over and takes far longer than beside
a server, whose loop lets go at every system call: its time here is not the compaction's time.
"""

from __future__ import annotations

import gc
import sys
import tempfile
import threading
import time
from pathlib import Path

from fenecdb_server import Database


def main() -> int:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(str(Path(tmp) / "stall.fenec"), sync=250)
        db.query("create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)")
        for start in range(0, jobs, 10_000):
            page = [{"payload": {"n": i, "kind": "email"}, "run_at": 0, "attempts": 0}
                    for i in range(start, min(jobs, start + 10_000))]
            db.query("put jobs $1", [page])
        gc.collect()
        gc.freeze()
        for _ in range(runs):
            gaps: list[float] = []
            worker = threading.Thread(target=db.compact)
            worker.start()
            last = time.perf_counter()
            while worker.is_alive():
                db.query("get jobs where id = $1", [7])
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
            worker.join()
            print(f"compaction of {jobs} jobs: longest gap {max(gaps) * 1000:.1f} ms, "
                  f"gaps over 5 ms {sum(g for g in gaps if g > 0.005) * 1000:.0f} ms in all", flush=True)
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
