"""Reading a request body's JSON with its integers kept exact (http.md §1, fenecql.md §2).

An integer is signed 64-bit wherever it is written: past the range, a literal in the text is a
400, and so is the same number in `params`, at any depth. orjson, the fast reader, does not say
so: it reads an integer past 64 bits as a float (`12345678901234567890123` became
`1.2345678901234568e+22`, `-9223372036854775809` a float that an int field took as the minimum)
or, up to 2^64 - 1, as an int the engine cannot hold. So a body with a run of 19 or more digits
(the only place such an integer can be; also a long fraction, or digits inside text) is read by
`json` instead, each integer checked as it is read; every other body goes to orjson as before.
The test is one pass over the bytes (`_long_digits`). A large body is searched a slice at a
time (`_SLICE`): one search of a whole large body held the GIL from its first byte to its last,
so the event loop stopped answering while a worker thread read it; between slices the
interpreter may switch threads, so no one search holds it for more than a slice's
(bench/README.md, "Numbers the code's comments used to carry").
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..values import INT_MAX, INT_MIN

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is optional
    orjson = None  # type: ignore[assignment]

# every digit read as "0", every other byte as " ": a run of 19 digits is then a run of 19 zeros,
# found by bytes.find (a C substring search), where the regex [0-9]{19} tries every start inside
# every 13-digit timestamp
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_RUN = b"0" * 19
_SHOWN = 24  # digits of a refused integer quoted in the error
_SLICE = 256 << 10  # bytes a search of a large body reads before the GIL can change hands


class OutOfRange(ValueError):
    """An integer past 64 bits: `str(e)` is the 400's message, as the text's literal gets."""


def _int64(s: str) -> int:
    digits = len(s) - (s[0] == "-")
    if digits > 19:  # past the range whatever the digits; never converted (int() refuses 4 300+)
        shown = s if len(s) <= _SHOWN else f"{s[:_SHOWN]}... ({digits} digits)"
        raise OutOfRange(f"integer {shown} is out of range (64-bit)")
    v = int(s)
    if not INT_MIN <= v <= INT_MAX:
        raise OutOfRange(f"integer {s} is out of range (64-bit)")
    return v


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # as orjson: NaN and Infinity are not numbers of JSON


def _finite(s: str) -> float:
    v = float(s)
    if math.isinf(v):  # as orjson: a number past a double's range is refused, not infinity
        raise ValueError(f"number is infinity when parsed as double: {s[:_SHOWN]}")
    return v


def _long_digits(raw: bytes) -> bool:
    """Whether `raw` holds a run of 19 or more digits; a large body slice by slice (`_SLICE`),
    each slice reaching 18 bytes into the next so that no run is missed at a seam."""
    n = len(raw)
    if n <= _SLICE:
        return raw.translate(_DIGITS_AS_ZEROS).find(_RUN) >= 0
    for at in range(0, n, _SLICE):
        if raw[at:at + _SLICE + 18].translate(_DIGITS_AS_ZEROS).find(_RUN) >= 0:
            return True
    return False


def plain(raw: bytes) -> bool:
    """Whether orjson reads every line of `raw` as `loads` would: orjson is there and no run of
    digits needs the exact path."""
    return orjson is not None and not _long_digits(raw)


def loads(raw: bytes, text: str) -> Any:
    """The JSON value of a body (`text` is `raw` decoded). Raises OutOfRange, or ValueError (and
    RecursionError) for what is not JSON."""
    if orjson is not None and not _long_digits(raw):
        return orjson.loads(text)
    return json.loads(text, parse_int=_int64, parse_float=_finite, parse_constant=_no_constant)
