"""What an attached replica costs its primary: claim-and-ack throughput and the primary's CPU per
job, with no replica, with one asynchronous replica, and with one under `--sync-replicas 1`.

Each run starts a primary on a fresh file (`--sync 250`, or `always` with --always) and, for the
replicated rows, a replica (`--sync 250`) following it; loads --jobs jobs, then --workers threads
each claim one job and ack it by id over a keep-alive connection until the queue is empty (`--claim 10`:
claim ten and ack them in one `/batch`, as queue-compare's claim + ack rows do). Prints jobs/s and the
primary's CPU time (user + system, from /proc) per job; rows alternate, --runs times. `--modes` picks
the rows (default all three).

The counts a job, which hold whatever the machine's load (the timed part is from the first claim until
the queue is empty and the replica holds every change, so the stream's sends are in it):
* always: the primary's and the replica's context switches (`/proc/<pid>/task/*/status`: the wakes
  of every thread) and the replica's CPU µs;
* `--strace`: the primary's syscalls (`strace -c -f` attached over the timed part), the busiest named;
* `--callgrind`: the primary run under valgrind's callgrind, its instructions (the counters zeroed
  before the timed part, dumped after) and the functions that gained most over the row without a
  replica (`callgrind_annotate`); jobs/s and CPU are then the instrumented server's.

    .venv/bin/python bench/replication_cost.py [--jobs 3000] [--workers 4] [--runs 3] [--always]
                                                 [--claim 10] [--modes none,async] [--strace | --callgrind]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TOKEN = "bench-token"
JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {{owner: $1, run_at: now() + 30000, attempts: attempts + 1}} "
         "where run_at <= now() order run_at limit {n} returning id")
ACK = "del jobs where id = $1 and owner = $2 require 1"
MODES = ("none", "async", "sync")


def start(*flags: str, wrap: list[str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    command = [*(wrap or []), sys.executable, "-m", "fenecdb_server.cli", "--http", "127.0.0.1:0", *flags]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    for raw in proc.stderr:
        m = re.search(rb"listening on: http://[\d.]+:(\d+)", raw)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(m.group(1))
    raise RuntimeError("the server did not start")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid: int) -> int:
    """Context switches of every thread of `pid` so far (voluntary: a sleep ended by a wake)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{task}/status").read_text()
        except OSError:
            continue
        total += sum(int(n) for n in re.findall(r"ctxt_switches:\s+(\d+)", text))
    return total


LAST_SEQ = [0]  # the highest Fenec-Seq the primary answered (what the replica must reach)


def post(conn: http.client.HTTPConnection, path: str, body: object) -> tuple[int, object]:
    """A `/query` of one statement (`body` a dict), or a `/batch` of several (a list: NDJSON lines)."""
    data = "".join(json.dumps(s) + "\n" for s in body) if isinstance(body, list) else json.dumps(body)
    conn.request("POST", path, body=data)
    resp = conn.getresponse()
    seq = resp.getheader("fenec-seq")
    if seq and int(seq) > LAST_SEQ[0]:
        LAST_SEQ[0] = int(seq)
    return resp.status, json.loads(resp.read())


def seq_of(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("GET", "/_replication/status", headers={"authorization": f"Bearer {TOKEN}"})
    seq = int(json.loads(conn.getresponse().read())["seq"])
    conn.close()
    return seq


def level(replica: int | None) -> None:
    """Until the replica holds every change its primary answered (at once without a replica); only
    the replica is asked, so the primary's counts hold nothing of the wait."""
    if replica is None:
        return
    end = time.monotonic() + 600
    while seq_of(replica) < LAST_SEQ[0]:
        if time.monotonic() > end:
            raise RuntimeError("the replica did not catch up")
        time.sleep(0.02)


class Strace:
    """`strace -c -f` attached to every thread of a process until `stop`: its syscalls by name."""

    def __init__(self, pid: int, out: str) -> None:
        self.out = out
        self.proc = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        time.sleep(1.0)  # attached (strace says so on stderr, once per thread)

    def stop(self) -> dict[str, int]:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        calls: dict[str, int] = {}
        for line in Path(self.out).read_text().splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                calls[parts[-1]] = int(parts[3])
        return calls


def run(where: str, mode: str, args: argparse.Namespace, sync: str) -> dict[str, object]:
    procs = []
    LAST_SEQ[0] = 0
    jobs, workers, claim = args.jobs, args.workers, args.claim
    dump = os.path.join(args.dumps, f"callgrind-{mode}")
    try:
        flags = ["--file", os.path.join(where, f"p-{mode}.fenec"), "--sync", sync, "--auto-compact", "off"]
        if mode != "none":
            flags += ["--replication-token", TOKEN]
        if mode == "sync":
            flags += ["--sync-replicas", "1"]
        wrap = (["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}"] if args.callgrind else None)
        p, port = start(*flags, wrap=wrap)
        procs.append(p)
        rport = None
        if mode != "none":
            r, rport = start("--file", os.path.join(where, f"r-{mode}.fenec"), "--replication-token", TOKEN,
                             "--replica-of", f"http://127.0.0.1:{port}", "--auto-compact", "off")
            procs.append(r)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        post(conn, "/query", {"query": JOBS})
        for at in range(0, jobs, 500):
            docs = ", ".join(f"{{payload: {i}, run_at: now(), attempts: 0}}" for i in range(at, min(jobs, at + 500)))
            assert post(conn, "/query", {"query": f"put jobs [{docs}]"})[0] == 200
        level(rport)
        done = [0] * workers

        def work(n: int) -> None:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            k = 0
            while True:
                k += 1
                owner = f"w{n}:{k}"
                status, rows = post(c, "/query", {"query": CLAIM.format(n=claim), "params": [owner]})
                if status != 200 or not rows:
                    return
                assert isinstance(rows, list)
                if claim == 1:
                    acked = post(c, "/query", {"query": ACK, "params": [rows[0]["id"], owner]})
                else:
                    acked = post(c, "/batch", [{"query": ACK, "params": [row["id"], owner]} for row in rows])
                assert acked[0] == 200, acked
                done[n] += len(rows)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
        trace = Strace(p.pid, os.path.join(where, f"strace-{mode}")) if args.strace else None
        if args.callgrind:
            subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
        cpu0, switches0 = cpu_s(p.pid), switches(p.pid)
        rcpu0 = cpu_s(procs[1].pid) if rport is not None else 0.0
        rswitches0 = switches(procs[1].pid) if rport is not None else 0
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - began
        level(rport)  # the stream's sends of the timed part counted too
        total = sum(done)
        out: dict[str, object] = {
            "rate": total / took, "cpu_us": (cpu_s(p.pid) - cpu0) / total * 1e6,
            "switches": (switches(p.pid) - switches0) / total}
        if rport is not None:
            out["replica_cpu_us"] = (cpu_s(procs[1].pid) - rcpu0) / total * 1e6
            out["replica_switches"] = (switches(procs[1].pid) - rswitches0) / total
        if trace is not None:
            calls = trace.stop()
            out["syscalls"] = sum(calls.values()) / total
            out["busiest"] = {k: round(v / total, 3) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:8]}
        if args.callgrind:
            subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
            out["instructions"] = _instructions(args.dumps, mode) / total
        return out
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(60)


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.0f}" if value >= 100 else f"{value:.3g}"
    return str(value)


