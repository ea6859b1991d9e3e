"""Values: the field types, the one total order, truth, and time (conversion on write is
`convert.py`, compiled).

Internal forms (what a row dict holds):

    null -> None        bool -> bool          int -> int          float -> float (finite)
    text -> str         bytes -> bytes        timestamp -> Ts (an int subclass: epoch ms)
    geo -> (lon, lat) tuple of floats         [T] -> list          json -> JSON value, objects
    with their keys sorted (so answers write them sorted), timestamps turned to ISO text

`Ts` subclasses int so a timestamp compares with numbers by value (fenecql.md §3.4 rule 3)
and sorts in the same index as ints, while arithmetic can still tell it apart (§9.3).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from .errors import FenecError

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
JSON_DEPTH = 64


class Ts(int):
    """A timestamp: UTC epoch milliseconds."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Ts({int(self)})"


def kind_name(v: Any) -> str:
    """The kind a value is, as type errors name it."""
    if v is None:
        return "null"
    t = type(v)
    if t is bool:
        return "bool"
    if t is Ts:
        return "timestamp"
    if t is int:
        return "int"
    if t is float:
        return "float"
    if t is str:
        return "text"
    if t is bytes:
        return "bytes"
    if t is tuple:
        return "geo"
    if t is list:
        return "list"
    if t is dict:
        return "object"
    return t.__name__


def type_label(ftype: Any) -> str:
    if isinstance(ftype, tuple):
        return f"[{ftype[1]}]"
    return ftype


# ---------------------------------------------------------------- time

