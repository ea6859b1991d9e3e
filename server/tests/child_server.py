"""A `fenec-server` child process for the end-to-end tests that start servers of their own
(test_replication*.py here, the failover tests in server/tests_cluster).

It runs `python -m fenecdb_server.cli` (the `fenec-server` entry point, on the sources this
interpreter imports) with `--http <http>` and the arguments given, gathers its stderr in `lines`
and reads its port from its `listening on` line (`--http <host>:0` lets it pick one). `prefix` runs
it through another command that ends by exec'ing it, so the process is the server's own and its
signals reach the server (the failover tests' `ip netns exec <namespace>`). `spawn` starts it again
on the same arguments: a restart on its file.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
from typing import Any, Self

START_S = 60.0


class Server:
    """A child server; `lines` gathers its stderr, `ready` waits until it listens."""

    def __init__(self, *argv: str, http: str = "127.0.0.1:0", prefix: tuple[str, ...] = ()) -> None:
        self.host, port = http.rsplit(":", 1)
        self.given_port = self.port = int(port)  # a given port is kept across restarts: clients may use it
        self.argv = [*prefix, sys.executable, "-m", "fenecdb_server.cli", "--http", http, *argv]
        self.lines: list[str] = []
        self.spawn()

    def spawn(self) -> None:
        self.port = self.given_port
        self.listening = False
        self._ready = threading.Event()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, args=(self.proc, self._ready), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if "listening on: http://" in line and not ready.is_set():
                self.port = int(line.split("listening on: http://", 1)[1].split()[0].rsplit(":", 1)[1])
                self.listening = True
                ready.set()
        ready.set()

    def ready(self) -> Self:
        self._ready.wait(START_S)
        assert self.listening, "the server did not start:\n" + "\n".join(self.lines)
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def running(self) -> bool:
        return self.proc.poll() is None

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                timeout: float = 30.0) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers=headers or {})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(raw) if raw else None
        finally:
            conn.close()

    def query(self, text: str, params: list | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
        body: dict[str, Any] = {"query": text}
        if params is not None:
            body["params"] = params
        return self.request("POST", "/query", body, headers)

    def batch(self, texts: list[str]) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("POST", "/batch", body="\n".join(json.dumps({"query": t}) for t in texts).encode())
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
        finally:
            conn.close()

    def exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """SIGTERM (a paused server is resumed first, to hear it); killed if it outlives 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL (a paused server too), waited for."""
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(10)
