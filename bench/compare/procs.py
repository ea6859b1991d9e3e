"""Starting a server on loopback and stopping it: a free port, a wait until it answers, a stop that kills only
the process we started (and its own children).

Every server is started in a session of its own, so a Ctrl-C at the terminal reaches the harness alone, which
then stops each server it started, in order; and with Linux's parent-death signal, so a harness killed outright
(SIGKILL, an OOM kill) still takes its servers with it."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


class Missing(Exception):
    """A peer that is not installed; the message says how to install it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def need(exe: str, install: str) -> str:
    path = shutil.which(exe)
    if not path:
        raise Missing(f"{exe} not found; install it with: {install}")
    return path


_PR_SET_PDEATHSIG = 1
_prctl: Any = None
if sys.platform.startswith("linux"):
    try:  # resolved here, before any fork: the child only calls it
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        _prctl = None


def _die_with(parent: int, sig: int) -> Callable[[], None] | None:
    if _prctl is None:
        return None

    def child() -> None:
        _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the harness died before the line above
            os._exit(1)

    return child


def spawn(cmd: list[str], *, die_signal: int = signal.SIGTERM, **kw: Any) -> subprocess.Popen:
    """Popen in a session of its own, sent `die_signal` if the harness dies; stdin is /dev/null."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with(os.getpid(), die_signal), **kw)


def run(cmd: list[str], timeout: float, **kw: Any) -> None:
    """A setup command (initdb), to its end: bounded, killed with the harness, its output in the error."""
    proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:  # a timeout, a Ctrl-C: the command and what it started (initdb runs postgres)
        _kill_group(proc)
        raise
    if proc.returncode:
        tail = out.decode(errors="replace").strip()[-2000:]
        raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}: {tail}")


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen | None, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start in {timeout:.0f} s")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the process group of a server not yet reaped (so its group id cannot have been reused)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """`sig` (the server's clean shutdown), then after `timeout` SIGKILL to the server's whole process group —
    sent while the server is not yet reaped, so the group id cannot have been reused."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
        except KeyboardInterrupt:  # a second Ctrl-C while stopping: no more waiting
            _kill_group(proc)
            raise
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
