"""Where one durable write with one sync replica spends its time: every system call of the servers' processes
over a few lone writes, FenecDB or PostgreSQL, set up as the queue-compare row sets them (bench/compare).

Starts the system with one sync replica (FenecDB: `--sync always --sync-replicas 1` and a `--sync always`
replica; PostgreSQL: a `pg_basebackup -R` standby under `synchronous_standby_names = '*'`), makes --warm puts,
then attaches `strace -f -tt -T` to every process of both servers (PostgreSQL's backends, walsender,
walreceiver, startup and writers included), makes --puts lone puts --gap ms apart from one client, and prints,
for the put of the median round trip, each system call the servers made between its request and its answer:
when it began (ms after the client sent the put), the process (a PostgreSQL process by its title), the call,
how long it took, and the start of what it read or wrote. Tracing lengthens every call: read the order and
the gaps, not the values.

    python bench/sync_write_trace.py --system fenecdb|postgres [--puts 30] [--warm 200] [--gap 20] [--dir D]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from compare import fenec, postgres  # run as a script: bench/ is on the path

LINE = re.compile(r"^(\d+)\s+(\d\d):(\d\d):(\d\d\.\d+) (.*)$")
CALL = re.compile(r"^(?:<\.\.\. )?(\w+)")
TOOK = re.compile(r"<(\d+\.\d+)>$")
QUIET = {"futex", "restart_syscall", "rt_sigreturn", "getpid", "clock_gettime"}


def tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    out = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            out += tree(int(child))
    return out


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("latin-1").strip()
    except OSError:
        return "?"


def roles(system: str, sys_: object) -> dict[int, str]:
    """The servers' processes to trace, each with a name for the table."""
    out: dict[int, str] = {}
    if system == "fenecdb":
        assert isinstance(sys_, fenec.System) and sys_.proc is not None and sys_.replica is not None
        out[sys_.proc.pid] = "primary"
        out[sys_.replica.pid] = "replica"
        return out
    assert isinstance(sys_, postgres.System) and sys_.proc is not None and sys_.standby is not None
    for side, top in (("primary", sys_.proc.pid), ("standby", sys_.standby.pid)):
        for pid in tree(top):
            name = title(pid).removeprefix("postgres: ").split(" ")[0] if pid != top else "postmaster"
            out[pid] = f"{side} {name}"
    return out


def seconds_of(h: str, m: str, s: str) -> float:
    return int(h) * 3600 + int(m) * 60 + float(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=("fenecdb", "postgres"), required=True)
    ap.add_argument("--puts", type=int, default=30)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--gap", type=float, default=20.0, help="ms between two traced puts")
    ap.add_argument("--dir", default=None, help="where the servers' files go [the system's temp dir]")
    args = ap.parse_args()
    if not shutil.which("strace"):
        ap.error("strace is not installed")
    where = tempfile.mkdtemp(prefix="sync-write-trace-", dir=args.dir)
    os.chmod(where, 0o777)  # PostgreSQL runs as its own user
    system = fenec.System() if args.system == "fenecdb" else postgres.System()
    trace = os.path.join(where, "strace")
    tracer: subprocess.Popen[bytes] | None = None
    try:
        system.start(where, durable=True, replica="sync")
        session = system.session()
        for n in range(args.warm):
            session.put({"n": n})
        who = roles(args.system, system)
        cmd = ["strace", "-f", "-tt", "-T", "-s", "40", "-o", trace]  # -f: every thread of each process
        for pid in who:
            cmd += ["-p", str(pid)]
        tracer = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        time.sleep(2.0)  # attached
        sent: list[tuple[float, float]] = []
        for n in range(args.puts):
            t0 = time.time()
            session.put({"n": n})
            sent.append((t0, time.time()))
            time.sleep(args.gap / 1000)
        time.sleep(0.5)
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
        tracer = None
        tids: dict[int, str] = {}
        for pid, name in who.items():
            for task in os.listdir(f"/proc/{pid}/task") if os.path.exists(f"/proc/{pid}/task") else []:
                tids[int(task)] = name
        events = []
        day = time.time() - time.time() % 86400  # strace's -tt is the wall clock's time of day (UTC here)
        for line in Path(trace).read_text(errors="replace").splitlines():
            m = LINE.match(line)
            if m is None:
                continue
            tid, rest = int(m.group(1)), m.group(5)
            call = CALL.match(rest)
            if call is None or call.group(1) in QUIET:
                continue
            took = TOOK.search(rest)
            events.append((day + seconds_of(m.group(2), m.group(3), m.group(4)), tids.get(tid, f"task {tid}"),
                           rest, float(took.group(1)) if took else None))
        trips = sorted(range(len(sent)), key=lambda i: sent[i][1] - sent[i][0])
        pick = trips[len(trips) // 2]
        t0, t1 = sent[pick]
        print(f"{args.system}: put {pick + 1} of {len(sent)}, round trip {(t1 - t0) * 1000:.3f} ms (median; "
              f"min {(sent[trips[0]][1] - sent[trips[0]][0]) * 1000:.3f}, "
              f"max {(sent[trips[-1]][1] - sent[trips[-1]][0]) * 1000:.3f})")
        for at, name, rest, _took in events:
            if t0 <= at <= t1:
                shown = rest if len(rest) <= 110 else rest[:107] + "..."
                print(f"{(at - t0) * 1000:8.3f} ms  {name:<22} {shown}")
        session.close()
    finally:
        if tracer is not None:
            tracer.kill()
        system.stop()
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
