"""The FenecQL syntax tree: plain frozen data, no engine imports.

Every node is hashable, so a filter with its parameters bound can key a line of held claims.
`pos` fields are character offsets into the statement text (for error messages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ---------------------------------------------------------------- expressions


class Expr:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Lit(Expr):
    value: Any  # int, float, str, bool, None


@dataclass(frozen=True, slots=True)
class Duration(Expr):
    n: int
    unit: str  # ms s m h d w mo y


@dataclass(frozen=True, slots=True)
class Param(Expr):
    n: int  # 1-based


@dataclass(frozen=True, slots=True)
class Claim(Expr):
    keys: tuple[str, ...]  # $jwt.a.b -> ("a", "b")


@dataclass(frozen=True, slots=True)
class Field(Expr):
    name: str


@dataclass(frozen=True, slots=True)
class Path(Expr):
    name: str
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class New(Expr):
    """`new.field` (or `new.field.key`): the incoming document of an upsert or a transition."""

    name: str
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Call(Expr):
    name: str  # lower-cased
    args: tuple[Expr, ...]
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Case(Expr):
    whens: tuple[tuple[Expr, Expr], ...]
    else_: Expr | None


@dataclass(frozen=True, slots=True)
class Arith(Expr):
    op: str  # + - * / %
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Cmp(Expr):
    op: str  # = != < <= > >=
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Match(Expr):  # a ~ b
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Has(Expr):
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class In(Expr):
    left: Expr
    items: tuple[Expr, ...] | None  # a list literal's items
    source: Expr | None = None  # a claim or a parameter holding a list


@dataclass(frozen=True, slots=True)
class IsNull(Expr):
    expr: Expr
    negated: bool


@dataclass(frozen=True, slots=True)
class And(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Not(Expr):
    expr: Expr


@dataclass(frozen=True, slots=True)
class ListExpr(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ObjectExpr(Expr):
    items: tuple[tuple[str, Expr], ...]


# ---------------------------------------------------------------- statement parts


@dataclass(frozen=True, slots=True)
class Target:
    """A field, or a path into a json field, written by a patch or a document."""

    name: str
    keys: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return ".".join((self.name, *self.keys))


@dataclass(frozen=True, slots=True)
class Entry:
    target: Target
    value: Expr


@dataclass(frozen=True, slots=True)
class OrderKey:
    expr: Expr
    desc: bool


@dataclass(frozen=True, slots=True)
class SelectItem:
    expr: Expr
    name: str  # the answer's column name


@dataclass(frozen=True, slots=True)
class FieldDef:
    name: str
    type: Any  # "int" ... or ("list", "int")
    required: bool
    index: str | None  # hash unique sorted geo ttl
    ttl_ms: int | None = None


# ---------------------------------------------------------------- statements


class Statement:
    """Every statement; `writes` says whether it takes the write lock. Each class names its `verb`."""

    __slots__ = ()
    writes = True
    verb: str  # declared for mypy only: set by each class (a field of Put)


@dataclass(frozen=True, slots=True)
class CreateCollection(Statement):
    name: str
    fields: tuple[FieldDef, ...]
    if_not_exists: bool
    verb = "create"


@dataclass(frozen=True, slots=True)
class DropCollection(Statement):
    name: str
    if_exists: bool
    verb = "drop"


@dataclass(frozen=True, slots=True)
class CreateIndex(Statement):
    collection: str
    target: Target
    index: str
    ttl_ms: int | None
    if_not_exists: bool
    verb = "create"


@dataclass(frozen=True, slots=True)
class Put(Statement):
    verb: str  # put | insert
    collection: str
    documents: tuple[tuple[Entry, ...], ...] | None  # literal documents
    param: int | None  # put jobs $1
    if_absent: bool
    else_patch: tuple[Entry, ...] | None
    require: int | None


@dataclass(frozen=True, slots=True)
class Get(Statement):
    collection: str
    select: tuple[SelectItem, ...] | None  # None = every field
    where: Expr | None
    order: tuple[OrderKey, ...]
    limit: int | None
    offset: int | None
    count: bool
    require: int | None
    writes = False
    verb = "get"


@dataclass(frozen=True, slots=True)
class Set(Statement):
    collection: str
    patch: tuple[Entry, ...]
    where: Expr | None
    order: tuple[OrderKey, ...]
    limit: int | None
    returning: tuple[SelectItem, ...] | None  # () never; None = count answer
    returning_all: bool
    require: int | None
    verb = "set"


@dataclass(frozen=True, slots=True)
class Del(Statement):
    collection: str
    where: Expr | None
    order: tuple[OrderKey, ...]
    limit: int | None
    returning: tuple[SelectItem, ...] | None
    returning_all: bool
    require: int | None
    verb = "del"