def _dump(where: str, mode: str) -> str:
    """The callgrind dump of the timed part (`callgrind_control -d`'s, the first of the run)."""
    return os.path.join(where, f"callgrind-{mode}.1")


def _instructions(where: str, mode: str) -> int:
    """The instructions of the timed part's dump (its `totals:` or `summary:` line)."""
    for _ in range(300):  # the dump is written by the server's own thread, after callgrind_control returns
        path = _dump(where, mode)
        if os.path.exists(path) and os.path.getsize(path):
            for line in Path(path).read_text(errors="replace").splitlines():
                if line.startswith(("totals:", "summary:")):
                    return int(line.split()[1])
        time.sleep(0.1)
    raise RuntimeError(f"no callgrind totals for {mode}")


def _gained(where: str, keep: str, jobs: int, top: int = 15) -> list[str]:
    """The functions whose own instructions a job grew most from the row without a replica to `keep`'s."""
    def per_job(mode: str) -> dict[str, float]:
        text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", _dump(where, mode)],
                              check=True, capture_output=True, text=True).stdout
        got: dict[str, float] = {}
        for line in text.split("Auto-annotated source")[0].splitlines():
            m = re.match(r"\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+([^=\s].*)$", line)
            # (the interpreter's entry frames come out with the whole program's count: left out)
            if m and ":" in m.group(3) and float(m.group(2)) < 50:
                name = re.sub(r"^.*/", "", m.group(3).split(" [")[0].strip())  # file:function, the file's name
                got[name] = got.get(name, 0.0) + int(m.group(1).replace(",", "")) / jobs
        return got

    base, other = per_job("none"), per_job(keep)
    grown = sorted(((other.get(k, 0.0) - base.get(k, 0.0), k) for k in set(base) | set(other)), reverse=True)
    return [f"{d:+9.0f}  {k}" for d, k in grown[:top]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--always", action="store_true", help="the primary under --sync always")
    parser.add_argument("--claim", type=int, default=1, help="jobs a claim takes (more than 1: acked in one /batch)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"the rows, of {','.join(MODES)}")
    probe = parser.add_mutually_exclusive_group()
    probe.add_argument("--strace", action="store_true", help="count the primary's syscalls (strace -c)")
    probe.add_argument("--callgrind", action="store_true", help="count the primary's instructions (valgrind)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",")]
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: of {', '.join(MODES)}")
    if args.strace and not shutil.which("strace") or args.callgrind and not shutil.which("valgrind"):
        parser.error("strace or valgrind is not installed")
    sync = "always" if args.always else "250"
    args.dumps = tempfile.mkdtemp(prefix="fenec-replication-callgrind-") if args.callgrind else ""
    results: dict[str, list[dict[str, object]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as where:
        for _ in range(args.runs):
            for mode in results:
                results[mode].append(run(where, mode, args, sync))
                for name in os.listdir(where):
                    os.remove(os.path.join(where, name))
        print(f"{args.jobs} jobs claimed {args.claim} at a time and acked by {args.workers} workers, "
              f"primary --sync {sync}")
        for mode, got in results.items():
            print(f"  replica {mode:5}: " + "; ".join(
                f"{key} " + ", ".join(_shown(r[key]) for r in got) for key in got[0]))
    if args.callgrind:
        print(f"  the last run's callgrind dumps (callgrind_annotate reads them): {args.dumps}")
        if "none" in results:
            for mode in results:
                if mode != "none":
                    print(f"  the functions whose own instructions a job grew most with replica {mode}:")
                    for line in _gained(args.dumps, mode, args.jobs):
                        print("    " + line)


if __name__ == "__main__":
    main()
