"""The run: every present system through the same phases, round after round, in an order rotated each round so
drift (a warming disk, a neighbour's load) falls on all alike; then the table."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import loadgen
from .machine import machine
from .procs import Missing
from .progress import Progress
from .stats import Row

# module, key, name: the systems in the order of the first round
MODULES = (("fenec", "fenecdb", "FenecDB"), ("postgres", "postgres", "PostgreSQL"), ("redisq", "redis", "Redis"),
           ("beanstalk", "beanstalkd", "beanstalkd"))
DRIVERS = "pip install -r bench/compare/requirements.txt"


@dataclasses.dataclass
class Sizes:
    jobs: int = 1_000_000        # the full queue of the claim rows
    rounds: int = 3
    claims: int = 1000           # timed claims of 10 from the full queue
    few_ready: int = 300         # timed claims of the 3 ready among `jobs` leased or delayed
    wakes: int = 300             # jobs handed to a waiting worker, per way of waiting (after one untimed)
    seconds: float = 3.0         # each throughput window
    durable_seconds: float = 2.0


QUICK = Sizes(jobs=100_000, rounds=3, claims=200, few_ready=100, wakes=30, seconds=1.0, durable_seconds=1.0)
WORKERS = (1, 4, 8)
WRITERS = (1, 8)
# the parts of a round (`--only` runs some of them): the claim, wake and load rows on the everyday setting; the
# durable writes; the durable writes with one sync replica; claim + ack with one async replica (and, when the
# claims part does not run, the same windows without a replica first: the ratio is read in the same round)
PARTS = ("claims", "durable", "sync", "async")
# `phase` calls inside each part (`one_round`); a round adds one at the start of every part but its first,
# and one at its end
PART_PHASES = {"claims": 5 + len(WORKERS), "durable": len(WRITERS) - 1, "sync": len(WRITERS) - 1,
               "async": len(WORKERS)}
FIRST_PHASE = {"claims": "start, wake a blocked worker", "durable": "start, durable",
               "sync": "start, durable, one sync replica", "async": "start, one async replica"}
ALONE_FIRST = "start, claim + ack without a replica"  # the async part's first phase when it runs its own baseline


def alone(parts: tuple[str, ...]) -> bool:
    """Whether the async part runs the claim + ack windows without a replica itself (no claims part does)."""
    return "async" in parts and "claims" not in parts


def first_phase(part: str, parts: tuple[str, ...]) -> str:
    return ALONE_FIRST if part == "async" and alone(parts) else FIRST_PHASE[part]


def part_of(row: str) -> str:
    """The part of a round that measures the row `row` ("" for the host check, which every round makes)."""
    if row == "host_ms":
        return ""
    if row.startswith("durable_sync_"):
        return "sync"
    if row.startswith("durable_"):
        return "durable"
    if row.startswith("tput_async_"):
        return "async"
    return "claims"


def phases_per_round(parts: tuple[str, ...] = PARTS) -> int:
    """The `phase` calls of `one_round` running `parts`."""
    return sum(PART_PHASES[p] for p in parts) + len(parts) + (len(WORKERS) + 1 if alone(parts) else 0)


def rows(jobs: int, parts: tuple[str, ...] = PARTS) -> list[Row]:
    baseline = {f"tput_{w}" for w in WORKERS} if alone(parts) else set()
    return [r for r in all_rows(jobs) if part_of(r.key) in ("", *parts) or r.key in baseline]


def all_rows(jobs: int) -> list[Row]:
    n = f"{jobs:,}".replace(",", " ")
    out = [Row("load", f"load {n} ready jobs", "jobs/s", "higher"),
           Row("claim_p50", f"claim 10 of {n} ready, p50", "ms", "lower"),
           Row("claim_p99", f"claim 10 of {n} ready, p99", "ms", "lower")]
    out += [Row(f"tput_{w}", f"claim 10 + ack, {w} worker{'s' if w > 1 else ''}", "jobs/s", "higher")
            for w in WORKERS]
    out += [Row("wake_block_p50", "wake a blocked worker, p50", "ms", "lower"),
            Row("wake_block_p99", "wake a blocked worker, p99", "ms", "lower"),
            Row("wake_poll_p50", "polling every 10 ms, p50", "ms", "lower"),
            Row("wake_poll_p99", "polling every 10 ms, p99", "ms", "lower"),
            Row("wake_poll_claims", "polling every 10 ms, claims a job", "claims", ""),
            Row("few_p50", f"claim with {n} leased/delayed and 3 ready, p50", "ms", "lower"),
            Row("few_p99", f"claim with {n} leased/delayed and 3 ready, p99", "ms", "lower")]
    out += [Row(f"durable_{w}", f"durable writes, {w} writer{'s' if w > 1 else ''}", "writes/s", "higher")
            for w in WRITERS]
    out += [Row(f"durable_sync_{w}", f"durable writes, {w} writer{'s' if w > 1 else ''}, one sync replica",
                "writes/s", "higher") for w in WRITERS]
    out += [Row(f"tput_async_{w}", f"claim 10 + ack, {w} worker{'s' if w > 1 else ''}, one async replica",
                "jobs/s", "higher") for w in WORKERS]
    out.append(Row("host_ms", "host check: 1 000 000 additions in Python, mean of 3 in the round", "ms", ""))
    return out


def host_check() -> float:
    """The harness's own interpreter timing a fixed loop, with no server running: how fast the machine was at
    that moment, so a round run while a neighbour held the host shows in the table (ms)."""
    t0 = time.perf_counter()
    s = 0
    for i in range(1_000_000):
        s += i
    return (time.perf_counter() - t0) * 1000


PHASES_PER_ROUND = phases_per_round()  # the `phase` calls of `one_round`, every part run


def discover(only: list[str] | None, before: str | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
    """The systems to run, and every system's entry for the report (a missing one with how to install it);
    `before`: a checkout whose FenecDB build runs beside this one (fenec.py's `Before`)."""
    present: dict[str, Any] = {}
    info: dict[str, dict] = {}
    makers: list[tuple[str, str, Callable[[], Any]]] = []
    for mod, key, name in MODULES:
        if only and key not in only:
            continue
        try:
            cls = importlib.import_module("." + mod, __package__).System
        except ImportError as e:  # its Python driver is not installed (`make queue-compare` installs them)
            info[key] = {"name": name, "skipped": f"{e}; install the drivers with: {DRIVERS}"}
            continue
        makers.append((cls.key, cls.name, cls))
    if before is not None:
        cls = importlib.import_module(".fenec", __package__).Before
        makers.append((cls.key, cls.name, lambda: cls(before)))
    for key, name, make in makers:
        try:
            system = make()
        except Missing as e:
            info[key] = {"name": name, "skipped": str(e)}
            continue
        present[key] = system
        info[key] = {"name": name, "version": system.version, "everyday": system.everyday_setting,
                     "durable": system.durable_setting, "load": system.load_method}
    return present, info


class Workdirs:
    """A directory per server start, under one temporary base removed at the end."""

    def __init__(self, parent: str | None) -> None:
        self.base = tempfile.mkdtemp(prefix="queue-compare-", dir=parent)
        os.chmod(self.base, 0o755)  # PostgreSQL, started as its own user when we are root, must reach its dir
        self.n = 0

    def new(self, key: str) -> str:
        self.n += 1
        path = os.path.join(self.base, f"{key}-{self.n}")
        os.mkdir(path)
        return path

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def server(system: Any, dirs: Workdirs, durable: bool, replica: str | None = None) -> Iterator[None]:
    """One start of a system's server in a fresh data directory, stopped (and the directory removed) after,
    whatever happens — a server that failed to start included. `replica` "sync" or "async": with one replica
    of it on this machine, in a directory of its own (a system that has none is not asked)."""
    wd = dirs.new(system.key)
    try:
        if replica is None:
            system.start(wd, durable=durable)
        else:
            system.start(wd, durable=durable, replica=replica)
        yield
    finally:
        system.stop()
        shutil.rmtree(wd, ignore_errors=True)


def one_round(system: Any, sizes: Sizes, dirs: Workdirs, record: Callable[[str, float], None],
              phase: Callable[[str], None], note: Callable[[str], None], parts: tuple[str, ...] = PARTS) -> None:
    """The phases of one system in one round; `phase` is called after each (`phases_per_round(parts)` in all).

    Three server starts, each on a fresh data directory: the wake rows and the million ready jobs; the
    million leased or delayed (a fresh server rather than a dropped queue, so no system is still reclaiming
    the last million — FenecDB's auto-compaction, Redis's AOF rewrite, beanstalkd's old tube, PostgreSQL's
    dead rows — while the row is measured); the durable writes at the strongest setting. Then, for a system
    that has replicas (`replicas` names the kinds), two more: the durable writes with one synchronous replica,
    and claim + ack with one asynchronous replica attached. The host is timed before each start (`host_check`).
    `parts` (PARTS) chooses which of these run: "claims" the first two starts, then "durable", "sync", "async"
    (which, without "claims", first runs the claim + ack windows on a server without a replica)."""
    host: list[float] = []
    for i, part in enumerate(parts):
        if i:
            phase(first_phase(part, parts))
        if part == "async" and alone(parts):  # the windows without a replica, then with one
            host.append(host_check())
            with server(system, dirs, durable=False):
                _claim_ack(system, sizes, record, phase, note, None)
            phase("restart, one async replica")
        if part in ("claims", "durable") or part in getattr(system, "replicas", ()):  # a server starts
            host.append(host_check())
        {"claims": _claims, "durable": _durable, "sync": _sync, "async": _async}[part](
            system, sizes, dirs, record, phase, note, host)
    if host:
        record("host_ms", sum(host) / len(host))
    phase("done")


def _claims(system: Any, sizes: Sizes, dirs: Workdirs, record: Callable[[str, float], None],
            phase: Callable[[str], None], note: Callable[[str], None], host: list[float]) -> None:
    with server(system, dirs, durable=False):
        r = loadgen.wake_latency(system, sizes.wakes, None)
        record("wake_block_p50", r["p50"])
        record("wake_block_p99", r["p99"])
        phase("wake, polling every 10 ms")
        r = loadgen.wake_latency(system, sizes.wakes, 0.01)
        record("wake_poll_p50", r["p50"])
        record("wake_poll_p99", r["p99"])
        record("wake_poll_claims", r["claims_per_job"])
        phase(f"load {sizes.jobs} ready")
        system.reset()
        t0 = time.perf_counter()
        system.load(sizes.jobs, ready=True)
        record("load", sizes.jobs / (time.perf_counter() - t0))
        phase("claim 10")
        with contextlib.closing(system.session()) as s:
            r = loadgen.claim_latency(s, sizes.claims)
        record("claim_p50", r["p50"])
        record("claim_p99", r["p99"])
        _windows(system, sizes, record, phase, note, None, sizes.claims * 10)  # those claimed and acked
        phase(f"restart, load {sizes.jobs} leased/delayed")
    host.append(host_check())
    with server(system, dirs, durable=False):
        system.load(sizes.jobs, ready=False)
        phase("claim 3 ready among the leased")
        with contextlib.closing(system.session()) as s:
            r = loadgen.few_ready_latency(s, sizes.few_ready)
        record("few_p50", r["p50"])
        record("few_p99", r["p99"])


def _durable(system: Any, sizes: Sizes, dirs: Workdirs, record: Callable[[str, float], None],
             phase: Callable[[str], None], note: Callable[[str], None], host: list[float]) -> None:
    with server(system, dirs, durable=True):
        for i, w in enumerate(WRITERS):
            if i:
                phase(f"durable writes, {w} writers")
            record(f"durable_{w}", loadgen.run_workers(system, "put", w, sizes.durable_seconds)["rate"])


def _sync(system: Any, sizes: Sizes, dirs: Workdirs, record: Callable[[str, float], None],
          phase: Callable[[str], None], note: Callable[[str], None], host: list[float]) -> None:
    if "sync" not in getattr(system, "replicas", ()):
        for w in WRITERS[1:]:
            phase(f"durable writes, {w} writers, one sync replica: none")
        return
    with server(system, dirs, durable=True, replica="sync"):
        for i, w in enumerate(WRITERS):
            if i:
                phase(f"durable writes, {w} writers, one sync replica")
            record(f"durable_sync_{w}", loadgen.run_workers(system, "put", w, sizes.durable_seconds)["rate"])


def _async(system: Any, sizes: Sizes, dirs: Workdirs, record: Callable[[str, float], None],
           phase: Callable[[str], None], note: Callable[[str], None], host: list[float]) -> None:
    if "async" not in getattr(system, "replicas", ()):
        for w in WORKERS:
            phase(f"claim + ack, {w} worker(s), one async replica: none")
        return
    with server(system, dirs, durable=False, replica="async"):
        _claim_ack(system, sizes, record, phase, note, "async")


def _claim_ack(system: Any, sizes: Sizes, record: Callable[[str, float], None], phase: Callable[[str], None],
               note: Callable[[str], None], replica: str | None) -> None:
    """On a server just started: the ready jobs loaded (and the replica caught up: the windows measure the
    stream, not a backlog), then the claim + ack windows."""
    system.load(sizes.jobs, ready=True)
    if replica:
        system.replica_level()
    _windows(system, sizes, record, phase, note, replica, 0)


def _windows(system: Any, sizes: Sizes, record: Callable[[str, float], None], phase: Callable[[str], None],
             note: Callable[[str], None], replica: str | None, taken: int) -> None:
    """The claim + ack windows, one for each count of `WORKERS` (a phase each), on a queue of `sizes.jobs`
    ready jobs of which `taken` were claimed and acked since it was loaded."""
    with_replica = ", one async replica" if replica else ""
    for w in WORKERS:
        phase(f"claim + ack, {w} worker(s){with_replica}")
        if taken:  # top the queue up to `jobs` ready again, so no window finds it running dry
            system.load(taken, ready=True)
        r = loadgen.run_workers(system, "claim-ack", w, sizes.seconds)
        if r["dry"]:
            note(f"{system.name}: the queue ran dry in the {w}-worker window{with_replica} (use more --jobs)")
        record(f"tput_async_{w}" if replica else f"tput_{w}", r["rate"])
        taken = r["done"]


def run(sizes: Sizes, only: list[str] | None, workdir: str | None, log: Callable[[str], None],
        parts: tuple[str, ...] = PARTS, before: str | None = None) -> dict[str, Any]:
    present, info = discover(only, before)
    for entry in info.values():
        if "skipped" in entry:
            log(f"queue-compare: skipping {entry['name']}: {entry['skipped']}")
    results: dict[str, Any] = {
        "machine": machine(), "settings": dataclasses.asdict(sizes), "systems": info,
        "parts": list(parts), "rows": [dataclasses.asdict(r) for r in rows(sizes.jobs, parts)], "values": {}, "errors": [], "notes": [],
        "phase_seconds": {},
        "order": [], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    keys = list(present)
    if not keys:
        return results
    per_round = phases_per_round(parts)
    prog = Progress(sizes.rounds * len(keys) * per_round)
    dirs = Workdirs(workdir)
    try:
        for rnd in range(sizes.rounds):
            shift = rnd % len(keys)
            order = keys[shift:] + keys[:shift]
            results["order"].append(order)
            for key in order:
                system = present[key]
                done_before = prog.done
                label = f"round {rnd + 1}/{sizes.rounds} {system.name}"

                def record(row: str, value: float, key: str = key, rnd: int = rnd) -> None:
                    results["values"].setdefault(row, {}).setdefault(key, {})[str(rnd)] = value

                clock = {"t": time.monotonic(), "what": first_phase(parts[0], parts)}

                def phase(what: str, label: str = label, key: str = key, clock: dict = clock) -> None:
                    now = time.monotonic()
                    spent = results["phase_seconds"].setdefault(key, {})
                    spent[clock["what"]] = spent.get(clock["what"], 0.0) + now - clock["t"]
                    clock.update(t=now, what=what)
                    prog.step(f"{label}: {what}")

                prog.show(f"{label}: {clock['what']}")
                try:
                    one_round(system, sizes, dirs, record, phase, results["notes"].append, parts)
                except Exception as e:  # a failed system-round is reported, and the run goes on
                    results["errors"].append(f"round {rnd + 1} {system.name}: {e!r}")
                    log(f"\nqueue-compare: round {rnd + 1} {system.name} failed: {e!r}")
                    prog.done = done_before + per_round
                    prog.show(f"{label}: failed")
    finally:
        prog.finish()
        for system in present.values():  # each stopped already, unless a Ctrl-C or an error came mid-round
            try:
                system.stop()
            except Exception as e:
                log(f"queue-compare: stopping {system.name}: {e!r}")
        dirs.remove()
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return results
