"""A durable write with one sync replica: its rate and its round trip, and the CPU each server spends on it.

Starts a primary (`--sync always --sync-replicas 1`) and a replica following it (`--sync always`), each
on a fresh file under --dir, then --writers processes each put one job a request over a keep-alive
connection for --seconds. Prints writes/s, the writers' median round trip, and each server's CPU time
(user + system, from /proc) per write, --runs times. With --dir on a tmpfs the fdatasyncs cost nothing
and what is left is the path itself: the hops of the stream, the replica and the ack.

--sched adds one window of one writer traced by `perf record` (every CPU: system calls, wakes and
switches; run as root, with `perf` from linux-perf) and tells, over its writes, on which CPU the
kernel put the replica's follower when the primary's stream woke it (the primary's own, or another),
and how long the primary took to read the replica's ack after it was sent, with the primary's CPU
at the ack. One write near the median is printed as its system calls and switches in order.

    .venv/bin/python bench/sync_replica_cost.py [--writers 1] [--seconds 3] [--runs 3] [--dir /dev/shm] [--sched]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from replication_cost import cpu_s, start  # run as a script: bench/ is on the path

TOKEN = "bench-token"
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
PUT = json.dumps({"query": "put jobs {payload: $1, run_at: now(), attempts: 0}", "params": [{"n": 1}]}).encode()


def get(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"authorization": f"Bearer {TOKEN}"})
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def writer(port: int, seconds: float, out: mp.Queue) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        conn.request("POST", "/query", body=PUT)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"a put answered {resp.status}")
        times.append(time.perf_counter() - t0)
    conn.close()
    times.sort()
    out.put((len(times), times[len(times) // 2]))


def window(port: int, writers: int, seconds: float) -> tuple[float, float]:
    """writes/s and the median of the writers' median round trips (ms)."""
    out: mp.Queue = mp.Queue()
    ps = [mp.Process(target=writer, args=(port, seconds, out)) for _ in range(writers)]
    for p in ps:
        p.start()
    got = [out.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    medians = sorted(m for _, m in got)
    return sum(n for n, _ in got) / seconds, medians[len(medians) // 2] * 1000


SYSCALLS = {0: "read", 1: "write", 7: "poll", 24: "sched_yield", 44: "sendto", 45: "recvfrom", 75: "fdatasync",
            270: "pselect6", 281: "epoll_pwait", 328: "pwritev2"}
PERF_LINE = re.compile(r"\s*\S+\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)")


def threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def sched(port: int, primary: int, replica: int, seconds: float) -> None:
    """One writer's window under `perf record -a`: the follower's placement and the ack's wait (the module's docstring)."""
    if shutil.which("perf") is None:
        raise SystemExit("--sched needs perf (Debian: linux-perf)")
    where = tempfile.mkdtemp(prefix="sync-sched-")
    data = os.path.join(where, "perf.data")
    out: mp.Queue = mp.Queue()
    w = mp.Process(target=writer, args=(port, seconds + 2, out))
    w.start()
    time.sleep(1)
    subprocess.run(["perf", "record", "-q", "-a", "-o", data, "-e", "raw_syscalls:sys_enter", "-e",
                    "raw_syscalls:sys_exit", "-e", "sched:sched_switch", "-e", "sched:sched_wakeup",
                    "--", "sleep", str(seconds)], check=True, stderr=subprocess.DEVNULL)
    out.get(timeout=seconds + 120)
    w.join()
    text = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace"], check=True,
                          capture_output=True, text=True).stdout
    shutil.rmtree(where, ignore_errors=True)
    who = {primary: "primary", w.pid: "writer"}
    who.update({t: "replica" for t in threads(replica)})  # its follower is the one that syncs (below)
    events: list[tuple[float, str, int, str]] = []  # (µs, who, cpu, what)
    for line in text.splitlines():
        m = PERF_LINE.match(line)
        if not m:
            continue
        _pid, tid, cpu, at, event, rest = m.groups()
        t = float(at) * 1e6
        if event == "sched:sched_wakeup":
            woke = re.search(r" pid=(\d+) .*target_cpu=(\d+)", rest)
            if woke and int(woke.group(1)) in who:
                events.append((t, who[int(woke.group(1))], int(woke.group(2)), "woken"))
            continue
        if event == "sched:sched_switch" or int(tid) not in who:
            continue
        nr = int(rest.split()[1].rstrip(","))
        name = SYSCALLS.get(nr, str(nr))
        if who[int(tid)] == "replica" and name not in ("fdatasync", "recvfrom", "sendto", "pwritev2", "poll", "pselect6"):
            continue  # the replica's other threads
        events.append((t, who[int(tid)], int(cpu), (">" if event.endswith("enter") else "<") + name))
    events.sort()
    writes: list[tuple[int, int]] = []  # each write: from the writer's request to its next
    first, answered = -1, True
    for i, (_, role, _, what) in enumerate(events):
        if role == "writer" and what.startswith("<recvfrom"):
            answered = True
        elif role == "writer" and what == ">sendto" and answered:
            if first >= 0:
                writes.append((first, i))
            first, answered = i, False
    packed = apart = 0
    ack_waits: list[float] = []
    for a, b in writes:
        span = events[a:b]
        pushed = next((k for k, e in enumerate(span) if e[1] == "primary" and e[3] == ">write"), None)
        if pushed is None:
            continue
        p_cpu = span[pushed][2]
        follower = next((e for e in span[pushed:] if e[1] == "replica" and e[3] == "woken"), None)
        if follower is not None:
            packed, apart = packed + (follower[2] == p_cpu), apart + (follower[2] != p_cpu)
        acked = next((k for k, e in enumerate(span) if e[1] == "replica" and e[3] == "<sendto"), None)
        if acked is not None:
            read = next((e for e in span[acked:] if e[1] == "primary" and e[3] == "<read"), None)
            if read is not None:
                ack_waits.append(read[0] - span[acked][0])
    if not writes or not ack_waits:
        raise SystemExit("no write was traced")
    print(f"traced {len(writes)} writes: the replica woken onto the primary's CPU in {packed}, onto another in "
          f"{apart}; the ack read by the primary {statistics.median(ack_waits):.0f} µs after it was sent (p50), "
          f"p90 {sorted(ack_waits)[len(ack_waits) * 9 // 10]:.0f} µs")
    spans = sorted(writes, key=lambda w: events[w[1]][0] - events[w[0]][0])
    a, b = spans[len(spans) // 2]
    t0 = events[a][0]
    print("the median write (µs after the writer's request; the CPU; > a call begins, < it returns):")
    for t, role, cpu, what in events[a:b + 1]:
        if what not in (">epoll_pwait", "<epoll_pwait", ">sched_yield", "<sched_yield"):
            print(f"  {t - t0:8.0f}  {role:8} cpu{cpu}  {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the two files go [the system's temp dir]")
    ap.add_argument("--primary-flags", default="", help="more flags for the primary, e.g. '--busy-poll 0'")
    ap.add_argument("--replica-flags", default="", help="more flags for the replica")
    ap.add_argument("--sched", action="store_true", help="one more window traced by perf (the module's docstring)")
    args = ap.parse_args()
    where = tempfile.mkdtemp(prefix="sync-replica-cost-", dir=args.dir)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        primary, port = start("--file", os.path.join(where, "p.fenec"), "--sync", "always",
                              "--replication-token", TOKEN, "--sync-replicas", "1", *args.primary_flags.split())
        procs.append(primary)
        replica, _ = start("--file", os.path.join(where, "r.fenec"), "--sync", "always",
                           "--replication-token", TOKEN, "--replica-of", f"http://127.0.0.1:{port}", *args.replica_flags.split())
        procs.append(replica)
        end = time.monotonic() + 60
        while not get(port, "/_replication/status").get("replicas"):
            if time.monotonic() > end:
                raise RuntimeError("the replica did not connect")
            time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/query", body=json.dumps({"query": JOBS}))
        conn.getresponse().read()
        conn.close()
        window(port, 1, 0.5)  # warm-up
        for _ in range(args.runs):
            before = cpu_s(primary.pid), cpu_s(replica.pid)
            rate, p50 = window(port, args.writers, args.seconds)
            after = cpu_s(primary.pid), cpu_s(replica.pid)
            n = rate * args.seconds
            print(f"{args.writers} writer(s): {rate:,.0f} writes/s, round trip p50 {p50:.3f} ms, CPU a write: "
                  f"primary {(after[0] - before[0]) / n * 1e6:.0f} µs, replica {(after[1] - before[1]) / n * 1e6:.0f} µs",
                  flush=True)
        if args.sched:
            sched(port, primary.pid, replica.pid, 1.0)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
