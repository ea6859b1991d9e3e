"""The immutable query builder: a chain of steps becomes one FenecQL statement and its
parameters (clients.md §2, §5 R1-R22).

Every step hands back a new query and leaves the old one untouched, so one base query can be
shared by many chains, threads or tasks. A wrong step raises `BuilderError` at that step, with
the exact message of the text rules, and nothing is sent. The statement shapes (R1):

    get <c>[ select <list>][ where <cond>][ order <keys>][ limit <n>][ offset <n>][ require <n>][ count]
    put <c> <doc>|[<doc>, ...][ require <n>]
    set <c> <doc>[ where <cond>][ order <keys>][ limit <n>][ returning <list>|*][ require <n>]
    del <c>[ where <cond>][ order <keys>][ limit <n>][ returning <list>|*][ require <n>]

This module writes text only. The endpoints that send it live on the bound queries of
`_client` (`Query` for `Client`, `AsyncQuery` for `AsyncClient`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Self

from ._conditions import Cond, Junction, Params, conditions_from, fill, split_placeholders
from ._errors import BuilderError
from ._values import as_json_text, check_collection, check_field, encode, show, whole

Statement = tuple[str, list[Any]]
Returning = bool | str | Sequence[str] | None


class Expr:
    """A computed value in a document: the text as given, each `?` the next parameter (R16)."""

    __slots__ = ("pieces", "params")

    def __init__(self, text: str, *params: Any) -> None:
        self.pieces = split_placeholders("expr", text, params)
        self.params = tuple(encode(p) for p in params)

    def __repr__(self) -> str:
        return f"expr({'?'.join(self.pieces)!r}, {', '.join(map(repr, self.params))})"


class Inc:
    """`f: coalesce(f, 0) + $n` in an update, so a null counts from 0 (R16)."""

    __slots__ = ("by",)

    def __init__(self, by: int | float = 1) -> None:
        if isinstance(by, bool) or not isinstance(by, (int, float)) or not math.isfinite(by):
            raise BuilderError(f"inc() takes a number: {as_json_text(by)}")
        self.by = by

    def __repr__(self) -> str:
        return f"inc({self.by!r})"


def expr(text: str, *params: Any) -> Expr:
    """A computed value for a document: `expr("now() + ?", 30000)`."""
    return Expr(text, *params)


def inc(by: int | float = 1) -> Inc:
    """An increment for an update: `{"attempts": inc(1)}`."""
    return Inc(by)


def _count_option(name: str, value: object) -> int:
    n = whole(value)
    if n is None:
        raise BuilderError(f"{name} must be a non-negative integer: {show(value)}")
    return n


def _require_option(value: object) -> int:
    n = whole(value)
    if n is None:
        raise BuilderError(f"require takes a count of rows, a whole number from 0 (got {show(value)})")
    return n


def _returning_clause(returning: Returning) -> str:
    if returning is None or returning is False:
        return ""
    if returning is True:
        return " returning *"
    fields = [returning] if isinstance(returning, str) else list(returning)
    if not fields:
        raise BuilderError("returning names the fields it answers, or * for every one")
    if "*" in fields:
        if len(fields) > 1:
            raise BuilderError("returning * answers every field: it takes no other")
        return " returning *"
    return " returning " + ", ".join(check_field(f) for f in fields)


def _document(doc: object, out: Params, *, insert: bool) -> str:
    if not isinstance(doc, Mapping):
        raise BuilderError(f"a document is a dict of fields: {show(doc)}")
    if not doc:
        raise BuilderError("cannot write an empty document")
    pairs: list[str] = []
    for key, value in doc.items():
        name = check_field(key)
        if isinstance(value, Inc):
            if insert:
                raise BuilderError(f"inc() reads the row it changes: use it in update (field: {name})")
            pairs.append(f"{name}: coalesce({name}, 0) + {out.add(value.by)}")
        elif isinstance(value, Expr):
            pairs.append(f"{name}: {fill(value.pieces, value.params, out)}")
        else:
            pairs.append(f"{name}: {out.add(encode(value))}")
    return "{" + ", ".join(pairs) + "}"


class QueryBase:
    """The builder steps and the text-only endings, shared by every kind of query."""

    __slots__ = ("_collection", "_select", "_where", "_order", "_limit", "_offset", "_require")

    def __init__(self, collection: str) -> None:
        self._collection = check_collection(collection)
        self._select: tuple[str, ...] = ()
        self._where: tuple[Cond, ...] = ()
        self._order: tuple[tuple[str, str], ...] = ()
        self._limit: int | None = None
        self._offset: int | None = None
        self._require: int | None = None

    def _copy(self, **changes: Any) -> Self:
        new = object.__new__(type(self))
        for cls in type(self).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if hasattr(self, slot):
                    object.__setattr__(new, slot, getattr(self, slot))
        for name, value in changes.items():
            object.__setattr__(new, name, value)
        return new

    # -- steps ---------------------------------------------------------------------------------

    def select(self, *fields: str) -> Self:
        """The fields to answer; none, or `*` anywhere, means every field (R4)."""
        if "*" in fields:
            return self._copy(_select=())
        return self._copy(_select=tuple(check_field(f) for f in fields))

    def where(self, *args: Any) -> Self:
        """`where(field, op, value)`, `where(field, value_or_operator_map)`, `where({...})`,
        `where(raw(...))` / `where(or_(...))`; joined to what is there with `and` (R5)."""
        return self._copy(_where=self._where + (conditions_from(args),))

    def or_where(self, *args: Any) -> Self:
        """Everything conditioned so far, or the new condition (R9)."""
        cond = conditions_from(args)
        so_far = Junction("and", self._where).simplified()
        if so_far is None:
            return self._copy(_where=self._where + (cond,))
        return self._copy(_where=(Junction("or", (so_far, cond)),))

    def order(self, field: str, direction: str = "asc") -> Self:
        """A sort key; the direction is read case-insensitively and always written (R11)."""
        name = check_field(field)
        word = direction.lower() if isinstance(direction, str) else None
        if word not in ("asc", "desc"):
            raise BuilderError(f"order direction must be 'asc' or 'desc': {show(direction)}")
        return self._copy(_order=self._order + ((name, word),))

    def limit(self, n: int) -> Self:
        return self._copy(_limit=_count_option("limit", n))

    def offset(self, n: int) -> Self:
        return self._copy(_offset=_count_option("offset", n))

    def require(self, n: int) -> Self:
        """`require n` on a read: the read is refused (412) unless it answers n rows (R13)."""
        return self._copy(_require=_require_option(n))

    # -- text ----------------------------------------------------------------------------------

    def _where_clause(self, out: Params) -> str:
        cond = Junction("and", self._where).simplified()
        return "" if cond is None else " where " + cond.render(out)

    def _order_limit(self) -> str:
        text = ""
        if self._order:
            text += " order " + ", ".join(f"{f} {d}" for f, d in self._order)
        if self._limit is not None:
            text += f" limit {self._limit}"
        return text

    def _read(self, *, first: bool = False, count: bool = False) -> Statement:
        if count:
            for clause, held in (("order", self._order), ("limit", self._limit is not None),
                                 ("offset", self._offset is not None), ("select", self._select),
                                 ("require", self._require is not None)):
                if held:
                    raise BuilderError(f"count cannot be used with `{clause}`")
        out = Params()
        text = f"get {self._collection}"
        if self._select:
            text += " select " + ", ".join(self._select)
        text += self._where_clause(out)
        if self._order:
            text += " order " + ", ".join(f"{f} {d}" for f, d in self._order)
        limit = 1 if first else self._limit
        if limit is not None:
            text += f" limit {limit}"
        if self._offset:
            text += f" offset {self._offset}"
        if self._require is not None:
            text += f" require {self._require}"
        if count:
            text += " count"
        return text, out.values

    def _unbounded(self) -> bool:
        return Junction("and", self._where).simplified() is None and self._limit is None

    def to_fenecql(self) -> Statement:
        """The read as `(text, params)`; nothing is sent."""
        return self._read()

    def to_insert(self, docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                  require: int | None = None) -> Statement:
        """The `put` as `(text, params)`: one document, or a list of them (R15)."""
        self._check_insert()
        out = Params()
        if isinstance(docs, Mapping):
            body = _document(docs, out, insert=True)
        else:
            items = list(docs)
            if not items:
                raise BuilderError("cannot write an empty document list")
            rendered = [_document(d, out, insert=True) for d in items]
            body = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
        text = f"put {self._collection} {body}"
        if require is not None:
            text += f" require {_require_option(require)}"
        return text, out.values

    def to_update(self, patch: Mapping[str, Any], *, all: bool = False, require: int | None = None,
                  returning: Returning = None) -> Statement:
        """The `set` as `(text, params)`: the patch's values first, then the where's (R2)."""
        self._check_picking("update", all)
        out = Params()
        text = f"set {self._collection} {_document(patch, out, insert=False)}"
        text += self._where_clause(out) + self._order_limit() + _returning_clause(returning)
        if require is not None:
            text += f" require {_require_option(require)}"
        return text, out.values

    def to_delete(self, *, all: bool = False, require: int | None = None,
                  returning: Returning = None) -> Statement:
        """The `del` as `(text, params)`."""
        self._check_picking("delete", all)
        out = Params()
        text = f"del {self._collection}"
        text += self._where_clause(out) + self._order_limit() + _returning_clause(returning)
        if require is not None:
            text += f" require {_require_option(require)}"
        return text, out.values

    def _check_insert(self) -> None:
        self._check_clauses("insert", ("order", "limit", "offset", "select"))
        if Junction("and", self._where).simplified() is not None:
            raise BuilderError("insert cannot be used with `where`")

    def _check_picking(self, verb: str, all: bool) -> None:
        self._check_clauses(verb, ("offset", "select"))
        if self._unbounded() and not all:
            raise BuilderError(f"an unfiltered {verb} covers the whole collection; "
                               f"if you mean it, {verb}({{ all: true }})")

    def _check_clauses(self, verb: str, refused: tuple[str, ...]) -> None:
        """R18: a read's require first, then order, limit, offset, select, in that order."""
        if self._require is not None:
            raise BuilderError(f"{verb} takes require as its option: {verb}(..., {{ require: n }})")
        held = {"order": bool(self._order), "limit": self._limit is not None,
                "offset": self._offset is not None, "select": bool(self._select)}
        for clause in ("order", "limit", "offset", "select"):
            if clause in refused and held[clause]:
                raise BuilderError(f"{verb} cannot be used with `{clause}`")

    def __repr__(self) -> str:
        try:
            text, params = self._read()
        except BuilderError as e:  # pragma: no cover - a chain that cannot be read, e.g. odd state
            return f"<{type(self).__name__} {self._collection}: {e}>"
        return f"<{type(self).__name__} {text!r} {params!r}>"


class TextQuery(QueryBase):
    """The unbound builder of `collection(name)`: text only, no endpoints."""

    __slots__ = ()


def collection(name: str) -> TextQuery:
    """An unbound query, for text only: `collection("jobs").where(...).to_fenecql()`."""
    return TextQuery(name)
