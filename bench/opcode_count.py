"""The bytecodes a call runs: `sys.settrace` with opcode events, from the call to its return.

Timings drift with a machine's neighbours; the bytecodes a path runs do not, so the `*_bytecodes.py`
scripts count them (on the sources: compiled modules run none). `traced(fn, *args)` calls `fn`
itself, so no frame of ours is counted: a count taken through it is the call's alone.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


class Count:
    """What one traced call ran: its opcodes, its Python calls, and the opcodes per `file:function`."""

    def __init__(self) -> None:
        self.ops = 0
        self.calls = 0
        self.where: Counter[str] = Counter()


def traced(fn: Callable[..., T], *args: Any) -> tuple[T, Count]:
    """`fn(*args)`'s answer, and what it ran."""
    count = Count()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            count.calls += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            count.ops += 1
            count.where[f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"] += 1
        return tracer

    sys.settrace(tracer)
    try:
        answer = fn(*args)
    finally:
        sys.settrace(None)
    return answer, count
