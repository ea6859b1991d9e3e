"""The fixed ceilings of the wire (http.md §1) and the parsing of the headers that have limits.

Limits refuse; they never truncate.
"""

from __future__ import annotations

from ..held import MAX_WAIT_MS
from .errors import BODY_CEILING, HEAD_CEILING  # noqa: F401 (re-exported: one definition)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def parse_wait(raw: bytes) -> int | None:
    """`Fenec-Wait`: decimal milliseconds, surrounding spaces allowed, capped at 30 000.
    None when the value is not a non-negative integer."""
    digits = _digits(raw)
    if digits is None:
        return None
    # Any number of digits is a number of ms, capped: never handed whole to int(), which
    # refuses 4 300 digits or more (that escaped as a plain-text 500).
    return min(int(digits), MAX_WAIT_MS) if len(digits) <= 9 else MAX_WAIT_MS


def parse_length(raw: bytes) -> int | None:
    """`Content-Length`: decimal bytes. None when not a non-negative integer of at most 20
    digits (2^64 - 1, llhttp's own ceiling: anything longer is no length a body can have)."""
    digits = _digits(raw)
    return int(digits) if digits is not None and len(digits) <= 20 else None


def _digits(raw: bytes) -> bytes | None:
    """The decimal digits of a header value, leading zeros dropped; None when not digits."""
    text = raw.strip(b" \t")
    if not text or not text.isdigit():
        return None
    return text.lstrip(b"0") or b"0"
