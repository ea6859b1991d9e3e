"""What an async replica on the same machine does to its primary's claim + ack rate, and where it shows.

Runs queue-compare's own claim + ack window (`bench/compare`: its `System`, its worker processes, claim 10
and ack them in one `/batch`) on a fresh primary (`--sync 250`) loaded with --jobs ready jobs, in turn:
- `none`: no replica (queue-compare's "claim 10 + ack" row);
- `feed`: the primary with `--replication-token` and no replica (the feed keeps every record, nothing streams);
- `async`: one async replica following it (queue-compare's "one async replica" row), caught up before the
  window.
For each it prints the rate, the primary's CPU (cores, and µs a job), the replica's, the machine's idle
CPU over the window, and the voluntary and involuntary context switches of each server's busiest thread
(`/proc/<pid>/task/*`). `--replica-sched idle` puts every thread of the replica under SCHED_IDLE once it is
level (it then runs only on CPU time nothing else wants); `--replica-stopped` stops it (SIGSTOP) for the
window, so that the primary still streams, into the socket until its buffers are full, and the replica does
nothing; `--dir` is where both files go (a tmpfs takes the disk out).

    .venv/bin/python bench/replica_interference.py [--workers 4] [--jobs 300000] [--seconds 3] [--rounds 2]
        [--modes none,feed,async] [--replica-sched idle] [--replica-stopped] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from compare import fenec, loadgen  # bench/compare/: the script's folder is on sys.path

TICK = os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> dict[str, tuple[float, int, int]]:
    """Each thread of `pid`: (CPU seconds, voluntary switches, involuntary switches)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue
        switches = dict(line.split(":\t") for line in status.splitlines() if "ctxt_switches:" in line)
        out[tid] = ((int(stat[11]) + int(stat[12])) / TICK, int(switches.get("voluntary_ctxt_switches", 0)),
                    int(switches.get("nonvoluntary_ctxt_switches", 0)))
    return out


def idle_s() -> float:
    return int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[4]) / TICK


def delta(before: dict, after: dict) -> tuple[float, tuple[int, int]]:
    """CPU seconds of all threads, and the switches of the busiest one."""
    cpu = 0.0
    busiest = (0.0, 0, 0)
    for tid, (c, v, n) in after.items():
        c0, v0, n0 = before.get(tid, (0.0, 0, 0))
        cpu += c - c0
        if c - c0 >= busiest[0]:
            busiest = (c - c0, v - v0, n - n0)
    return cpu, busiest[1:]


def window(mode: str, args: argparse.Namespace) -> str:
    system = fenec.System()
    workdir = tempfile.mkdtemp(dir=args.dir)
    system.start(workdir, durable=False, replica=None if mode == "none" else mode)
    try:
        system.load(args.jobs, ready=True)
        replica = system.replica.pid if system.replica is not None else 0
        if replica:
            system.replica_level()
            if args.replica_sched == "idle":
                for tid in os.listdir(f"/proc/{replica}/task"):
                    os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
        assert system.proc is not None
        primary = system.proc.pid
        stopped = bool(replica and args.replica_stopped)
        if stopped:
            os.kill(replica, signal.SIGSTOP)
        try:
            p0, r0, i0, t0 = threads(primary), threads(replica) if replica else {}, idle_s(), time.monotonic()
            got = loadgen.run_workers(system, "claim-ack", args.workers, args.seconds)
            p1, r1, i1, t1 = threads(primary), threads(replica) if replica else {}, idle_s(), time.monotonic()
        finally:
            if stopped:
                os.kill(replica, signal.SIGCONT)
    finally:
        system.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    wall, jobs = t1 - t0, max(1, got["done"])
    p_cpu, p_sw = delta(p0, p1)
    r_cpu, r_sw = delta(r0, r1)
    line = (f"{mode:5}  {got['rate']:8.0f} jobs/s  primary {p_cpu / wall:.2f} CPU, {1e6 * p_cpu / jobs:5.1f} µs a job, "
            f"switches {p_sw[0]}/{p_sw[1]}")
    if replica:
        line += f"  replica {r_cpu / wall:.2f} CPU, {1e6 * r_cpu / jobs:4.1f} µs a job, switches {r_sw[0]}/{r_sw[1]}"
    return line + f"  idle {(i1 - i0) / wall:.2f} CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=300_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="none,feed,async")
    ap.add_argument("--replica-sched", choices=("normal", "idle"), default="normal")
    ap.add_argument("--replica-stopped", action="store_true")
    ap.add_argument("--dir", help="where the data files go (default: the system's temporary directory)")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"none", "feed", "async"}:
        ap.error("--modes: none, feed, async")
    print(f"claim 10 + ack, {args.workers} worker processes, {args.seconds:g} s windows, {args.jobs} jobs; "
          "switches: voluntary/involuntary of the busiest thread", flush=True)
    for _ in range(args.rounds):
        for mode in modes:
            print(window(mode, args), flush=True)


if __name__ == "__main__":
    main()
