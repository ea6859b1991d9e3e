"""The fixed ceilings of the wire (http.md §1) and the parsing of the headers that have limits.

Limits refuse; they never truncate.
"""

from __future__ import annotations

from .errors import BODY_CEILING, HEAD_CEILING  # noqa: F401 (re-exported: one definition)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


# What a `Fenec-Wait` of more than 9 digits reads as: longer than any wait is held (whoever waits
# caps it to held/lines.py's MAX_WAIT_MS: its line for a claim, replication.py for a Fenec-After change).
BEYOND_ANY_WAIT_MS = 10**9


def parse_wait(raw: bytes) -> int | None:
    """`Fenec-Wait`: decimal milliseconds, surrounding spaces allowed; None when the value is not
    a non-negative integer. Not capped here: the one cap is where the wait's deadline is set."""
    digits = _digits(raw)
    if digits is None:
        return None
    # Any number of digits is a number of ms: never handed whole to int(), which refuses
    # 4 300 digits or more.
    return int(digits) if len(digits) <= 9 else BEYOND_ANY_WAIT_MS


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


# Past these a request is handled in a worker thread, so that the loop goes on answering the
# others (the GIL is handed back to it every switch interval). A parse's time grows with the text's
# bytes, so the text's limit bounds what one parse holds the loop for (bench/README.md, "Numbers
# the code's comments used to carry"); a claim's text (~150 bytes) is parsed once and cached, and
# never leaves the loop.
OFF_LOOP_BODY = 64 << 10
OFF_LOOP_TEXT = 2 << 10
# On the loop a statement may answer or write this many rows; one that would pass it is put back
# and run again in a worker thread with the command line's ceilings, as is one that would wait for
# the lock, held there by such a statement: the loop never waits for either.
LOOP_ROWS = 1_000
