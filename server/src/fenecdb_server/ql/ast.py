"""The FenecQL syntax tree: plain frozen data, no engine imports.

Every node is hashable, so a filter with its parameters bound can key a line of held claims.
`pos` fields are character offsets into the statement text (for error messages).

Every walk over a tree goes through `children` (the nodes right under one node) or `walk` (every
node under one, iteratively: a tree may be as deep as the parser allows, `MAX_DEPTH` levels and
`4 * MAX_DEPTH` links of a chain, more than Python's recursion limit would like).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

# The language's limits. The parser refuses past them as it reads; the engine checks again where a
# tree may come from elsewhere (built in process, or a path written as a `put jobs $1` key).
MAX_DEPTH = 512  # how deep an expression nests (counted on the tokens; plan/compile.py on a tree)
MAX_NAME = 128  # characters of a collection's or a field's name, or of one key of a path
MAX_PATH_KEYS = 64  # keys of a path into a json field after its name
# The keywords that cannot be a name (of a collection, a field, a column).
RESERVED = frozenset(
    "get put insert set del where order limit offset select returning require count and or not in is null "
    "true false has case when then else end as asc desc if absent".split()
)

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


# ---------------------------------------------------------------- schedules


@dataclass(frozen=True, slots=True)
class CreateSchedule(Statement):
    """`create schedule <name> (every <duration> | cron "<expr>" [in "<zone>"]) [missed once|skip]
    <put>`: the put runs at each due time, `$1` bound to that due time (engine/schedules.py)."""

    name: str
    every_ms: int | None
    cron: str | None
    zone: str | None
    missed: str  # once | skip
    put: Put
    if_not_exists: bool
    verb = "create"


@dataclass(frozen=True, slots=True)
class ScheduleControl(Statement):
    """`pause schedule <name>`, `resume ...`, `fire ...`, `drop schedule [if exists] <name>`."""

    verb: str  # pause | resume | fire | drop
    name: str
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class ShowSchedules(Statement):
    """`show schedules`: a row per schedule."""

    writes = False
    verb = "show"


# ---------------------------------------------------------------- queue controls (docs/queues.md)


@dataclass(frozen=True, slots=True)
class QueueControl(Statement):
    """`pause`, `resume`, `limit` or `unlimit queue <collection> ["<name>"] ...` (fenecql.md §15)."""

    verb: str  # pause | resume | limit | unlimit
    collection: str
    queue: str | None  # None: every job of the collection
    kind: str | None  # leased | claimed (limit; unlimit: None for every limit)
    n: int | None  # limit: at most this many
    per_ms: int | None  # claimed: the window's length
    by: str | None  # per <field>: counted apart for each value of that field


@dataclass(frozen=True, slots=True)
class ShowQueues(Statement):
    """`show queues`: a row per queue collection, and per queue with controls of its own."""

    writes = False
    verb = "show"


SCHEDULE_STATEMENTS = (CreateSchedule, ScheduleControl, ShowSchedules)


# ---------------------------------------------------------------- walking a tree

Node = Any  # an Expr, a Statement, or a statement's part (Target, Entry, OrderKey, SelectItem, FieldDef)
_PARTS = (Expr, Statement, Target, Entry, OrderKey, SelectItem, FieldDef)
# Every node class above (a new one needs no list updated), and its fields in declaration order,
# read once here rather than at every node.
_CLASSES: list[Any] = [c for c in list(globals().values())
                       if is_dataclass(c) and isinstance(c, type) and issubclass(c, _PARTS)]
_FIELDS: dict[type, tuple[str, ...]] = {c: tuple(f.name for f in fields(c)) for c in _CLASSES}


def children(node: Node) -> list[Node]:
    """The nodes right under `node`, in the order its fields are written: an expression's operands,
    a statement's filter, entries, order keys, ... Tuples are looked into (a case's whens, an
    object's items, a put's documents); a name, a number or None is no node."""
    out: list[Node] = []
    for name in _FIELDS[type(node)]:
        _collect(getattr(node, name), out)
    return out


def _collect(v: Any, out: list[Node]) -> None:
    if isinstance(v, _PARTS):
        out.append(v)
    elif type(v) is tuple:
        for x in v:  # recursion as deep as the classes nest tuples (two), whatever the text
            _collect(x, out)


def walk(node: Node) -> Iterator[Node]:
    """`node` and every node under it, depth first and left to right, without recursion."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        below = children(n)
        below.reverse()
        stack.extend(below)


def mentions(node: Node | None, pred: Callable[[Node], bool]) -> bool:
    """Whether any node of the tree under `node` (itself included) satisfies `pred`; the walk
    stops at the first that does."""
    if node is None:
        return False
    return any(pred(n) for n in walk(node))


def highest_param(stmt: Statement) -> int:
    """The highest `$n` a statement names (each must be bound before it runs), 0 for none."""
    best = 0
    if isinstance(stmt, SCHEDULE_STATEMENTS):
        return 0  # a schedule's put reads `$1` at each due time, bound by the schedule itself
    for n in walk(stmt):
        if isinstance(n, Param):
            best = max(best, n.n)
        elif isinstance(n, Put) and n.param is not None:  # `put jobs $1`: the documents, a number here
            best = max(best, n.param)
    return best
