"""Where a wake's time goes inside each server: its system calls, traced on the kernel's syscall
tracepoints by `perf record` while the harness's wake row runs, laid out from the moment the
server's poll returned with the put.

    python -m bench.compare.timeline [--systems fenecdb,redis] [--wakes 300]

A tracepoint costs about a microsecond, where strace stops the server at every call, so the
times are close to the untraced ones. Needs `perf` (Debian's linux-perf) and the right to trace
(root, or kernel.perf_event_paranoid at -1). The server sleeps through the harness's pause before
each put, so each wake starts with a poll that waited: the first read after it is the put, a write
to that connection is the put's answer, a write to the connection read last before the sleep (the
worker's waiting claim) is the worker's, and any other write is an append to the server's file.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from . import loadgen

CALLS = ("read", "recvfrom", "write", "writev", "sendto", "sendmsg", "pwritev2", "pwrite64", "fdatasync",
         "epoll_wait", "epoll_pwait")
WRITES = {"write", "writev", "sendto", "sendmsg"}
POLLS = {"epoll_wait", "epoll_pwait"}
SLEPT_S = 0.005  # a poll that returned this long after it was entered waited for the put
_EVENT = re.compile(r"\s(\d+\.\d+):\s+syscalls:sys_(enter|exit)_(\w+):\s*(.*)")
_FD = re.compile(r"fd: (0x[0-9a-f]+)")
# one process each, so -p traces all of it (PostgreSQL answers from a backend of its own); beanstalkd
# answers its waiting worker in calls this reading does not tell from its binlog's
SYSTEMS = {"fenecdb": "fenec", "redis": "redisq"}


def events(text: str) -> list[tuple[float, str, str, str]]:
    """(seconds, enter/exit, call, arguments) of each line `perf script` printed."""
    out = []
    for line in text.splitlines():
        m = _EVENT.search(line)
        if m:
            out.append((float(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return out


def _fd(args: str) -> int | None:
    m = _FD.search(args)
    return int(m.group(1), 16) if m else None


def wakes(evs: list[tuple[float, str, str, str]], most: int = 40) -> list[list[tuple[str, float]]]:
    """Each wake: the calls the server entered after a poll that slept, with µs since it returned,
    up to the answer of the put (or `most` calls). The worker's connection is the last one read
    before the sleep (its waiting claim)."""
    out = []
    for i, (t, kind, call, args) in enumerate(evs):
        if kind != "exit" or call not in POLLS or args.strip() in ("0x0", "0"):
            continue
        entered = next((e for e in reversed(evs[max(0, i - 3):i]) if e[1] == "enter" and e[2] in POLLS), None)
        if entered is None or t - entered[0] < SLEPT_S:
            continue
        worker_fd = next((_fd(e[3]) for e in reversed(evs[max(0, i - 200):i])
                          if e[1] == "enter" and e[2] in ("read", "recvfrom")), None)
        steps: list[tuple[str, float]] = []
        put_fd = None
        for t2, kind2, call2, args2 in evs[i + 1:i + 1 + 2 * most]:
            if kind2 != "enter":
                continue
            fd = _fd(args2)
            if call2 in ("read", "recvfrom") and put_fd is None:
                put_fd, label = fd, "read the put"
            elif call2 in WRITES and fd == put_fd:
                label = "answer the put"
            elif call2 in WRITES and fd == worker_fd:
                label = "answer the worker"
            elif call2 in WRITES or call2 in ("pwritev2", "pwrite64"):
                label = "append to the file"
            elif call2 in POLLS:
                label = "poll (a loop turn)"
            else:
                label = call2
            steps.append((label, (t2 - t) * 1e6))
            if label == "answer the put" or len(steps) >= most:
                break
        out.append(steps)
    return out


def layout(seqs: list[list[tuple[str, float]]]) -> tuple[int, list[tuple[str, float]]]:
    """The steps of the most common sequence of calls, each at its median µs; and how many wakes had it."""
    if not seqs:
        return 0, []
    shapes = collections.Counter(tuple(label for label, _ in s) for s in seqs)
    shape, n = shapes.most_common(1)[0]
    same = [s for s in seqs if tuple(label for label, _ in s) == shape]
    return n, [(label, statistics.median(s[j][1] for s in same)) for j, label in enumerate(shape)]


def trace(key: str, count: int) -> dict[str, Any]:
    system = importlib.import_module(f".{SYSTEMS[key]}", __package__).System()
    workdir = tempfile.mkdtemp(prefix=f"timeline-{key}-")
    data = os.path.join(workdir, "perf.data")
    try:
        system.start(workdir, durable=False)
        assert system.proc is not None
        loadgen.wake_latency(system, 20, None)  # warm, untraced
        names = ",".join(f"syscalls:sys_{k}_{c}" for c in CALLS for k in ("enter", "exit"))
        perf = subprocess.Popen(["perf", "record", "-q", "-e", names, "-p", str(system.proc.pid), "-o", data],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # perf attaches
        if perf.poll() is not None:
            raise RuntimeError(f"perf record failed: {perf.stderr.read().decode().strip() if perf.stderr else ''}")
        measured = loadgen.wake_latency(system, count, None)
        perf.send_signal(signal.SIGINT)
        perf.wait(60)
        text = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True, check=True).stdout
    finally:
        system.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    seqs = wakes(events(text))
    n, steps = layout(seqs)
    return {"name": system.name, "p50_ms": measured["p50"], "wakes": len(seqs), "shown": n, "steps": steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="timeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", default="fenecdb,redis", help="of: " + ",".join(SYSTEMS) + " [both]")
    ap.add_argument("--wakes", type=int, default=300)
    args = ap.parse_args(argv)
    if shutil.which("perf") is None:
        print("timeline: needs perf (apt-get install -y linux-perf)", file=sys.stderr)
        return 2
    keys = [k.strip() for k in args.systems.split(",")]
    if not set(keys) <= set(SYSTEMS):
        ap.error(f"--systems: unknown {sorted(set(keys) - set(SYSTEMS))}")
    for key in keys:
        r = trace(key, args.wakes)
        print(f"{r['name']}: wake p50 {r['p50_ms']:.3f} ms end to end; inside the server, µs after its poll "
              f"returned with the put (medians of the {r['shown']} of {r['wakes']} wakes traced with the most common calls):")
        for label, us in r["steps"]:
            print(f"  {us:8.1f}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
