"""The Python SDK's fault-harness worker: `Worker.run` configured from the environment (docs/workers.md).

Started by `fault-worker.sh` for `conformance/faults.py`; FENEC_SERVERS (a comma-separated list), when
set, is the client's list of servers, named in the `ready` event. It prints one JSON object per line for every
event of the worker (`ready` first, `stopped` last) and `end` after each handler call; SIGTERM stops it
gracefully (drain `FENEC_DRAIN_MS`), SIGINT hard. The handler does what the job's payload says:
`sleep_ms` (cut short when the lease is lost or on a hard stop), then `throw` or `fail` while the
attempts are within `fail_times` (always, without it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

from fenecdb import Client, Job, Worker

_out = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": int(time.time() * 1000), **fields}, default=str)
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def env_ms(name: str, default: int) -> float:
    return int(os.environ.get(name, default)) / 1000


class JobFailed(Exception):
    """The ordinary error a job's `fail` asks for."""


def main() -> int:
    name = os.environ.get("FENEC_WORKER") or None
    backoff_ms = int(os.environ.get("FENEC_BACKOFF_MS", 1000))
    lease = env_ms("FENEC_LEASE_MS", 30000)
    heartbeat = os.environ.get("FENEC_HEARTBEAT_MS")
    timeout = env_ms("FENEC_TIMEOUT_MS", 10000)

    def on_event(event: dict[str, Any]) -> None:
        fields = {k: v for k, v in event.items() if k != "type"}
        emit(event["type"], **fields)

    def handle(job: Job) -> None:
        payload = job.payload if isinstance(job.payload, dict) else {}
        ok = False
        try:
            sleep_ms = payload.get("sleep_ms") or 0
            if sleep_ms:
                job.cancelled.wait(sleep_ms / 1000)
            fail_times = payload.get("fail_times")
            within = fail_times is None or job.attempts <= fail_times
            if payload.get("throw") and within:
                raise RuntimeError(f"job {job.id} threw on attempt {job.attempts}")
            if isinstance(payload.get("fail"), str) and within:
                raise JobFailed(payload["fail"])
            ok = True
        finally:
            emit("end", worker=worker.name, id=job.id, owner=job.owner, attempts=job.attempts, ok=ok)

    servers = os.environ.get("FENEC_SERVERS")  # a list, the primary first (the failover scenario)
    with Client(servers.split(",") if servers else os.environ["FENEC_URL"], timeout=timeout) as db:
        worker = Worker(db, os.environ["FENEC_QUEUE"], name=name,
                        batch=int(os.environ.get("FENEC_BATCH", 10)),
                        concurrency=int(os.environ.get("FENEC_CONCURRENCY", 1)),
                        lease=lease, wait=env_ms("FENEC_WAIT_MS", 30000),
                        heartbeat=int(heartbeat) / 1000 if heartbeat else None,
                        max_attempts=int(os.environ.get("FENEC_MAX_ATTEMPTS", 5)),
                        drain_timeout=env_ms("FENEC_DRAIN_MS", 30000),
                        backoff=lambda attempts: backoff_ms * attempts * attempts / 1000,
                        timeout=timeout, keep_done=os.environ.get("FENEC_KEEP_DONE") == "1",
                        on_event=on_event)
        with worker.handle_signals(signal.SIGTERM, hard=(signal.SIGINT,)):
            emit("ready", worker=worker.name, servers=db.servers)
            worker.run(handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
