"""Conversion on write: a value written to a field of a type, as its rows hold it (the internal
forms `values.py` lists), or a 400 type error.

Apart from `values.py` so that it is compiled with the engine (server/setup.py): every put runs
each field of each document through here, and `values.py` cannot be (its `Ts` subclasses `int`,
which mypyc does not build).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .errors import FenecError, Overflow
from .values import INT_MAX, INT_MIN, JSON_DEPTH, Ts, format_time, kind_name, make_ts, parse_time, type_label


def _terr(ftype: Any, v: Any) -> FenecError:
    return FenecError("type", f"expected {type_label(ftype)}, found {kind_name(v)}")


def to_json_value(v: Any, depth: int = 0) -> Any:
    """Convert to a `json` field's value: sorted object keys, timestamps as text.

    `depth` is how many objects and lists hold `v`: each of them is one level (fenecql.md §18),
    whatever the innermost holds, so the 65th object or list is refused even when empty."""
    t = type(v)
    if (t is dict or t is list or t is tuple) and depth >= JSON_DEPTH:
        raise FenecError("type", f"json nested deeper than {JSON_DEPTH} levels")
    if v is None or t is bool or t is str:
        return v
    if t is int:  # 64-bit, as everywhere (an in-process caller's 2**70 too)
        if INT_MIN <= v <= INT_MAX:
            return v
        raise Overflow("integer out of range (64-bit)")
    if t is float:
        if not math.isfinite(v):
            raise FenecError("type", "expected json, found a non-finite number")
        return v
    if t is Ts:
        return format_time(v)
    if t is dict:
        for k in v:
            if type(k) is not str:  # only a caller in process can send one: JSON keys are text
                raise FenecError("type", f"expected json, found an object key of kind {kind_name(k)}")
        return {k: to_json_value(v[k], depth + 1) for k in sorted(v)}
    if t is list:
        return [to_json_value(x, depth + 1) for x in v]
    if t is tuple:
        return [to_json_value(x, depth + 1) for x in v]
    raise _terr("json", v)


def check_int(v: int) -> int:
    if not INT_MIN <= v <= INT_MAX:
        raise Overflow("integer out of range (64-bit)")
    return v


def coerce(v: Any, ftype: Any) -> Any:
    """Convert a value written to a field of `ftype`, or raise a 400 type error."""
    if v is None:
        return None
    t = type(v)
    if ftype == "timestamp":
        if t is Ts:
            return v
        if t is int:
            return make_ts(v)
        if t is str:
            ms = parse_time(v)
            if ms is None:
                raise FenecError("type", f"expected timestamp, found text that is not a time: {v[:64]!r}")
            return make_ts(ms)
        raise _terr(ftype, v)
    if ftype == "text":
        if t is str:
            return v
        if t is Ts:
            return format_time(v)
        raise _terr(ftype, v)
    if ftype == "int":
        if t is int:
            return check_int(v)
        if t is Ts:
            return int(v)
        if t is float and math.isfinite(v) and v == int(v):
            return check_int(int(v))
        raise _terr(ftype, v)
    if ftype == "float":
        if t is float:
            if not math.isfinite(v):
                raise _terr(ftype, v)
            return v
        if t is int or t is Ts:
            try:
                return float(v)
            except OverflowError:
                raise FenecError("type", "expected float, found an int too large for a float") from None
        raise _terr(ftype, v)
    if ftype == "bool":
        if t is bool:
            return v
        raise _terr(ftype, v)
    if ftype == "json":
        if t is bytes:
            raise _terr(ftype, v)
        return to_json_value(v)
    if ftype == "bytes":
        if t is bytes:
            return v
        if t is str:
            return v.encode("utf-8", "surrogatepass")
        raise _terr(ftype, v)
    if ftype == "geo":
        return to_point(v)
    if isinstance(ftype, tuple):  # ("list", T)
        if t is not list and t is not tuple:
            raise _terr(ftype, v)
        inner = ftype[1]
        return [coerce(x, inner) for x in v]
    raise FenecError("type", f"unknown type {ftype}")


def same(v: Any) -> Any:
    """The conversion of a value known to be of its field's type already."""
    return v


def coercer(ftype: Any) -> Callable[[Any], Any]:
    """`coerce` for one field type, its commonest case tested first and the chain of type names
    skipped: what a picking write converts once per row (a claim's `attempts + 1`)."""
    if ftype == "int":
        def to_int(v: Any) -> Any:
            if type(v) is int and INT_MIN <= v <= INT_MAX:
                return v
            return coerce(v, "int")
        return to_int
    if ftype == "timestamp":
        def to_ts(v: Any) -> Any:
            t = type(v)
            if t is Ts:
                return v
            return make_ts(v) if t is int else coerce(v, "timestamp")
        return to_ts
    if ftype == "text":
        def to_text(v: Any) -> Any:
            return v if type(v) is str else coerce(v, "text")
        return to_text
    if ftype == "json":
        return to_json_flat
    return lambda v: coerce(v, ftype)


def to_json_flat(v: Any) -> Any:
    """`coerce(v, "json")`, an object of text keys and plain values (a job's typical payload) read
    in one loop: its keys sorted, no call per value. Anything else goes the general way."""
    if type(v) is dict:
        for k, x in v.items():
            t = type(x)
            if type(k) is not str or not (t is str or x is None or t is bool
                                          or (t is int and INT_MIN <= x <= INT_MAX)
                                          or (t is float and math.isfinite(x))):
                return coerce(v, "json")
        return {k: v[k] for k in sorted(v)}
    return coerce(v, "json")


def to_point(v: Any) -> tuple[float, float]:
    if type(v) not in (list, tuple) or len(v) != 2:
        raise FenecError("type", f"expected geo, found {kind_name(v)}: a point is [lon, lat]")
    lon, lat = v
    for x in (lon, lat):
        if type(x) not in (int, float) or isinstance(x, bool):
            raise FenecError("type", f"expected geo, found {kind_name(x)} in a point")
        if type(x) is float and not math.isfinite(x):
            raise FenecError("type", "expected geo, found a non-finite number in a point")
    if not (-180 <= lon <= 180 and -90 <= lat <= 90):
        raise FenecError("type", f"point out of range: lon must be -180..180 and lat -90..90, "
                                 f"found [{_short(lon)}, {_short(lat)}]")
    return (float(lon), float(lat))


def _short(x: int | float) -> str:
    """A number for a message: an int of thousands of digits is not spelled out (nor can be)."""
    if type(x) is int and not -10**20 < x < 10**20:
        return f"an int of {x.bit_length()} bits"
    return str(x)
