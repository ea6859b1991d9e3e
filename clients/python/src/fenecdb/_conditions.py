"""Conditions: the three forms of `where`, `raw`, `or_`, `and_`, `not_` (clients.md R5-R10).

A condition is a small tree, checked when it is made (a wrong step raises at once, R22):

    Cmp(field, symbol, value)   field = $n, field is null, field in [$i, $j]
    Raw(text, params)           written as given, each `?` the next parameter
    Junction("and" | "or", members)
    Not(member)                 always `not (<member>)`

Before rendering, a junction of one member becomes that member and an empty one disappears;
a junction inside a junction of the other kind is wrapped in parentheses. Values are bound
as parameters in the order their placeholders stand in the text, left to right.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import BuilderError
from ._values import check_field, encode, show

# operator word or symbol -> the symbol the text always uses
OPERATORS: dict[str, str] = {
    "=": "=", "eq": "=",
    "!=": "!=", "ne": "!=", "neq": "!=",
    "<": "<", "lt": "<",
    "<=": "<=", "lte": "<=", "le": "<=",
    ">": ">", "gt": ">",
    ">=": ">=", "gte": ">=", "ge": ">=",
    "~": "~", "like": "~", "contains": "~",
    "has": "has",
    "in": "in",
}


class Params:
    """The parameter list of one statement; `add` hands back the value's placeholder."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[Any] = []

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def split_placeholders(who: str, text: object, params: tuple[Any, ...]) -> tuple[str, ...]:
    """`text` cut at each `?`, checked against the parameter count (R10, R16)."""
    if not isinstance(text, str):
        raise BuilderError(f"{who}() takes its text first: {show(text)}")
    pieces = tuple(text.split("?"))
    holes = len(pieces) - 1
    if holes > len(params):
        raise BuilderError(f"{who}(): more `?` placeholders than parameters")
    if holes < len(params):
        raise BuilderError(f"{who}(): too many parameters given")
    return pieces


def fill(pieces: tuple[str, ...], params: tuple[Any, ...], out: Params) -> str:
    text = pieces[0]
    for value, piece in zip(params, pieces[1:], strict=True):
        text += out.add(value) + piece
    return text


class Cond:
    """A condition: made by `raw`, `or_`, `and_`, `not_`, or from a dict by `where`."""

    __slots__ = ()

    def render(self, out: Params, parent: str | None = None) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def simplified(self) -> Cond | None:
        return self


class Cmp(Cond):
    __slots__ = ("field", "symbol", "value")

    def __init__(self, field: str, symbol: str, value: Any) -> None:
        self.field = field
        self.symbol = symbol
        self.value = value

    def render(self, out: Params, parent: str | None = None) -> str:
        if self.value is None:
            return f"{self.field} is null" if self.symbol == "=" else f"{self.field} is not null"
        if self.symbol == "in":
            return f"{self.field} in [" + ", ".join(out.add(v) for v in self.value) + "]"
        return f"{self.field} {self.symbol} {out.add(self.value)}"


class Raw(Cond):
    __slots__ = ("pieces", "params")

    def __init__(self, text: str, *params: Any) -> None:
        self.pieces = split_placeholders("raw", text, params)
        self.params = tuple(encode(p) for p in params)

    def render(self, out: Params, parent: str | None = None) -> str:
        return fill(self.pieces, self.params, out)


class Junction(Cond):
    __slots__ = ("kind", "members")

    def __init__(self, kind: str, members: tuple[Cond, ...]) -> None:
        self.kind = kind
        self.members = members

    def simplified(self) -> Cond | None:
        kept = tuple(m for m in (c.simplified() for c in self.members) if m is not None)
        if not kept:
            return None
        if len(kept) == 1:
            return kept[0]
        return Junction(self.kind, kept)

    def render(self, out: Params, parent: str | None = None) -> str:
        text = f" {self.kind} ".join(m.render(out, self.kind) for m in self.members)
        return f"({text})" if parent is not None and parent != self.kind else text


class Not(Cond):
    __slots__ = ("member",)

    def __init__(self, member: Cond) -> None:
        self.member = member

    def simplified(self) -> Cond | None:
        inner = self.member.simplified()
        return None if inner is None else Not(inner)

    def render(self, out: Params, parent: str | None = None) -> str:
        return f"not ({self.member.render(out, None)})"


def compare(field: object, op: object, value: Any, *, in_map: str | None = None) -> Cond:
    """`where(field, op, value)`: the operator is checked before the field name (R5)."""
    symbol = OPERATORS.get(op) if isinstance(op, str) else None
    if symbol is None:
        suffix = f" (field: {in_map})" if in_map is not None else ""
        raise BuilderError(f"unknown operator `{show(op)}`{suffix}")
    name = check_field(field)
    if value is None:
        if symbol not in ("=", "!="):
            raise BuilderError(f"`{symbol}` cannot be used with null (field: {name})")
        return Cmp(name, symbol, None)
    if symbol == "in":
        if not isinstance(value, (list, tuple)):
            raise BuilderError(f"`in` expects an array (field: {name})")
        if not value:
            raise BuilderError(f"`in` does not accept an empty array (field: {name})")
        return Cmp(name, "in", [encode(v) for v in value])
    return Cmp(name, symbol, encode(value))


def operator_map(field: object, spec: Mapping[Any, Any]) -> Cond:
    """A field's operator map: each key an operator word or symbol, or `not` (R5, R6)."""
    shown = show(field)
    if not spec:
        raise BuilderError(f"empty condition object (field: {shown})")
    members: list[Cond] = []
    for key, value in spec.items():
        if key == "not":
            if isinstance(value, Mapping):
                members.append(Not(operator_map(field, value)))
            else:
                members.append(compare(field, "!=", value))
        else:
            members.append(compare(field, key, value, in_map=shown))
    return Junction("and", tuple(members))


def field_condition(field: object, spec: Any) -> Cond:
    """`where(field, spec)`: equality, or the field's operator map when `spec` is a dict."""
    if isinstance(spec, Mapping):
        return operator_map(field, spec)
    return compare(field, "=", spec)


def object_condition(fields: Mapping[Any, Any]) -> Cond:
    """`where({...})`: each field's value, null or operator map, joined with `and`."""
    return Junction("and", tuple(field_condition(f, spec) for f, spec in fields.items()))


def as_condition(value: object) -> Cond:
    if isinstance(value, Cond):
        return value
    if isinstance(value, Mapping):
        return object_condition(value)
    raise BuilderError(f"a condition is a dict, or made by raw(), or_(), and_() or not_(): {show(value)}")


def conditions_from(args: tuple[Any, ...]) -> Cond:
    """The three forms of `where` and `or_where`."""
    if len(args) == 1:
        return as_condition(args[0])
    if len(args) == 2:
        return field_condition(args[0], args[1])
    if len(args) == 3:
        return compare(args[0], args[1], args[2])
    raise TypeError(f"where takes 1, 2 or 3 arguments ({len(args)} given)")


def raw(text: str, *params: Any) -> Cond:
    """A condition written as given; each `?` is the next parameter (R10)."""
    return Raw(text, *params)


def or_(*conditions: Any) -> Cond:
    return Junction("or", tuple(as_condition(c) for c in conditions))


def and_(*conditions: Any) -> Cond:
    return Junction("and", tuple(as_condition(c) for c in conditions))


def not_(condition: Any) -> Cond:
    return Not(as_condition(condition))
