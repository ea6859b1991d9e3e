"""The worker processes of `faults.py`: one `bash clients/<sdk>/fault-worker.sh` each, and their events.

A harness prints one JSON object per line on stdout for every event of its worker (`ready`, `claimed`,
`start`, `end`, `done`, `failed`, `dead`, `released`, `lost`, `retry`, `stopped`). The lines are read
on a thread per process into one `Events` log, in the order each process printed them; anything on a
line that is not such an object is kept with stderr, for the report of a failure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class Events:
    """Every event of every worker of a scenario, each with `worker_index` and `seq` (its line number)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.all: list[Event] = []

    def add(self, index: int, seq: int, event: Event) -> None:
        event["worker_index"] = index
        event["seq"] = seq
        with self.lock:
            self.all.append(event)

    def snapshot(self) -> list[Event]:
        with self.lock:
            return list(self.all)

    def count(self, kind: str, since_ms: float = 0.0, worker: int | None = None) -> int:
        return sum(1 for e in self.snapshot() if e.get("event") == kind and _t(e) >= since_ms
                   and (worker is None or e["worker_index"] == worker))

    def of(self, worker: int) -> list[Event]:
        return sorted((e for e in self.snapshot() if e["worker_index"] == worker), key=lambda e: e["seq"])


def _t(e: Event) -> float:
    t = e.get("t")
    return float(t) if isinstance(t, (int, float)) else 0.0


class WorkerProcess:
    """`bash fault-worker.sh` with cwd clients/<sdk>, in a process group of its own."""

    def __init__(self, index: int, script: Path, env: dict[str, str], events: Events, log_dir: Path) -> None:
        self.index = index
        self.name = env["FENEC_WORKER"]
        self.stderr_path = log_dir / f"{self.name}.stderr"
        self.other: list[str] = []
        with open(self.stderr_path, "w", encoding="utf-8") as err:
            self.proc = subprocess.Popen(["bash", str(script)], cwd=script.parent, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        self.reader = threading.Thread(target=self._read, args=(events,), daemon=True)
        self.reader.start()

    def _read(self, events: Events) -> None:
        assert self.proc.stdout is not None
        for seq, line in enumerate(self.proc.stdout):
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if isinstance(event, dict) and isinstance(event.get("event"), str):
                events.add(self.index, seq, event)
            elif line.strip():
                self.other.append(line.rstrip())

    def signal(self, sig: signal.Signals) -> None:
        """To the whole group: a harness that could not `exec` still passes it on to its worker."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout_s: float) -> int | None:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self.reader.join(5)
        return code

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.reader.join(5)

    def summary(self, events: Events) -> str:
        """This worker's event counts by type and its last events: what a failure report starts from."""
        mine = events.of(self.index)
        counts: dict[str, int] = {}
        for e in mine:
            counts[e["event"]] = counts.get(e["event"], 0) + 1
        last = " ".join(json.dumps({k: v for k, v in e.items() if k not in ("worker", "worker_index", "seq")})
                        for e in mine[-3:])
        code = self.proc.poll()
        state = "running" if code is None else f"exit {code}"
        return f"      {self.name} ({state}): {counts or 'no events'}; last: {last or '-'}"

    def tail(self, lines: int = 12) -> str:
        try:
            text = self.stderr_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            text = []
        rest = (self.other + text)[-lines:]
        return "\n".join(f"      {self.name}| {line}" for line in rest)


def deliver_sigint() -> None:
    """SIGINT (the hard stop) reaches the worker processes started after this; call it from the main thread.

    A process inherits an ignored SIGINT: a driver started as a shell's background job without job control
    has it ignored, and so would every worker. A Python, Node or Go worker handles it all the same, but a JVM
    keeps an inherited ignored SIGINT ignored whatever its program asks. A handler of this process's own
    (Python's usual KeyboardInterrupt) is reset to the default in a child that execs, so the workers get it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def wait_for(condition: Callable[[], bool], deadline_s: float, poll_s: float = 0.02) -> bool:
    """True once `condition()` holds; False if it still does not after `deadline_s`."""
    end = time.monotonic() + deadline_s
    while True:
        if condition():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(poll_s)