_ISO = re.compile(
    r"^\s*(-?\d{4,})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return y + (m <= 2), m, d


def parse_time(text: str) -> int | None:
    """ISO-8601 text -> epoch ms, or None when it does not parse."""
    m = _ISO.match(text)
    if not m:
        return None
    year = m.group(1)
    if len(year) > _YEAR_DIGITS:  # far past any timestamp, and int() refuses thousands of digits
        year = ("-" if year[0] == "-" else "") + "1" + "0" * _YEAR_DIGITS
    y, mo, d = int(year), int(m.group(2)), int(m.group(3))
    hh = int(m.group(4) or 0)
    mi = int(m.group(5) or 0)
    ss = int(m.group(6) or 0)
    frac = m.group(7) or ""
    if not (1 <= mo <= 12 and 1 <= d <= 31 and hh <= 23 and mi <= 59 and ss <= 59):
        return None
    if d > _month_days(y, mo):
        return None
    ms = int((frac + "000")[:3]) if frac else 0
    off = 0
    zone = m.group(8)
    if zone and zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        oh = int(digits[:2])
        om = int(digits[2:4]) if len(digits) > 2 else 0
        if oh > 23 or om > 59:
            return None
        off = sign * (oh * 60 + om) * 60_000
    days = _days_from_civil(y, mo, d)
    return ((days * 24 + hh) * 60 + mi) * 60_000 + ss * 1000 + ms - off


_YEAR_DIGITS = 12  # ±2.9×10^8 years is every timestamp: a year of more digits is out of range


def _month_days(y: int, m: int) -> int:
    if m == 2:
        leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
        return 29 if leap else 28
    return 30 if m in (4, 6, 9, 11) else 31


@functools.lru_cache(maxsize=8192)
def format_time(ms: int) -> str:
    """Epoch ms -> ISO-8601 UTC text, milliseconds left out when zero.

    Cached: a claim answers one run_at for all the rows it takes, and a queue's rows share few
    distinct times. A claim's `now() + 30000` is a new millisecond each time, so the text up to
    the second is cached apart: a miss then formats only the milliseconds."""
    secs, milli = divmod(int(ms), 1000)
    head = _second_text(secs)
    return f"{head}.{milli:03d}Z" if milli else head + "Z"


@functools.lru_cache(maxsize=4096)
def _second_text(secs: int) -> str:
    days, rest = divmod(secs, 86_400)
    y, mo, d = _civil_from_days(days)
    hh, rem = divmod(rest, 3600)
    mi, ss = divmod(rem, 60)
    ys = f"{y:04d}" if y >= 0 else f"-{-y:04d}"
    return f"{ys}-{mo:02d}-{d:02d}T{hh:02d}:{mi:02d}:{ss:02d}"


TS_MIN = -(2**63)
TS_MAX = 2**63 - 1


def make_ts(ms: int) -> Ts:
    if not TS_MIN <= ms <= TS_MAX:
        raise FenecError("type", "timestamp out of range")
    return Ts(ms)


# ---------------------------------------------------------------- paths into json


MISSING: Any = object()  # what `read_path` answers for an absent key when told to tell it from null


def read_path(v: Any, keys: Iterable[str], missing: Any = None) -> Any:
    """`v` followed through object keys (a json field's value and `payload.to`'s `("to",)`, or a
    token's claims and `$jwt.org.id`'s `("org", "id")`): `missing` where a key is absent or a step
    is not an object. Every path read goes through here; a claim's reader passes MISSING, since
    a claim that is absent and one that is null are not the same (access.md §3.2)."""
    for k in keys:
        if type(v) is not dict:
            return missing
        v = v.get(k, missing)
    return v


def read_target(doc: dict, target: str) -> Any:
    """A field or a path, written as text (`run_at`, `payload.to`), read from a row or document."""
    if "." not in target:
        return doc.get(target)
    name, *keys = target.split(".")
    return read_path(doc.get(name), keys)


# ---------------------------------------------------------------- answers


def answer_value(v: Any) -> Any:
    """Internal value -> the JSON value an answer carries."""
    t = type(v)
    if t is Ts:
        return format_time(v)
    if t is tuple:
        return list(v)
    if t is bytes:
        return list(v)
    if t is list:
        return [answer_value(x) for x in v]
    return v


# ---------------------------------------------------------------- the total order (§3.4)

_RANK = {type(None): 0, bool: 1, int: 2, float: 2, Ts: 2, str: 3, bytes: 3, list: 4, tuple: 4, dict: 5}


def rank(v: Any) -> int:
    return _RANK.get(type(v), 6)


def sort_key(v: Any) -> tuple:
    """A key under which Python's ordering is FenecQL's total order."""
    t = type(v)
    if v is None:
        return (0,)
    if t is bool:
        return (1, v)
    if t is int or t is float or t is Ts:
        return (2, v)
    if t is str:
        return (3, v)
    if t is bytes:
        return (3, v.decode("utf-8", "surrogateescape"))
    if t is list or t is tuple:
        return (4, tuple(sort_key(x) for x in v))
    if t is dict:  # members in key order, as objects keep them (§3.3): a parameter may come unsorted
        return (5, tuple(sorted((k if type(k) is str else repr(k), sort_key(x)) for k, x in v.items())))
    return (6, repr(v))


def equal(a: Any, b: Any) -> bool:
    """`=`: null equals null; kinds never mix (1 = true is false); numbers by value."""
    ta, tb = type(a), type(b)
    if ta is tb and ta is not list and ta is not dict and ta is not tuple:
        return a == b
    ra, rb = _RANK.get(ta, 6), _RANK.get(tb, 6)
    if ra != rb:
        return False
    if ra == 2:
        return a == b
    if ra == 3:
        return (a.encode("utf-8", "surrogatepass") if ta is str else a) == (
            b.encode("utf-8", "surrogatepass") if tb is str else b)
    return sort_key(a) == sort_key(b)


def compare(a: Any, b: Any) -> int:
    """Three-way comparison under the total order (null lowest)."""
    ta, tb = type(a), type(b)
    if ta is tb and (ta is int or ta is str or ta is float or ta is Ts):
        return (a > b) - (a < b)
    ka, kb = sort_key(a), sort_key(b)
    return (ka > kb) - (ka < kb)


def truthy(v: Any) -> bool:
    """§9.6: true, non-zero numbers, non-empty text/bytes/lists/objects."""
    if v is None or v is False:
        return False
    if v is True:
        return True
    t = type(v)
    if t is int or t is float or t is Ts:
        return v != 0
    if t is str or t is bytes or t is list or t is dict or t is tuple:
        return len(v) > 0
    return True


def hashable(v: Any) -> Any:
    """A hashable stand-in for a value (for line keys and hash indexes over paths)."""
    t = type(v)
    if t is list or t is tuple:
        return ("L", tuple(hashable(x) for x in v))
    if t is dict:
        return ("O", tuple((k, hashable(x)) for k, x in sorted(v.items())))
    if t is bool:
        return ("B", v)
    return v
