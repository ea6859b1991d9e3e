"""Names and values: the only two things the builder takes from its caller (clients.md R3, R14).

Names go into the text, so each is checked against FenecQL's identifier rule here; this is
the one place an injection could get through. Values never go into the text: each becomes a
parameter, converted to the JSON value the wire carries (a date-time as UTC ISO text to the
millisecond, a float32 array as a plain list).
"""

from __future__ import annotations

import array
import datetime as _dt
import json
import math
import unicodedata
from collections.abc import Mapping
from typing import Any

from ._errors import BuilderError

MAX_SAFE = 2**53 - 1


def _is_letter(ch: str) -> bool:
    # Unicode's Alphabetic property: letters, letter numbers, and the marks that belong
    # to a letter (Devanagari vowel signs are Mc/Mn and Alphabetic).
    return ch.isalpha() or unicodedata.category(ch) == "Nl"


def _is_continue(ch: str) -> bool:
    if ch == "_" or _is_letter(ch):
        return True
    cat = unicodedata.category(ch)
    return cat[0] == "N" or cat in ("Mn", "Mc")


def is_identifier(name: object) -> bool:
    if not isinstance(name, str) or not name:
        return False
    first = name[0]
    if not (first == "_" or _is_letter(first)):
        return False
    return all(_is_continue(ch) for ch in name[1:])


def quote(value: object) -> str:
    """A name as JSON would quote it, the way a refusal shows it."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(value), ensure_ascii=False)


def check_collection(name: object) -> str:
    if not is_identifier(name):
        raise BuilderError(f"invalid collection name: {quote(name)}")
    assert isinstance(name, str)
    return name


def check_field(name: object) -> str:
    """A field is an identifier or a path of identifiers joined by single dots."""
    if not isinstance(name, str) or not all(is_identifier(part) for part in name.split(".")):
        raise BuilderError(f"invalid field name: {quote(name)}")
    return name


def show(value: object) -> str:
    """A value inside a refusal's text, written the way JavaScript's String() writes it,
    so that every SDK's message is the same (`-3`, `1.5`, `null`, `true`, `x`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join("" if v is None else show(v) for v in value)
    return str(value)


def as_json_text(value: object) -> str:
    """A value inside a refusal's text, as JSON.stringify writes it (`inc() takes a number: "1"`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "null"
    try:
        return json.dumps(encode(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return quote(str(value))


def whole(value: object) -> int | None:
    """`value` as a whole number from 0 to 2^53-1, or None when it is not one.
    An integral float counts (JSON and JavaScript do not tell 5 from 5.0); a bool does not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    else:
        return None
    return n if 0 <= n <= MAX_SAFE else None


def iso_utc(moment: _dt.datetime | _dt.date) -> str:
    """YYYY-MM-DDTHH:MM:SS.mmmZ; a naive time is taken as UTC, a date as its midnight UTC."""
    if not isinstance(moment, _dt.datetime):
        moment = _dt.datetime(moment.year, moment.month, moment.day)
    if moment.tzinfo is not None:
        moment = moment.astimezone(_dt.UTC).replace(tzinfo=None)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def encode(value: Any) -> Any:
    """A caller's value as the JSON value of its parameter."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (_dt.datetime, _dt.date)):
        return iso_utc(value)
    if isinstance(value, array.array):
        return [float(x) if value.typecode in "fd" else x for x in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, without importing numpy
    if callable(tolist):
        return encode(tolist())
    raise BuilderError(f"cannot send a value of type {type(value).__name__} as a parameter")
