"""The fault driver: every SDK's worker helper, run through a server that restarts, cuts, freezes and drops.

    python conformance/faults.py --sdk python|js|go|kotlin [--root REPO] [--only TEXT]

It runs `bash clients/<sdk>/fault-worker.sh --build` once, starts `.venv/bin/fenec-server` on a data file
in a temporary folder behind the proxy of `fault_layer.py`, and plays each scenario of
`fault-scenarios.json` (`conformance/README.md` describes the file and the harness contract):

1. create the scenario's queue and enqueue its jobs (straight to the server, with its own access);
2. apply the `before` faults, start the worker processes, wait until each printed `ready`;
3. play the steps: a fault (`restart`, `cut`, `freeze`, `refuse`, `drop`, `busy`, `pass`, `pause`,
   `failover`), a signal
   to the workers (`sigterm`, `sigint`), or a condition waited for (`until`), each with a deadline
   of 60 s; nothing assumes a speed;
4. stop the workers (SIGTERM) if they still run, and check, from the server's rows and the events:
   each job's fate and how often it started, that no two owners ran one job at once, that no job is
   left leased, that every worker printed `ready` first and `stopped` last and exited 0, and the
   scenario's own expectations.

A scenario with `servers` (the failover) runs on a pair of its own instead: a primary on a file
(`--replication-token`, `--sync always`, `--sync-replicas` as given) and a replica following it. Each
worker gets FENEC_URL (the primary) and FENEC_SERVERS (`<primary>,<replica>`); a harness that takes a
list names it in its `ready` event (`servers`), and one whose `ready` has no `servers` has the scenario
reported skipped (`SKIP`), counted neither passed nor failed. `produce` puts more jobs, one at a time,
on whichever server is primary, while the workers run; `failover` SIGKILLs the primary and promotes
the replica (`POST /_replication/promote`). Its checks: every job whose put was answered is done and
gone, none started again after its `done`, and the last `primary` each worker emitted names the replica.

A scenario with `cluster` (`fault_cluster.py`) runs on etcd and `members` servers joined through it
(`--etcd`, `--cluster`, `--advertise`, `--lease-ttl`, `--sync always`, `--sync-replicas`), etcd's lease
electing the primary; it is skipped (`SKIP`) when no `etcd` is on the PATH. Each worker gets every
member's URL in FENEC_SERVERS, the elected primary first (also FENEC_URL); `kill primary` SIGKILLs
the elected one, nobody promotes anything, and `until: elected` waits for a running member to say it
is primary. The checks are the failover's, the new primary being the elected one; in both, no
worker's `run` may end (a `stopped` event) before the driver stops it.

It prints one line per scenario and `<sdk> faults: N passed, M failed`, and exits 0 exactly when M is 0.
Every process it started is killed on the way out, whatever happened.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fault_cluster import ETCD, Cluster
from fault_layer import Proxy, ServerProcess
from fault_workers import Event, Events, WorkerProcess, deliver_sigint, wait_for

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "fault-scenarios.json"
DEADLINE_S = 60.0
READY_S = 120.0      # a JVM or a first `go run` on a loaded machine
BUILD_S = 900.0
SCHEMA = "payload json, run_at timestamp @sorted, owner text, attempts int, error text"
WORKER_KEYS = {
    "batch": "FENEC_BATCH", "concurrency": "FENEC_CONCURRENCY", "lease_ms": "FENEC_LEASE_MS",
    "wait_ms": "FENEC_WAIT_MS", "heartbeat_ms": "FENEC_HEARTBEAT_MS", "max_attempts": "FENEC_MAX_ATTEMPTS",
    "drain_ms": "FENEC_DRAIN_MS", "backoff_ms": "FENEC_BACKOFF_MS", "timeout_ms": "FENEC_TIMEOUT_MS",
}


class Refused(Exception):
    """The server answered a status other than 2xx."""


def now_ms() -> float:
    return time.time() * 1000


def query(url: str, text: str, params: list[Any] | None = None, path: str = "/query",
          headers: dict[str, str] | None = None) -> Any:
    body = json.dumps({"query": text, "params": params or []}).encode()
    req = urllib.request.Request(url + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=20) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as e:
        raise Refused(f"{e.code} {e.read()[:300]!r} for {text!r}") from None


@dataclass
class Job:
    key: str
    group: dict[str, Any]
    id: int = 0


@dataclass
class Run:
    """One scenario in play: its queue, jobs, workers, and what went wrong."""

    scenario: dict[str, Any]
    queue: str
    jobs: list[Job]
    events: Events = field(default_factory=Events)
    workers: list[WorkerProcess] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    last_fault_ms: float = 0.0
    signalled_ms: float = 0.0
    codes: dict[int, int | None] = field(default_factory=dict)

    skipped: str | None = None
    pair: list[ServerProcess] = field(default_factory=list)  # a `servers` scenario's primary, replica
    url: str | None = None  # where the driver reads and writes: the pair's primary, once promoted the replica
    produced: list[int] = field(default_factory=list)  # ids of the `produce` puts that were answered
    produced_new: int = 0  # of those, the puts the new primary answered
    producer: threading.Thread | None = None
    cluster: Cluster | None = None  # a `cluster` scenario's etcd and members
    new_primary: str | None = None  # the URL the failover made primary
    stopping_ms: float = 0.0        # when the driver began to stop the workers
    note: str = ""                  # what the scenario's line says besides its name (the failover's time)

    def fail(self, reason: str) -> None:
        self.failures.append(reason)


class Driver:
    def __init__(self, sdk: str, root: Path, work: Path) -> None:
        self.sdk = sdk
        self.root = root
        self.work = work
        self.script = root / "clients" / sdk / "fault-worker.sh"
        self.server = ServerProcess(root / ".venv" / "bin" / "fenec-server", work / "faults.fenec")
        self.proxy = Proxy()
        env = {k: v for k, v in os.environ.items() if not k.startswith("FENEC_")}
        env["PATH"] = f"{root / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        self.base_env = env
        self.token = secrets.token_urlsafe(24)  # a `servers` scenario's replication token

    def build(self) -> str | None:
        """Runs the harness's `--build`; answers why it failed, or None."""
        log = self.work / "build.log"
        with open(log, "w", encoding="utf-8") as out:
            proc = subprocess.Popen(["bash", str(self.script), "--build"], cwd=self.script.parent, env=self.base_env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                code = proc.wait(BUILD_S)
            except subprocess.TimeoutExpired:
                return f"--build still ran after {BUILD_S:.0f} s"
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if code != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            return f"--build exited {code}:\n" + "\n".join(f"      {line}" for line in tail)
        return None

    def start(self) -> None:
        self.proxy.start(self.server.start())

    def close(self) -> None:
        try:
            self.proxy.close()
        finally:
            self.server.kill()

    # a scenario

    def play(self, index: int, scenario: dict[str, Any], defaults: dict[str, Any]) -> Run:
        queue = f"fq{index}_{secrets.token_hex(3)}"
        jobs = [Job(f"{g['group']}-{n}", g) for g in scenario["jobs"] for n in range(g["count"])]
        run = Run(scenario, queue, jobs)
        try:
            if self.server.proc is None or self.server.proc.poll() is not None:
                self.proxy.pass_(self.server.start())   # a scenario before lost it: each starts with one
            self.proxy.reset()
            if "servers" in scenario:
                self.start_pair(run, index)
            if "cluster" in scenario:
                if ETCD is None:
                    run.skipped = "no 'etcd' on PATH (Debian: etcd-server): the cluster is not played"
                    return run
                self.start_cluster(run, index)
            self.enqueue(run)
            for step in scenario.get("before", []):
                self.step(run, step)
            config = {**defaults, **scenario.get("worker", {})}
            for i in range(scenario.get("workers", 1)):
                run.workers.append(WorkerProcess(i, self.script, self.worker_env(run, i, config), run.events,
                                                 self.work))
            if not self.await_ready(run):
                return run
            if (run.pair or run.cluster) and not all(e.get("servers") for e in run.events.snapshot() if e["event"] == "ready"):
                run.skipped = "the harness's `ready` names no `servers`: it takes no list of servers yet"
                return run
            if "produce" in scenario:
                run.producer = threading.Thread(target=self.produce, args=(run,), daemon=True)
                run.producer.start()
            for step in scenario.get("steps", []):
                if not self.step(run, step):
                    return run
            self.proxy.pass_()
            if run.producer is not None:
                run.producer.join(DEADLINE_S)
                if not wait_for(lambda: not self.rows(run, "where run_at is not null"), DEADLINE_S):
                    run.fail(f"jobs still ready or leased {DEADLINE_S:.0f} s after the last put")
            self.stop_workers(run, signal.SIGTERM)
            self.check(run)
        except Exception as e:  # a scenario that breaks the driver is that scenario's failure, not the run's end
            run.fail(f"driver error: {type(e).__name__}: {e}")
        finally:
            for w in run.workers:
                if w.proc.poll() is None:
                    w.kill()
            for server in run.pair:
                server.kill()
            if run.cluster is not None:
                run.cluster.close()
        return run

    def start_cluster(self, run: Run, index: int) -> None:
        """A `cluster` scenario's etcd and members; the driver reads and writes on the elected primary."""
        given = run.scenario["cluster"]
        folder = self.work / f"fq{index}-cluster"
        folder.mkdir()
        run.cluster = Cluster(self.server.exe, folder, self.token, given.get("members", 3),
                              ("--sync", "always", "--sync-replicas", str(given.get("sync_replicas", 1)),
                               "--lease-ttl", str(given.get("lease_ttl", 2))))
        run.url = run.cluster.elected().url

    def kill_primary(self, run: Run) -> None:
        """SIGKILL the cluster's primary; the driver writes nowhere until `until: elected`."""
        assert run.cluster is not None, "`kill primary` is for a `cluster` scenario"
        primary = run.cluster.primary()
        if primary is None:
            raise Refused("no member says it is primary")
        run.url = None if run.url == primary.url else run.url
        primary.kill()

    def start_pair(self, run: Run, index: int) -> None:
        """A `servers` scenario's primary and the replica following it, on files of their own."""
        given = run.scenario["servers"]
        token = ("--replication-token", self.token)
        primary = ServerProcess(self.server.exe, self.work / f"fq{index}-primary.fenec",
                                (*token, "--sync", "always", "--sync-replicas", str(given.get("sync_replicas", 0))))
        run.pair.append(primary)
        primary.start()
        replica = ServerProcess(self.server.exe, self.work / f"fq{index}-replica.fenec",
                                (*token, "--replica-of", primary.url))
        run.pair.append(replica)
        replica.start()
        run.url = primary.url

    def failover(self, run: Run) -> None:
        """SIGKILL the pair's primary, then promote its replica: the driver reads and writes there after."""
        primary, replica = run.pair
        primary.kill()
        run.new_primary = replica.url
        answer = query(replica.url, "", path="/_replication/promote",
                       headers={"Authorization": f"Bearer {self.token}"})
        if not isinstance(answer, dict) or answer.get("promoted") is not True:
            raise Refused(f"the promotion answered {answer!r}")
        run.url = replica.url

    def produce(self, run: Run) -> None:
        """`produce.count` more jobs, each put once (explicit ids, so that each is known by its id) on
        whichever server is primary now, `every_ms` apart; the ids whose put was answered are kept.
        A put that failed (the primary killed, no new one yet) is not tried again: the job may or may
        not be there, and is checked only as any job is (no two owners at once). With `after_failover`
        the stream goes on past `count` until that many puts were answered by the new primary (60 s at
        most), so that the workers are seen taking jobs put there, however long the election took."""
        given = run.scenario["produce"]
        after = given.get("after_failover", 0)
        end = time.monotonic() + DEADLINE_S
        for n in itertools.count():
            if n >= given["count"] and (run.produced_new >= after or time.monotonic() > end):
                break
            job_id = 1_000_000 + n
            url = run.url or (None if run.cluster else self.server.url)
            try:
                if url is None:
                    raise OSError("no primary elected yet")
                query(url, f"insert {run.queue} {{id: $1, payload: $2, run_at: now(), attempts: 0}}",
                      [job_id, {**given.get("payload", {}), "key": f"produced-{n}"}])
            except (OSError, Refused):
                pass
            else:
                run.produced.append(job_id)
                run.produced_new += url == run.new_primary
            time.sleep(given["every_ms"] / 1000)  # the stream's pace, a scenario parameter

    def await_ready(self, run: Run) -> bool:
        """Every worker printed `ready` (False, the reason recorded, when one did not in time or all exited)."""
        outcome = self.wait_on(run, lambda: all(run.events.count("ready", worker=w.index) for w in run.workers),
                               READY_S)
        if outcome is None:
            self.all_exited(run, "every worker printed `ready`")
        elif not outcome:
            run.fail(f"not every worker printed `ready` within {READY_S:.0f} s")
        return bool(outcome)

    @staticmethod
    def wait_on(run: Run, met: Callable[[], bool], deadline_s: float) -> bool | None:
        """Waits until `met()`: True once it holds, False at the deadline, None as soon as every worker
        process has exited without it (a worker that cannot start, say a class missing from a half-built
        tree, fails its scenario at once instead of after the deadline)."""
        def gone() -> bool:
            return all(w.proc.poll() is not None for w in run.workers)

        if not wait_for(lambda: met() or gone(), deadline_s):
            return False
        if met():
            return True
        for w in run.workers:  # the last lines an exited worker printed may not be read yet
            w.reader.join(5)
        return True if met() else None

    @staticmethod
    def all_exited(run: Run, what: str) -> None:
        report = "\n".join(f"{w.summary(run.events)}\n{w.tail()}" for w in run.workers)
        run.fail(f"every worker exited before {what}:\n{report}")

    def worker_env(self, run: Run, i: int, config: dict[str, Any]) -> dict[str, str]:
        env = dict(self.base_env)
        env["FENEC_URL"] = self.proxy.url
        if run.pair:
            env["FENEC_URL"] = run.pair[0].url
            env["FENEC_SERVERS"] = ",".join(s.url for s in run.pair)
        if run.cluster is not None:  # the elected primary first, as the harness contract has it
            urls = sorted(run.cluster.urls, key=lambda u: u != run.url)
            env["FENEC_URL"] = urls[0]
            env["FENEC_SERVERS"] = ",".join(urls)
        env["FENEC_QUEUE"] = run.queue
        env["FENEC_WORKER"] = f"{self.sdk}-{run.queue}-w{i}"
        if "heartbeat_ms" not in config:
            config = {**config, "heartbeat_ms": config["lease_ms"] // 3}
        for key, name in WORKER_KEYS.items():
            env[name] = str(config[key])
        if run.scenario.get("keep_done"):
            env["FENEC_KEEP_DONE"] = "1"
        return env

    def enqueue(self, run: Run) -> None:
        url = run.url or self.server.url
        schema = SCHEMA + (", done_at timestamp" if run.scenario.get("keep_done") else "")
        query(url, f"create collection {run.queue} ({schema})")
        for group in run.scenario["jobs"]:
            mine = [j for j in run.jobs if j.group is group]
            rows, params = [], []
            for job in mine:
                params += [{**group.get("payload", {}), "key": job.key}, group.get("initial_attempts", 0)]
                rows.append(f"{{payload: ${len(params) - 1}, run_at: now(), attempts: ${len(params)}}}")
            query(url, f"put {run.queue} [{', '.join(rows)}]", params)
        ids = {r["payload"]["key"]: r["id"] for r in query(url, f"get {run.queue} select id, payload")}
        for job in run.jobs:
            job.id = ids[job.key]

    def rows(self, run: Run, where: str = "") -> list[dict[str, Any]]:
        return list(query(run.url or self.server.url, f"get {run.queue} {where}".strip()))

    def step(self, run: Run, step: dict[str, Any]) -> bool:
        """Plays one step; False (with the reason recorded) when a condition was not met in time."""
        if "until" in step:
            what = step["until"]
            if what == "settled":
                def met() -> bool:
                    try:
                        return not self.rows(run, "where run_at is not null")
                    except (OSError, Refused):
                        return False
            elif what == "exited":
                def met() -> bool:
                    return all(w.proc.poll() is not None for w in run.workers)
            elif what == "elected":
                assert run.cluster is not None, "`until: elected` is for a `cluster` scenario"
                elected = run.cluster.elected()
                run.url = run.new_primary = elected.url
                run.note = f"elected {(now_ms() - run.last_fault_ms) / 1000:.1f} s after the kill"
                return True
            elif what == "event":
                kind, since = step["event"], (run.last_fault_ms if step.get("since_fault") else 0.0)
                if "each_worker" in step:
                    def met() -> bool:
                        return all(run.events.count(kind, since, w.index) >= step["each_worker"] for w in run.workers)
                else:
                    def met() -> bool:
                        return run.events.count(kind, since) >= step["count"]
            else:
                raise ValueError(f"unknown condition {what!r}")
            outcome = wait_for(met, DEADLINE_S) if what == "exited" else self.wait_on(run, met, DEADLINE_S)
            if outcome is None:
                self.all_exited(run, json.dumps(step))
            elif not outcome:
                gone = [f"{w.name} exited {w.proc.poll()}" for w in run.workers if w.proc.poll() is not None]
                run.fail(f"waited {DEADLINE_S:.0f} s for {json.dumps(step)}: not met"
                         + (f" ({', '.join(gone)})" if gone and what != "exited" else ""))
            return bool(outcome)
        action = step["do"]
        if action in ("sigterm", "sigint"):
            return self.signal_workers(run, step)
        if action == "pause":
            time.sleep(step["ms"] / 1000)   # an outage's length, a fault parameter
            return True
        run.last_fault_ms = now_ms()
        if action == "restart":
            self.proxy.refuse()
            self.server.stop()
            time.sleep(step["down_ms"] / 1000)   # the outage's length, a fault parameter
            self.proxy.pass_(self.server.start())
        elif action == "cut":
            self.proxy.cut()
        elif action == "freeze":
            self.proxy.freeze()
        elif action == "refuse":
            self.proxy.refuse()
        elif action == "pass":
            self.proxy.pass_()
        elif action == "failover":
            self.failover(run)
        elif action == "kill primary":
            self.kill_primary(run)
        elif action == "busy":
            self.proxy.busy(step["n"])
        elif action == "drop":
            self.proxy.drop_answers(step["n"], step["match"].replace("{queue}", run.queue))
        else:
            raise ValueError(f"unknown action {action!r}")
        return True

    def signal_workers(self, run: Run, step: dict[str, Any]) -> bool:
        sig = signal.SIGTERM if step["do"] == "sigterm" else signal.SIGINT
        sent = time.monotonic()
        run.signalled_ms = now_ms()
        for w in run.workers:
            w.signal(sig)
        group = step.get("given_back")
        if group is None:
            return True
        ids = {j.id for j in run.jobs if group in ("*", j.group["group"])}

        def given_back() -> bool:
            try:
                back = self.rows(run, "select id where owner is null and run_at <= now()")
            except (OSError, Refused):
                return False
            return ids <= {r["id"] for r in back}

        if not wait_for(given_back, DEADLINE_S, poll_s=0.01):
            run.fail(f"the `{group}` jobs were not given back within {DEADLINE_S:.0f} s of {sig.name}")
            return False
        took = (time.monotonic() - sent) * 1000
        if took > step["within_ms"]:
            run.fail(f"the `{group}` jobs were given back {took:.0f} ms after {sig.name}, "
                     f"more than {step['within_ms']} ms")
        return True

    def stop_workers(self, run: Run, sig: signal.Signals) -> None:
        run.stopping_ms = float(int(now_ms()))  # the events' `t` are whole ms, truncated
        for w in run.workers:
            if w.proc.poll() is None:
                w.signal(sig)
        for w in run.workers:
            run.codes[w.index] = w.wait(DEADLINE_S)

    # the checks

    def check(self, run: Run) -> None:
        events = run.events.snapshot()
        for w in run.workers:
            code = run.codes.get(w.index)
            if code != 0:
                run.fail(f"{w.name} exited {'(still running)' if code is None else code}, not 0")
            mine = run.events.of(w.index)
            if not mine or mine[0]["event"] != "ready":
                run.fail(f"{w.name}: the first event is not `ready`")
            if not mine or mine[-1]["event"] != "stopped":
                run.fail(f"{w.name}: the last event is {mine[-1]['event'] if mine else 'missing'!r}, not `stopped`")
            for e in mine:
                if not isinstance(e.get("t"), (int, float)):
                    run.fail(f"{w.name}: an event without a numeric `t`: {e}")
                    break
        rows = {r["id"]: r for r in self.rows(run)}
        leased = sorted(i for i, r in rows.items() if r["owner"] is not None)
        if leased:
            run.fail(f"jobs left leased after every worker stopped: {leased}")
        ready_ids = {r["id"] for r in self.rows(run, "select id where run_at <= now()")}
        by_id: dict[int, list[Event]] = {}
        for e in events:
            if isinstance(e.get("id"), int):
                by_id.setdefault(e["id"], []).append(e)
        for job in run.jobs:
            self.check_job(run, job, rows.get(job.id), job.id in ready_ids, by_id.get(job.id, []))
        self.check_overlap(run, by_id)
        self.check_expect(run, events)
        if run.pair or run.cluster:
            self.check_failover(run, rows, by_id)

    def check_failover(self, run: Run, rows: dict[int, dict[str, Any]], by_id: dict[int, list[Event]]) -> None:
        """Every answered put done and gone (and `after_failover` of them put on the new primary); no
        job started after its `done`; each worker told of the new primary by a `primary` event naming
        it, after the fault; no worker's `run` ended before the driver stopped it."""
        for job_id in run.produced:
            if not any(e["event"] == "done" for e in by_id.get(job_id, [])):
                run.fail(f"produced job id {job_id} (its put answered) was never done")
            if job_id in rows:
                run.fail(f"produced job id {job_id} (its put answered) is still there: {rows[job_id]}")
        for job_id, events in by_id.items():
            done = [float(e["t"]) for e in events if e["event"] == "done"]
            late = [e for e in events if e["event"] == "start" and done and float(e["t"]) > min(done)]
            if late:
                run.fail(f"job id {job_id} started again after its ack was answered")
        after = run.scenario.get("produce", {}).get("after_failover", 0)
        if run.produced_new < after:
            run.fail(f"{run.produced_new} puts answered by the new primary, the scenario asks for {after}")
        new = run.new_primary
        for w in run.workers:
            mine = run.events.of(w.index)
            told = [e for e in mine if e["event"] == "primary" and float(e["t"]) >= run.last_fault_ms]
            # a client that could not connect moves to the next URL of its list and tells it as its
            # primary: the last one told is where the worker ended, and must be the new primary
            if new is None or not told or str(told[-1].get("url", "")).rstrip("/") != new:
                run.fail(f"{w.name}: its last `primary` event after the fault does not name the new primary {new}: "
                         f"{[e.get('url') for e in told]}")
            if any(e["event"] == "stopped" and float(e["t"]) < run.stopping_ms for e in mine):
                run.fail(f"{w.name}: its `run` ended (`stopped`) before the driver stopped it")
        acked = [float(e["t"]) for e in run.events.snapshot() if e["event"] == "done" and float(e["t"]) >= run.last_fault_ms]
        if acked and run.cluster is not None:  # the killed primary answers nothing, a replica no write
            run.note += f", the first ack there {(min(acked) - run.last_fault_ms) / 1000:.1f} s after the kill"

    def check_job(self, run: Run, job: Job, row: dict[str, Any] | None, ready: bool, events: list[Event]) -> None:
        g = job.group
        fate = g["expect"]
        starts = [e for e in events if e["event"] == "start"]
        done = [e for e in events if e["event"] == "done"]
        keep = bool(run.scenario.get("keep_done"))
        where = f"job {job.key} (id {job.id})"
        if "starts" in g and len(starts) != g["starts"]:
            run.fail(f"{where} started {len(starts)} times, expected {g['starts']}")
        if "start_attempts" in g and any(e.get("attempts") != g["start_attempts"] for e in starts):
            run.fail(f"{where} started with attempts {[e.get('attempts') for e in starts]}, "
                     f"expected {g['start_attempts']} each time")
        if fate == "done":
            if len(done) != 1:
                run.fail(f"{where} has {len(done)} `done` events, expected 1")
            if g.get("done_after_signal") and not all(float(e["t"]) >= run.signalled_ms > 0 for e in done):
                run.fail(f"{where} was done before the signal: it was not running when the worker was told to stop")
            if keep:
                if row is None or row["run_at"] is not None or row["owner"] is not None or row.get("done_at") is None:
                    run.fail(f"{where} is not kept done (run_at null, owner null, done_at set): {row}")
            elif row is not None:
                run.fail(f"{where} was not acked: its row is still there: {row}")
        elif fate == "dead":
            if row is None:
                run.fail(f"{where} should be a dead letter but its row is gone")
                return
            if row["run_at"] is not None or row["owner"] is not None or row.get("done_at") is not None:
                run.fail(f"{where} is not a dead letter (run_at, owner, done_at null): {row}")
            if not row["error"] or g.get("error", "") not in row["error"]:
                run.fail(f"{where}: dead with error {row['error']!r}, expected one holding {g.get('error', '')!r}")
            if "attempts" in g and row["attempts"] != g["attempts"]:
                run.fail(f"{where}: dead at attempts {row['attempts']}, expected {g['attempts']}")
            if not any(e["event"] == "dead" for e in events):
                run.fail(f"{where} is dead without a `dead` event")
            if done:
                run.fail(f"{where} is dead but has a `done` event")
        elif fate == "released":
            if row is None or row["owner"] is not None or not ready:
                run.fail(f"{where} was not given back ready (owner null, run_at <= now()): {row}")
            elif "attempts" in g and row["attempts"] != g["attempts"]:
                run.fail(f"{where} given back at attempts {row['attempts']}, expected {g['attempts']}")
        else:
            raise ValueError(f"unknown fate {fate!r}")

    def check_overlap(self, run: Run, by_id: dict[int, list[Event]]) -> None:
        """No two `start`-`end` spans of one job by different owners overlap (an unended span runs on)."""
        for job_id, events in by_id.items():
            spans: list[tuple[float, float, str]] = []
            for e in events:
                if e["event"] != "start":
                    continue
                ends = [x for x in events if x["event"] == "end" and x.get("owner") == e.get("owner")
                        and x["worker_index"] == e["worker_index"] and x["seq"] > e["seq"]]
                end = min((float(x["t"]) for x in ends), default=float("inf"))
                spans.append((float(e["t"]), end, str(e.get("owner"))))
            for (s1, e1, o1), (s2, _, o2) in itertools.combinations(sorted(spans), 2):
                if o1 != o2 and s2 < e1:
                    run.fail(f"job id {job_id} ran under {o1} and {o2} at once ({s2 - s1:.0f} ms apart)")

    def check_expect(self, run: Run, events: list[Event]) -> None:
        expect = run.scenario.get("expect", {})
        if "retries" in expect:
            n = sum(1 for e in events if e["event"] == "retry")
            if n < expect["retries"]:
                run.fail(f"{n} `retry` events, expected at least {expect['retries']}: the fault did not reach a worker")
        if "connections_cut" in expect and self.proxy.cut_conns < expect["connections_cut"]:
            run.fail(f"{self.proxy.cut_conns} connections were open to cut, expected at least {expect['connections_cut']}")
        if "busied" in expect and self.proxy.busied != expect["busied"]:
            run.fail(f"the proxy answered {self.proxy.busied} connections 503, expected {expect['busied']}")
        if "dropped" in expect and self.proxy.dropped != expect["dropped"]:
            run.fail(f"the proxy dropped {self.proxy.dropped} answers, expected {expect['dropped']}")
        peaks = []
        for index in sorted({e["worker_index"] for e in events}):
            running = peak = 0
            for e in run.events.of(index):
                running += {"start": 1, "end": -1}.get(e["event"], 0)
                peak = max(peak, running)
            peaks.append(peak)
        if "max_running" in expect and max(peaks, default=0) > expect["max_running"]:
            run.fail(f"a worker ran {max(peaks)} jobs at once, more than {expect['max_running']}")
        if "min_peak_running" in expect and max(peaks, default=0) < expect["min_peak_running"]:
            run.fail(f"no worker ran more than {max(peaks, default=0)} jobs at once, "
                     f"expected {expect['min_peak_running']} at some point")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="the fault scenarios through one SDK's fault-worker.sh")
    parser.add_argument("--sdk", required=True)
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the repository whose SDK and server run")
    parser.add_argument("--only", default="", help="only the scenarios whose name holds this text")
    parser.add_argument("--scenarios", type=Path, default=SCENARIOS)
    args = parser.parse_args(argv)
    # a SIGTERM (the caller giving up) unwinds through every `finally`, which kill what this started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    deliver_sigint()
    sdk, root = args.sdk, args.root.resolve()
    data = json.loads(args.scenarios.read_text(encoding="utf-8"))
    scenarios = [s for s in data["scenarios"] if args.only in s["name"]]
    passed = failed = skipped = 0
    if not args.only and len(scenarios) < data["min_cases"]:
        print(f"FAIL {sdk} faults: {len(scenarios)} scenarios, the file asks for at least {data['min_cases']}")
        failed += 1
    script = root / "clients" / sdk / "fault-worker.sh"
    if not script.exists():
        print(f"{sdk} faults: no {script.relative_to(root)}")
        print(f"{sdk} faults: 0 passed, {failed + len(scenarios)} failed")
        return 1
    with tempfile.TemporaryDirectory(prefix=f"fenec-faults-{sdk}-") as tmp:
        driver = Driver(sdk, root, Path(tmp))
        try:
            why = driver.build()
            if why is not None:
                print(f"FAIL {sdk} faults: {why}", flush=True)
                print(f"{sdk} faults: 0 passed, {failed + len(scenarios)} failed", flush=True)
                return 1
            driver.start()
            for index, scenario in enumerate(data["scenarios"]):
                if scenario not in scenarios:
                    continue
                started = time.monotonic()
                run = driver.play(index, scenario, data["defaults"])
                took = time.monotonic() - started
                if run.skipped and not run.failures:
                    skipped += 1
                    print(f"SKIP {sdk}: {scenario['name']} ({took:.1f} s): {run.skipped}", flush=True)
                elif run.failures:
                    failed += 1
                    print(f"FAIL {sdk}: {scenario['name']} ({took:.1f} s)", flush=True)
                    for reason in run.failures:
                        print(f"    {reason}", flush=True)
                    for w in run.workers:
                        print(w.summary(run.events), flush=True)
                        print(w.tail(), flush=True)
                else:
                    passed += 1
                    note = f", {run.note}" if run.note else ""
                    print(f"ok   {sdk}: {scenario['name']} ({took:.1f} s{note})", flush=True)
        finally:
            driver.close()
    if skipped:
        print(f"{sdk} faults: {skipped} skipped (not played: the SKIP lines above say why)", flush=True)
    print(f"{sdk} faults: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
