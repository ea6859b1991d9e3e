"""The values' operators the compiled closures call (compile.py): arithmetic (fenecql.md §9.3),
comparisons across kinds (§3.4, §9.4), points (§12) and time buckets (§9.8).

Each takes values as they are stored (values.py) and answers a value, or raises `FenecError`
(`query` for a wrong use, `type` for kinds that do not go together, `Overflow` past 64 bits).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

from .. import convert as C
from .. import values as V
from ..errors import FenecError, Overflow
from ..ql import ast as A

EARTH_R = 6_372_797.56
DUR_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def qerr(msg: str) -> FenecError:
    return FenecError("query", msg)


def terr(msg: str) -> FenecError:
    return FenecError("type", msg)


# ---------------------------------------------------------------- arithmetic (§9.3)

def _num(v: Any) -> bool:
    t = type(v)
    return t is int or t is float


def arith(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        r = _numbers(op, a, b, _int_div, _int_mod)
        if not V.INT_MIN <= r <= V.INT_MAX:
            raise Overflow("integer overflow: the result does not fit in 64 bits")
        return r
    if ta is V.Ts or tb is V.Ts:
        return _ts_arith(op, a, b)
    if (ta is int or ta is float) and (tb is int or tb is float):
        try:
            fa, fb = float(a), float(b)
        except OverflowError:
            raise terr("integer too large to mix with a float") from None
        r = _numbers(op, fa, fb, operator.truediv, _float_mod)
        if not math.isfinite(r):
            raise terr("the result is not a finite number")
        return r
    if ta is str and tb is str and op == "+":
        return a + b
    raise terr(f"cannot apply `{op}` to {V.kind_name(a)} and {V.kind_name(b)}")


_SAME_FOR_EVERY_KIND = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _numbers(op: str, a: Any, b: Any, div: Callable[[Any, Any], Any], mod: Callable[[Any, Any], Any]) -> Any:
    """`a op b` for two ints or two floats: `+ - *` as Python has them, `/` and `%` as each kind's
    `div` and `mod` say, past a zero divisor, refused for both."""
    same = _SAME_FOR_EVERY_KIND.get(op)
    if same is not None:
        return same(a, b)
    if b == 0:
        raise terr("division by zero")
    return div(a, b) if op == "/" else mod(a, b)


def _int_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)  # truncated toward zero, as in SQL and C
    return q if (a >= 0) == (b >= 0) else -q


def _int_mod(a: int, b: int) -> int:
    r = abs(a) % abs(b)  # the sign of the dividend
    return r if a >= 0 else -r


def _float_mod(a: float, b: float) -> float:
    try:
        return math.fmod(a, b)
    except ValueError:  # an infinite left side (only a caller in process can send one)
        raise terr("the result is not a finite number") from None


def _ts_arith(op: str, a: Any, b: Any) -> Any:
    ta, tb = type(a), type(b)
    if ta is V.Ts and tb is V.Ts:
        if op == "-":
            return C.check_int(int(a) - int(b))  # from the first to the last moment is past 64 bits
        raise terr(f"cannot apply `{op}` to timestamp and timestamp")
    if ta is V.Ts:
        other = b
        if op not in "+-":
            raise terr(f"cannot apply `{op}` to timestamp and {V.kind_name(b)}")
    else:
        other = a
        if op != "+":
            raise terr(f"cannot apply `{op}` to {V.kind_name(a)} and timestamp")
    t = type(other)
    if t is float:
        if other != int(other) if math.isfinite(other) else True:
            raise terr("a timestamp moves by whole milliseconds")
        other = int(other)
    elif t is not int:
        raise terr(f"cannot apply `{op}` to timestamp and {V.kind_name(other)}")
    base = int(a) if ta is V.Ts else int(b)
    r = base + other if op == "+" else base - other
    return V.make_ts(r)


# ---------------------------------------------------------------- comparisons (§3.4, §9.4)

def _ts_text(a: Any, b: Any) -> tuple[Any, Any]:
    """A timestamp against text: the text is read as a time when it parses."""
    if type(a) is V.Ts and type(b) is str:
        ms = V.parse_time(b)
        if ms is not None:
            return a, ms
    elif type(b) is V.Ts and type(a) is str:
        ms = V.parse_time(a)
        if ms is not None:
            return ms, b
    return a, b


def eq(a: Any, b: Any) -> bool:
    ta = type(a)
    if ta is type(b) and (ta is int or ta is str or ta is V.Ts or ta is float):
        return a == b
    if a is None or b is None:
        return a is b
    a, b = _ts_text(a, b)
    return V.equal(a, b)


def cmp3(a: Any, b: Any) -> int:
    a, b = _ts_text(a, b)
    return V.compare(a, b)


def lt(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    ta = type(a)
    if ta is type(b) and (ta is int or ta is V.Ts or ta is float or ta is str):
        return a < b
    return cmp3(a, b) < 0


def le(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    ta = type(a)
    if ta is type(b) and (ta is int or ta is V.Ts or ta is float or ta is str):
        return a <= b
    return cmp3(a, b) <= 0


def gt(a: Any, b: Any) -> bool:
    return lt(b, a)


def ge(a: Any, b: Any) -> bool:
    return le(b, a)


def ne(a: Any, b: Any) -> bool:
    return not eq(a, b)


CMP = {"=": eq, "!=": ne, "<": lt, "<=": le, ">": gt, ">=": ge}


# ---------------------------------------------------------------- points (§12)

def distance(a: Any, b: Any) -> float | None:
    if a is None or b is None:
        return None
    p = C.to_point(a) if type(a) is not tuple else a
    q = C.to_point(b) if type(b) is not tuple else b
    return haversine(p[0], p[1], q[0], q[1])


def haversine(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    p1 = math.radians(lat1)
    p2 = math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_R * math.asin(min(1.0, math.sqrt(h)))


def within(p: Any, box: Any) -> bool:
    if p is None or box is None:
        return False
    pt = C.to_point(p) if type(p) is not tuple else p
    if type(box) not in (list, tuple) or len(box) != 4 or not all(_num(x) for x in box):
        raise terr("within takes a box [west, south, east, north]")
    w, s, e, n = box
    lon, lat = pt
    if not s <= lat <= n:
        return False
    if w <= e:
        return w <= lon <= e
    return lon >= w or lon <= e


# ---------------------------------------------------------------- bucket (§9.8)

_INTERVAL = re.compile(r"\s*([0-9]+)(ms|s|m|h|d|w|mo|y)\s*")


def interval(v: Any) -> tuple[int, str]:
    """An interval: (n, unit) with unit in ms s m h d w mo y, n above zero."""
    if isinstance(v, A.Duration):
        n, unit = v.n, v.unit
    elif type(v) is int or (type(v) is float and math.isfinite(v) and v == int(v)):
        n, unit = int(v), "ms"
    elif type(v) is str:
        m = _INTERVAL.fullmatch(v[:64])
        if m is None or len(v) > 64:
            raise terr(f"bucket takes an interval such as 15m or a number of ms, found text {v[:64]!r}")
        n, unit = int(m.group(1)), m.group(2)
    else:
        raise terr(f"bucket takes an interval such as 15m or a number of ms, found {V.kind_name(v)}")
    if n <= 0:
        raise terr(f"bucket takes an interval above zero, found {n}{unit}")
    return n, unit


def bucket(t: Any, iv: tuple[int, str]) -> Any:
    if t is None:
        return None
    tt = type(t)
    if tt is not V.Ts and tt is not int:
        raise terr(f"bucket takes a timestamp or epoch ms, found {V.kind_name(t)}")
    n, unit = iv
    ms = int(t)
    if unit in DUR_MS and unit != "w":
        size = n * DUR_MS[unit]
        r = ms - ms % size
    elif unit == "w":
        size = n * DUR_MS["w"]
        monday = 4 * 86_400_000  # 1970-01-05 was a Monday
        r = ms - (ms - monday) % size
    else:
        days = ms // 86_400_000
        y, m, _ = V._civil_from_days(days)
        months = (y - 1970) * 12 + (m - 1)
        step = n * (12 if unit == "y" else 1)
        start = months - months % step
        yy, mm = 1970 + start // 12, start % 12 + 1
        r = V._days_from_civil(yy, mm, 1) * 86_400_000
    if tt is V.Ts:
        return V.make_ts(r)  # a bucket far wider than the time may start past the 64-bit range
    return C.check_int(r)
