"""The fixed ceilings of the wire (http.md §1) and the parsing of the headers that have limits.

Limits refuse; they never truncate.
"""

from __future__ import annotations

from .errors import BODY_CEILING, HEAD_CEILING  # noqa: F401 (re-exported: one definition)

MAX_WAIT_MS = 30_000
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def parse_wait(raw: bytes) -> int | None:
    """`Fenec-Wait`: decimal milliseconds, surrounding spaces allowed, capped at 30 000.
    None when the value is not a non-negative integer."""
    text = raw.strip(b" \t")
    if not text or not text.isdigit():
        return None
    return min(int(text), MAX_WAIT_MS)


def parse_length(raw: bytes) -> int | None:
    text = raw.strip(b" \t")
    if not text or not text.isdigit():
        return None
    return int(text)
