"""What one durable append costs this disk: a record written and synced, alone, by one process.

For each way the space may be made, --records appends of --size bytes, each made durable before the next,
in a file under --dir (the system's temporary directory by default, which is the disk the servers use):
- `fallocate`: the region reserved with posix_fallocate first, `pwritev` then `fdatasync` (what the log does,
  storage/preallocation.py);
- `zeros`: the region written with zeros and synced first (every append an overwrite);
- `grow`: no reservation, every append grows the file;
- `dsync`: as `fallocate`, the write and its sync one `pwritev2` with RWF_DSYNC.
Prints the median and p90 of each append's wall time, --rounds times, the ways alternated. `--gap MS` waits
that long (sleeping) after each append's sync before the next, as a server's appends wait for their requests.

    python bench/fdatasync_cost.py [--records 2000] [--size 120] [--rounds 3] [--gap 0] [--dir D]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

REGION = 4 << 20
WAYS = ("fallocate", "zeros", "grow", "dsync")


def run(way: str, records: int, size: int, where: str, gap: float) -> tuple[float, float]:
    fd, path = tempfile.mkstemp(dir=where, prefix="fdatasync-cost-")
    try:
        if way in ("fallocate", "dsync"):
            os.posix_fallocate(fd, 0, max(REGION, records * size))
        elif way == "zeros":
            os.pwrite(fd, bytes(max(REGION, records * size)), 0)
        os.fsync(fd)
        data = [b"r" * size]
        times = []
        for i in range(records):
            t = time.perf_counter()
            if way == "dsync":
                os.pwritev(fd, data, i * size, os.RWF_DSYNC)
            else:
                os.pwritev(fd, data, i * size)
                os.fdatasync(fd)
            times.append(time.perf_counter() - t)
            if gap:
                time.sleep(gap)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return times[len(times) // 2] * 1e6, times[len(times) * 9 // 10] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--size", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gap", type=float, default=0.0, help="milliseconds between an append's sync and the next")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    for _ in range(args.rounds):
        for way in WAYS:
            p50, p90 = run(way, args.records, args.size, args.dir, args.gap / 1000)
            print(f"{way:9}  p50 {p50:6.0f} µs  p90 {p90:6.0f} µs", flush=True)


if __name__ == "__main__":
    main()
