"""`GET /_metrics`: Prometheus text (server.md §9), the held-claim counters (http.md §8.14) and
the queue gauges per collection read from `db.stats()`: documents, and for a queue (a `run_at`
timestamp) jobs ready, leased, delayed and dead and the age of the oldest ready one; for a file
database the file, live and reclaimable bytes and the auto-compactions; the process's resident
memory (`process_resident_memory_bytes`, the name Prometheus's own process collector uses).

Counters are plain integers bumped on the event loop thread (no lock: one thread writes them).
A scrape reads the gauges through `db.stats()`, which takes only the shared lock.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable
from typing import Any

BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
           1.0, 2.5, 5.0, 10.0)
KINDS = ("read", "write")
QUEUE_GAUGES = (("ready", "fenec_queue_ready"), ("leased", "fenec_queue_leased"),
                ("delayed", "fenec_queue_delayed"), ("dead", "fenec_queue_dead"))
STORAGE_GAUGES = (
    ("file_bytes", "fenec_file_bytes", "Size of the data file."),
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


class Metrics:
    def __init__(self, version: str) -> None:
        self.version = version
        self.started = time.time()
        self.statements = {k: 0 for k in KINDS}
        self.errors = {k: 0 for k in KINDS}
        self.slow = 0
        self.counts = {k: [0] * (len(BUCKETS) + 1) for k in KINDS}
        self.sums = {k: 0.0 for k in KINDS}

    def answered(self, kind: str, seconds: float, error: bool) -> None:
        self.statements[kind] += 1
        if error:
            self.errors[kind] += 1
        self.counts[kind][bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sums[kind] += seconds

    def render(self, db: Any, waits: Any, connections: Callable[[], int]) -> bytes:
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        head("fenec_statements_total", "counter", "Statements answered (a /batch is one).")
        for k in KINDS:
            out.append(f'fenec_statements_total{{transport="http",kind="{k}"}} {self.statements[k]}')
        head("fenec_statement_errors_total", "counter", "Statements answered with an error.")
        for k in KINDS:
            out.append(f'fenec_statement_errors_total{{transport="http",kind="{k}"}} {self.errors[k]}')
        head("fenec_statement_duration_seconds", "histogram", "Arrival to answer.")
        for k in KINDS:
            running = 0
            for bound, n in zip(BUCKETS, self.counts[k], strict=False):
                running += n
                out.append(f'fenec_statement_duration_seconds_bucket{{transport="http",kind="{k}",le="{bound}"}} {running}')
            running += self.counts[k][-1]
            out.append(f'fenec_statement_duration_seconds_bucket{{transport="http",kind="{k}",le="+Inf"}} {running}')
            out.append(f'fenec_statement_duration_seconds_sum{{transport="http",kind="{k}"}} {self.sums[k]:.6f}')
            out.append(f'fenec_statement_duration_seconds_count{{transport="http",kind="{k}"}} {running}')
        head("fenec_slow_statements_total", "counter", "Statements over --slow-ms.")
        out.append(f'fenec_slow_statements_total{{transport="http"}} {self.slow}')
        head("fenec_connections", "gauge", "Open connections (the scrape's own excluded).")
        out.append(f'fenec_connections{{transport="http"}} {max(connections() - 1, 0)}')

        stats = db.stats()
        collections = stats.get("collections", {})
        head("fenec_documents", "gauge", "Documents per collection.")
        for name, c in sorted(collections.items()):
            out.append(f'fenec_documents{{collection="{_label(name)}"}} {c.get("documents", 0)}')
        for key, metric in QUEUE_GAUGES:
            head(metric, "gauge", f"Jobs {key} per collection with a run_at field.")
            for name, c in sorted(collections.items()):
                if key in c:
                    out.append(f'{metric}{{collection="{_label(name)}"}} {c[key]}')
        head("fenec_queue_oldest_ready_seconds", "gauge", "Age of the oldest ready job.")
        for name, c in sorted(collections.items()):
            age = c.get("oldest_ready_ms")
            if age is not None:
                out.append(f'fenec_queue_oldest_ready_seconds{{collection="{_label(name)}"}} {age / 1000:.3f}')
        storage = stats.get("storage") or {}
        if storage:  # a file database: the byte gauges (estimates: storage/footprint.py)
            head("fenec_data_bytes", "gauge", "Live bytes per collection (estimated from measured row sizes).")
            for name, c in sorted(collections.items()):
                out.append(f'fenec_data_bytes{{collection="{_label(name)}"}} {c.get("data_bytes", 0)}')
            for key, metric, text in STORAGE_GAUGES:
                head(metric, "gauge", text)
                out.append(f"{metric} {storage.get(key, 0)}")
            head("fenec_auto_compactions_total", "counter", "Background compactions run.")
            out.append(f"fenec_auto_compactions_total {storage.get('auto_compactions', 0)}")
        rss = resident_bytes()
        if rss is not None:
            head("process_resident_memory_bytes", "gauge", "Resident memory of the server process.")
            out.append(f"process_resident_memory_bytes {rss}")
        head("fenec_change_sequence", "gauge", "The change counter.")
        out.append(f"fenec_change_sequence {db.seq}")
        head("fenec_storage_failed", "gauge", "1 once the disk refused a write.")
        out.append(f"fenec_storage_failed {1 if stats.get('failed') else 0}")

        head("fenec_held_requests", "gauge", "Requests held by Fenec-Wait right now.")
        out.append(f"fenec_held_requests {waits.held if waits else 0}")
        for name, attr, text in (
            ("fenec_held_looks_total", "looks", "Looks made by line heads."),
            ("fenec_held_runs_total", "runs", "Held requests run again."),
            ("fenec_held_claims_taken_total", "taken", "Held requests answered by a run that took rows."),
            ("fenec_held_wakeups_total", "wakeups", "Lines woken by a write or by the clock."),
        ):
            head(name, "counter", text)
            out.append(f"{name} {getattr(waits, attr) if waits else 0}")
        head("fenec_build_info", "gauge", "Version.")
        out.append(f'fenec_build_info{{version="{self.version}"}} 1')
        head("fenec_start_time_seconds", "gauge", "Start time.")
        out.append(f"fenec_start_time_seconds {self.started:.3f}")
        out.append("")
        return "\n".join(out).encode()


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
