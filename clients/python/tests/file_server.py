"""A `fenec-server` on a file, on a loopback port of its own, that a test can stop and start again
on the same file and port (the restart a worker must live through)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

SERVER = Path(sys.executable).with_name("fenec-server")
LISTENING = re.compile(r"listening on: (http://\S+)")


def launch(*flags: str, timeout: float, cwd: Path | None = None) -> tuple[subprocess.Popen[str], str, threading.Thread]:
    """`fenec-server` with `flags`, its log read by a thread: (the process, the URL it listens on, the
    reader, which ends once the process does). Raises RuntimeError when no URL came within `timeout`."""
    proc = subprocess.Popen([str(SERVER), *flags], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            m = LISTENING.search(line)
            if m and not found:
                found.append(m.group(1).rstrip("/"))
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(timeout)
    if not found:
        proc.kill()
        proc.wait()
        raise RuntimeError("fenec-server did not start")
    return proc, found[0], reader


def end(proc: subprocess.Popen[str], timeout: float) -> None:
    """Stop the server (SIGTERM, then SIGKILL past `timeout`) and wait for it."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class FileServer:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc, url, self.reader = launch("--file", str(self.path), "--http", f"127.0.0.1:{self.port}",
                                             "--sync", "always", timeout=60)
        self.port = int(url.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.proc is not None:
            end(self.proc, 30)
            self.reader.join(30)  # the pipe's end is read once the server is gone
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            self.proc = None
