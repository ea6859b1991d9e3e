"""`GET /_metrics`: Prometheus text (server.md §9; every name is in docs/metrics.md, and
tests/test_docs_metrics.py holds the two together): the statement counters, the held-claim
counters (http.md §8.14), per collection its documents, and per queue (engine/queues.py: by
shape, per `queue` value when the collection has that field) the jobs in each state, the oldest
ready one's age (0 when none is) and the event counters; for a file database the file, live
and reclaimable bytes and the auto-compactions; the process's resident memory
(`process_resident_memory_bytes`, the name Prometheus's own process collector uses).

Counters are plain integers bumped on the event loop thread (no lock: one thread writes them).
A scrape reads the gauges through `db.stats()`, which takes only the shared lock. `Recent` keeps
what `GET /_metrics/recent` answers (the dashboard's rates): per-second samples of the whole
server's counters, and per queue its rates over about the last minute.
"""

from __future__ import annotations

import gc
import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ..database import Database

from .. import gc_policy

BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
           1.0, 2.5, 5.0, 10.0)
KINDS = ("read", "write")
QUEUE_GAUGES = (
    ("ready", "fenec_queue_ready", "Jobs ready to run (run_at <= now)."),
    ("leased", "fenec_queue_leased", "Jobs held by a worker (run_at ahead, owner set)."),
    ("delayed", "fenec_queue_delayed", "Jobs waiting for their time (run_at ahead, no owner)."),
    ("retrying", "fenec_queue_retrying", "Ready or delayed jobs that failed before (attempts > 0, error set)."),
    ("dead", "fenec_queue_dead", "Dead letters (run_at null, done_at null or absent)."),
    ("done", "fenec_queue_done", "Kept-done jobs (run_at null, done_at set)."),
)
QUEUE_COUNTERS = (
    ("fenec_queue_enqueued_total", "Jobs put into the queue."),
    ("fenec_queue_claimed_total", "Jobs claimed (owner set and attempts raised)."),
    ("fenec_queue_acked_total", "Held jobs deleted or kept done."),
    ("fenec_queue_failed_total", "Held jobs given back (owner cleared, not done)."),
    ("fenec_queue_dead_lettered_total", "Jobs that became dead letters."),
)
RECENT_SAMPLES = 600  # one a second: the last ten minutes
STORAGE_GAUGES = (
    ("file_bytes", "fenec_file_bytes", "Bytes of records in the data file (its preallocated zeros not counted)."),
    ("reclaimable_bytes", "fenec_reclaimable_bytes", "What a compaction would give back (estimated)."),
)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int | None:
    """The process's resident set now (Linux: /proc/self/statm), None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class KindCounts:
    """The statement counters of one kind (read or write): how many, how many failed, the latency
    histogram's buckets (the last past BUCKETS) and the seconds summed: a record (the server README,
    "How a compiled module is written"), counted on every request."""

    __slots__ = ("statements", "errors", "counts", "seconds")

    def __init__(self) -> None:
        self.statements = 0
        self.errors = 0
        self.counts = [0] * (len(BUCKETS) + 1)
        self.seconds = 0.0


class Metrics:
    def __init__(self, version: str) -> None:
        self.version = version
        self.started = time.time()
        self.kinds = {k: KindCounts() for k in KINDS}
        self.slow = 0
        self.direct = 0  # requests answered on the direct path (protocol.py), fenec_http_direct_total
        self.busy: Any = None  # the loop's polling window (busy_poll.py), None when off

    def answered(self, kind: str, seconds: float, error: bool) -> None:
        c = self.kinds[kind]
        c.statements += 1
        if error:
            c.errors += 1
        at = 0  # bisect_left(BUCKETS, seconds), without a call: most answers are in the first few
        for bound in BUCKETS:
            if bound >= seconds:
                break
            at += 1
        c.counts[at] += 1
        c.seconds += seconds

    def render(self, db: Database, lines: Any, connections: Callable[[], int]) -> bytes:
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        def one(name: str, kind: str, text: str, value: object) -> None:
            head(name, kind, text)
            out.append(f"{name} {value}")

        kinds = self.kinds
        head("fenec_statements_total", "counter", "Statements answered (a /batch is one).")
        for k in KINDS:
            out.append(f'fenec_statements_total{{transport="http",kind="{k}"}} {kinds[k].statements}')
        head("fenec_statement_errors_total", "counter", "Statements answered with an error.")
        for k in KINDS:
            out.append(f'fenec_statement_errors_total{{transport="http",kind="{k}"}} {kinds[k].errors}')
        head("fenec_statement_duration_seconds", "histogram", "Arrival to answer.")
        for k in KINDS:
            kc = kinds[k]
            running = 0
            for bound, n in zip(BUCKETS, kc.counts, strict=False):
                running += n
                out.append(f'fenec_statement_duration_seconds_bucket{{transport="http",kind="{k}",le="{bound}"}} {running}')
            running += kc.counts[-1]
            out.append(f'fenec_statement_duration_seconds_bucket{{transport="http",kind="{k}",le="+Inf"}} {running}')
            out.append(f'fenec_statement_duration_seconds_sum{{transport="http",kind="{k}"}} {kc.seconds:.6f}')
            out.append(f'fenec_statement_duration_seconds_count{{transport="http",kind="{k}"}} {running}')
        one("fenec_http_direct_total", "counter", "Requests to /query and /batch answered without the ASGI app.", self.direct)
        busy = self.busy
        one("fenec_busy_poll_window_seconds", "gauge", "How long the loop polls after an answer before it sleeps "
            "(--busy-poll; 0: off).", busy.window if busy is not None else 0)
        one("fenec_busy_poll_expired_total", "counter", "Polling windows that ran out with no request read: each "
            "kept one CPU busy for the window.", busy.expired if busy is not None else 0)
        head("fenec_slow_statements_total", "counter", "Statements over --slow-ms.")
        out.append(f'fenec_slow_statements_total{{transport="http"}} {self.slow}')
        head("fenec_connections", "gauge", "Open connections (the scrape's own excluded).")
        out.append(f'fenec_connections{{transport="http"}} {max(connections() - 1, 0)}')

        stats = db.stats()
        collections = stats.get("collections", {})
        head("fenec_documents", "gauge", "Documents per collection.")
        for name, c in sorted(collections.items()):
            out.append(f'fenec_documents{{collection="{_label(name)}"}} {c.get("documents", 0)}')
        self._queues(out, head, collections, db)
        storage = stats.get("storage") or {}
        if storage:  # a file database: the byte gauges (estimates: storage/footprint.py)
            head("fenec_data_bytes", "gauge", "Live bytes per collection (estimated from measured row sizes).")
            for name, c in sorted(collections.items()):
                out.append(f'fenec_data_bytes{{collection="{_label(name)}"}} {c.get("data_bytes", 0)}')
            for key, metric, text in STORAGE_GAUGES:
                head(metric, "gauge", text)
                out.append(f"{metric} {storage.get(key, 0)}")
            one("fenec_auto_compactions_total", "counter", "Background compactions run.", storage.get('auto_compactions', 0))
            one("fenec_log_records_total", "counter", "Records appended to the data file since start.", storage.get('appended', 0))
            one("fenec_log_syncs_total", "counter", "Syncs (fdatasync) of the data file since start.", storage.get('fsyncs', 0))
        rss = resident_bytes()
        if rss is not None:
            one("process_resident_memory_bytes", "gauge", "Resident memory of the server process.", rss)
        head("fenec_gc_collections_total", "counter", "Cycle collections run, per generation (2: full).")
        for gen, st in enumerate(gc.get_stats()):
            out.append(f'fenec_gc_collections_total{{generation="{gen}"}} {st.get("collections", 0)}')
        one("fenec_gc_frozen_objects", "gauge", "Objects kept out of the cycle collector's walks (gc_policy).", gc_policy.frozen())
        one("fenec_change_sequence", "gauge", "The change counter.", db.seq)
        one("fenec_storage_failed", "gauge", "1 once the disk refused a write.", 1 if stats.get('failed') else 0)

        one("fenec_held_claims", "gauge", "Held claims (Fenec-Wait) right now.", lines.held if lines else 0)
        for name, attr, text in (
            ("fenec_held_looks_total", "looks", "Looks made by line heads."),
            ("fenec_held_runs_total", "runs", "Held claims run again."),
            ("fenec_held_claims_taken_total", "taken", "Held claims answered by a run that took rows."),
            ("fenec_held_wakeups_total", "wakeups", "Lines woken by a write or by the clock."),
            ("fenec_held_checks_total", "checks", "Rows a write put checked against a held line's filter."),
        ):
            one(name, "counter", text, getattr(lines, attr) if lines else 0)
        listed = list(db.schedules.by_name.values())
        paused = sum(1 for s in listed if s.paused)
        head("fenec_schedules", "gauge", "Schedules, by state (running or paused).")
        out.append(f'fenec_schedules{{state="running"}} {len(listed) - paused}')
        out.append(f'fenec_schedules{{state="paused"}} {paused}')
        one("fenec_schedules_failing", "gauge", "Schedules whose last fire's put was refused.",
            sum(1 for s in listed if s.error is not None))
        one("fenec_schedule_fires_total", "counter", "Fires of schedules made by this process.", db.schedules.fired)
        head("fenec_build_info", "gauge", "Version.")
        out.append(f'fenec_build_info{{version="{self.version}"}} 1')
        head("fenec_start_time_seconds", "gauge", "Start time.")
        out.append(f"fenec_start_time_seconds {self.started:.3f}")
        out.append("")
        return "\n".join(out).encode()


    @staticmethod
    def _queues(out: list[str], head: Callable[[str, str, str], None], collections: dict[str, Any],
                db: Database) -> None:
        """The queue gauges and counters: labelled {collection} for a collection without a
        `queue` field, {collection, queue} per value for one with (docs/metrics.md)."""
        def labels(name: str, value: str) -> str:
            if collections[name].get("queue_field") is None:
                return f'collection="{_label(name)}"'
            return f'collection="{_label(name)}",queue="{_label(value)}"'

        queues = sorted(n for n, c in collections.items() if "queues" in c)
        for key, metric, text in QUEUE_GAUGES:
            head(metric, "gauge", text)
            for name in queues:
                for value, c in sorted(collections[name]["queues"].items()):
                    out.append(f"{metric}{{{labels(name, value)}}} {c[key]}")
        head("fenec_queue_paused", "gauge", "1 while claims of the queue take nothing: it or its collection is paused.")
        targets = dict(db.controls.targets)
        for name in queues:
            per = dict(targets.get(name, {}))
            whole = per.get(None)
            values = set(collections[name]["queues"])
            if collections[name].get("queue_field") is not None:
                values.update(q for q in per if q is not None)
            for value in sorted(values):
                own = per.get(value) if collections[name].get("queue_field") is not None else None
                paused = (whole is not None and whole.paused) or (own is not None and own.paused)
                out.append(f"fenec_queue_paused{{{labels(name, value)}}} {int(paused)}")
        head("fenec_queue_oldest_ready_seconds", "gauge", "Age of the oldest ready job (0 when none is ready).")
        for name in queues:
            for value, c in sorted(collections[name]["queues"].items()):
                out.append(f"fenec_queue_oldest_ready_seconds{{{labels(name, value)}}} "
                           f"{c['oldest_ready_ms'] / 1000:.3f}")
        counters = db.tally.snapshot()
        for name in queues:  # a queue's values seen only by its counters still get a line
            for value in collections[name]["queues"]:
                counters.setdefault((name, value), [0] * len(QUEUE_COUNTERS))
        for i, (metric, text) in enumerate(QUEUE_COUNTERS):
            head(metric, "counter", text)
            for (name, value), c in sorted(counters.items()):
                if name in collections and "queues" in collections[name]:
                    out.append(f"{metric}{{{labels(name, value)}}} {c[i]}")


class Recent:
    """What `GET /_metrics/recent` answers, for the dashboard's rates. `sample()` runs once a
    second on the event loop (App.start); nothing is added to the claim path beyond the tally's
    integer increments.

    * `samples`: per second, the time and the queue counters' totals over the whole server with
      the held claims (the last ten minutes).
    * `queues`: per queue, a row of `queue_fields`: the collection, the value of its `queue` field
      ("" for a collection without one, or a job without a value), and the counters' rates per
      second over `queues_span_s`:
      from the oldest of the marks kept every QUEUE_STEP_S seconds to the latest sample, about the
      last minute. Only those marks and the latest sample are kept, not a series per queue, so
      the memory is a few copies of the tally whatever the number of queues.

    It is read like `/_metrics` (the server or the admin token), which may read every queue."""

    FIELDS = ("enqueued", "claimed", "acked", "failed", "dead_lettered", "held")
    QUEUE_STEP_S = 10.0
    QUEUE_MARKS = 7  # one every QUEUE_STEP_S: the oldest is a minute before the newest

    def __init__(self) -> None:
        self.samples: deque[tuple[float, ...]] = deque(maxlen=RECENT_SAMPLES)
        self.marks: deque[tuple[float, dict[tuple[str, str], list[int]]]] = deque(maxlen=self.QUEUE_MARKS)
        self.latest: tuple[float, dict[tuple[str, str], list[int]]] = (0.0, {})

    def sample(self, db: Database, lines: Any, at: float | None = None) -> None:
        t = time.time() if at is None else at
        counters: dict[tuple[str, str], list[int]] = db.tally.snapshot()
        totals = [0] * len(QUEUE_COUNTERS)
        for c in counters.values():
            for i, n in enumerate(c):
                totals[i] += n
        held = lines.held if lines is not None else 0
        self.samples.append((t, *totals, held))
        self.latest = (t, counters)
        if not self.marks or t - self.marks[-1][0] >= self.QUEUE_STEP_S:
            self.marks.append(self.latest)

    def render(self) -> dict[str, Any]:
        end, now = self.latest
        start, then = self.marks[0] if self.marks else self.latest
        span = end - start
        none = [0] * len(QUEUE_COUNTERS)
        queues: list[list[Any]] = []
        for key, c in sorted(now.items()):
            before = then.get(key, none)
            row: list[Any] = [key[0], key[1]]
            for i in range(len(QUEUE_COUNTERS)):
                row.append(round((c[i] - before[i]) / span, 3) if span > 0 else 0.0)
            queues.append(row)
        return {"interval_s": 1, "fields": ["t", *self.FIELDS], "samples": [list(s) for s in self.samples],
                "queue_fields": ["collection", "queue", *self.FIELDS[:len(QUEUE_COUNTERS)]],
                "queues_span_s": round(span, 3), "queues": queues}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
