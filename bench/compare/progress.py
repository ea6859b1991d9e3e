"""A progress bar on stderr, redrawn in place with a carriage return."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, out: TextIO = sys.stderr, width: int = 30) -> None:
        self.total, self.done, self.out, self.width = max(1, total), 0, out, width
        self.t0 = time.monotonic()
        self.last = ""

    def line(self, what: str) -> str:
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        mins, secs = divmod(int(time.monotonic() - self.t0), 60)
        return f"[{bar}] {self.done}/{self.total} {mins:02d}:{secs:02d} {what}"

    def show(self, what: str) -> None:
        text = self.line(what)
        pad = max(0, len(self.last) - len(text))
        self.out.write("\r" + text + " " * pad)
        self.out.flush()
        self.last = text

    def step(self, what: str = "") -> None:
        self.done = min(self.total, self.done + 1)
        self.show(what)

    def finish(self) -> None:
        self.out.write("\n")
        self.out.flush()
