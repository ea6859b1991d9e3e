"""A `fenec-server` on a file, on a loopback port of its own, that a test can stop and start again
on the same file and port (the restart a worker must live through)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

SERVER = Path(sys.executable).with_name("fenec-server")
LISTENING = re.compile(r"listening on: http://[^:/]+:(\d+)")


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
        proc = subprocess.Popen([str(SERVER), "--file", str(self.path), "--http", f"127.0.0.1:{self.port}",
                                 "--sync", "always"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        found: list[int] = []
        ready = threading.Event()

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                m = LISTENING.search(line)
                if m and not found:
                    found.append(int(m.group(1)))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        ready.wait(60)
        if not found:
            proc.kill()
            raise RuntimeError("fenec-server did not start")
        self.port = found[0]
        self.proc = proc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.reader.join(30)  # the pipe's end is read once the server is gone
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            self.proc = None
