"""The policy file (access.md §3): one rule per line, parsed once at start-up.

    rule        := collection SP grants [SP "where" SP filter] [SP "for" SP role]
                 | collection SP "append-only"
    grant       := read | insert | update | update(f, ...) | delete | write | expired | schedule | control

`control` (pause, resume, limit and unlimit the collection's queues: docs/queues.md) is granted by
name only, never by `write`, and on a collection, never on rows: a rule granting it takes no filter.

A line is cut into words at the top level (outside quotes and brackets), so
`update(owner, run_at)` and a filter's `"a b"` stay whole. The filter is FenecQL, parsed by the
statement parser inside `get _ where <filter>`; its errors keep their column, shifted to the
policy line. Every refusal names the line: `policy line N: <why>`, and the column where one
helps. Nothing is compiled here: fields are known only against a collection's schema, so the
engine compiles a rule's filter when a statement on that collection first needs it.

A rule's filter is split once into what the engine needs:
* `using`  — its top-level `and` terms without `new.`: the rows it lets a token touch;
* `transition` — the terms with `new.` (update-only rules): what an update may make of a row;
* `pins`   — top-level `field = <value read from no row>` terms: filled into inserts that
  leave the field out (§4.2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .. import values as V
from ..errors import FenecError
from ..plan.planner import and_terms
from ..ql import ast as A
from ..ql.ast import mentions
from ..ql.parser import parse

GRANTS = ("read", "insert", "update", "delete", "expired", "schedule", "control")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
FUNCTIONS = frozenset("now coalesce greatest least lower upper len timestamp bucket distance within".split())
HIDDEN = "_idempotency"  # the server's own keys: no rule reaches it (§4.5)
_PREFIX = "get _policy where "
_POSITION = re.compile(r"position (\d+) \(line \d+, column \d+\): ([^\n]*)")


class PolicyError(FenecError):
    """A policy that cannot be loaded (the server refuses to start, exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__("query", message)


@dataclass(frozen=True, slots=True)
class Rule:
    line: int
    collection: str  # a name, or "*"
    grants: frozenset[str]  # of GRANTS; `write` already spread into insert, update, delete
    fields: tuple[str, ...] | None  # update's field list; None = any field
    filter: A.Expr | None  # None = every row
    rows: str | None  # the filter as written
    role: str | None
    claims: tuple[tuple[str, ...], ...]  # every claim the filter reads
    using: A.Expr | None
    transition: tuple[A.Expr, ...]
    pins: tuple[tuple[str, A.Expr], ...]
    named: frozenset[str] = frozenset()  # update/delete named as such (not through `write`)

    def applies_to(self, claims: dict) -> bool:
        """§3.2: its role matches, and the token holds every claim its filter reads."""
        if self.role is not None:
            role = claims.get("role")
            if not (role == self.role or (isinstance(role, list) and self.role in role)):
                return False
        return all(V.read_path(claims, keys, V.MISSING) is not V.MISSING for keys in self.claims)


@dataclass(frozen=True, slots=True)
class AppendOnly:
    line: int
    collection: str


class _LineError(Exception):
    def __init__(self, why: str, col: int | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.col = col


def _outside_quotes(line: str) -> Iterator[tuple[int, str]]:
    """Each character of `line` outside quoted text, with its offset. A quote opens with `"` or
    `'` (the opening mark is outside) and closes with the same mark; inside, a backslash escapes
    the character after it."""
    quote = ""
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        else:
            if c in "\"'":
                quote = c
            yield i, c
        i += 1


def _words(line: str) -> list[tuple[str, int]]:
    """Top-level words with their offsets: whitespace inside quotes or brackets does not cut."""
    out: list[tuple[str, int]] = []
    depth = 0
    start = -1
    for i, c in _outside_quotes(line):  # a quoted text is part of the word its opening mark starts
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        if c.isspace() and depth == 0:
            if start >= 0:
                out.append((line[start:i], start))
                start = -1
        elif start < 0:
            start = i
    if start >= 0:
        out.append((line[start:], start))
    return out


def _strip_comment(line: str) -> str:
    for i, c in _outside_quotes(line):
        if c == "#":
            return line[:i]
    return line


def _grants(text: str, col: int) -> tuple[frozenset[str], tuple[str, ...] | None, frozenset[str]]:
    """`read,update(a, b)` -> ({read, update}, ("a", "b"), the grants named as such)."""
    pieces: list[tuple[str, int]] = []
    depth = 0
    start = 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
            if depth > 1:
                raise _LineError("update(...) lists field names: parentheses do not nest", col + i)
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise _LineError("a `)` closes nothing", col + i)
        elif c == "," and depth == 0:
            pieces.append((text[start:i], start))
            start = i + 1
    if depth:
        raise _LineError("update( is not closed: a `)` ends its field list", col + text.index("("))
    pieces.append((text[start:], start))
    grants: set[str] = set()
    fields: set[str] | None = set()
    any_field = False
    named: set[str] = set()
    for raw, at in pieces:
        g = raw.strip()
        gcol = col + at + (len(raw) - len(raw.lstrip()))
        if not g:
            raise _LineError("an empty grant: grants are names separated by single commas", gcol)
        low = g.lower()
        if "(" in g:
            head, _, inner = g.partition("(")
            if head.strip().lower() != "update" or not g.endswith(")"):
                raise _LineError(f"`{g}`: only update takes a field list, as update(f1, f2)", gcol)
            inner = inner[:-1]
            names = [x.strip() for x in inner.split(",")]
            if not inner.strip():
                raise _LineError("update() names no field: list the fields it may change, or write update", gcol)
            for nm in names:
                if not nm:
                    raise _LineError(f"`{g}`: an empty field name in the list", gcol)
                if len(nm.split()) > 1:
                    raise _LineError(f"`{g}`: fields are separated by commas (`{nm}`)", gcol)
                if not IDENT.match(nm):
                    raise _LineError(f"`{g}`: `{nm}` is not a field name", gcol)
                if nm == "id":
                    raise _LineError("update(id): `id` can never change", gcol)
            grants.add("update")
            named.add("update")
            if fields is not None:
                fields.update(names)
            continue
        if len(g.split()) > 1:
            raise _LineError(f"grants are separated by commas: found `{g}`", gcol)
        if low == "write":
            grants.update(("insert", "update", "delete"))
            any_field = True
        elif low == "update":
            grants.add("update")
            named.add("update")
            any_field = True
        elif low in GRANTS:
            grants.add(low)
            named.add(low)
        elif low == "append-only":
            raise _LineError("append-only stands alone: `<collection> append-only`", gcol)
        else:
            raise _LineError(f"unknown grant `{g}`: read, insert, update, update(f, ...), delete, write, "
                             "expired, schedule or control", gcol)
    if "update" not in grants or any_field:
        return frozenset(grants), None, frozenset(named)
    return frozenset(grants), tuple(sorted(fields or ())), frozenset(named)


def _filter(text: str, col: int) -> A.Expr:
    try:
        stmts = parse(_PREFIX + text)
    except FenecError as e:
        m = _POSITION.match(e.message)
        if m:
            pos = int(m.group(1)) - len(_PREFIX)
            raise _LineError(m.group(2), col + max(0, pos)) from None
        raise _LineError(e.message, col) from None
    if len(stmts) != 1:
        raise _LineError("a filter is one condition", col)
    g = stmts[0]
    if not isinstance(g, A.Get) or g.where is None:
        raise _LineError("a filter is a condition", col)
    if g.order or g.limit is not None or g.offset is not None or g.count or g.require is not None \
            or g.select is not None:
        raise _LineError("a filter is a condition only: no order, limit, count or other clause", col)
    return g.where


def _check_filter(e: A.Expr, col: int) -> None:
    if mentions(e, lambda n: isinstance(n, A.Param)):
        raise _LineError("`$1`-style parameters have no value in a policy: a filter reads claims as `$jwt.<claim>`",
                         col)
    if mentions(e, lambda n: isinstance(n, A.Call) and n.name == "expired"):
        raise _LineError("a filter may not call expired(): the `expired` grant says who reads rows past their @ttl",
                         col)
    bad: list[str] = []

    def unknown(n: A.Expr) -> bool:  # notes the name; True ends the walk at the first one
        if isinstance(n, A.Call) and n.name not in FUNCTIONS:
            bad.append(n.name)
            return True
        return False
    mentions(e, unknown)
    if bad:
        raise _LineError(f"unknown function `{bad[0]}()`", col)


def _new_only_at_top(e: A.Expr) -> bool:
    """`new.` may stand in a top-level `and` term, never under `or`, `not` or `case`."""
    stack = [e]
    while stack:  # down to the first `or`, `not` or `case` on each branch, then into it whole
        node = stack.pop()
        if isinstance(node, (A.Or, A.Not, A.Case)):
            if mentions(node, lambda n: isinstance(n, A.New)):
                return False
        else:
            stack.extend(A.children(node))
    return True


def _claims(e: A.Expr | None) -> tuple[tuple[str, ...], ...]:
    found: list[tuple[str, ...]] = []

    def claim(n: A.Expr) -> bool:
        # False goes on walking: every claim is noted, not only the first. Noting the first alone
        # applied a rule to a token lacking a later claim (§3.2 skips it), and put two tokens
        # differing only in that claim into one line of held claims.
        if isinstance(n, A.Claim):
            found.append(n.keys)
        return False
    mentions(e, claim)
    return tuple(sorted(set(found)))


def _row_free(e: A.Expr) -> bool:
    return not mentions(e, lambda n: isinstance(n, (A.Field, A.Path, A.New)))


def _pins(terms: list[A.Expr]) -> tuple[tuple[str, A.Expr], ...]:
    out = []
    for t in terms:
        if isinstance(t, A.Cmp) and t.op == "=":
            if isinstance(t.left, A.Field) and _row_free(t.right):
                out.append((t.left.name, t.right))
            elif isinstance(t.right, A.Field) and _row_free(t.left):
                out.append((t.right.name, t.left))
    return tuple((f, v) for f, v in out if f != "id")


def parse_line(line: str, number: int) -> Rule | AppendOnly | None:
    text = _strip_comment(line).rstrip()
    words = _words(text)
    if not words:
        return None
    coll, _ = words[0]
    if coll != "*" and not IDENT.match(coll):
        raise _LineError(f"`{coll}` is not a collection name (or `*`)", words[0][1] + 1)
    if coll == HIDDEN:
        raise _LineError(f"`{HIDDEN}` is the server's own: no rule reaches it", words[0][1] + 1)
    if len(words) == 1:
        raise _LineError(f"`{coll}` names no grant: write `{coll} read` or another grant")
    rest = words[1:]
    if rest[0][0].lower() == "append-only":
        if len(rest) > 1:
            raise _LineError("append-only takes no filter and no role", rest[1][1] + 1)
        return AppendOnly(number, coll)
    role = None
    lows = [w.lower() for w, _ in rest]
    if "for" in lows:
        i = lows.index("for")
        if i != len(rest) - 2 or lows.count("for") > 1:
            raise _LineError("`for <role>` must be the last two words", rest[i][1] + 1)
        role = rest[-1][0]
        if not IDENT.match(role):
            raise _LineError(f"`{role}` is not a role name", rest[-1][1] + 1)
        end = rest[i][1]
        rest = rest[:i]
        lows = lows[:i]
    else:
        end = len(text)
    if not rest:
        raise _LineError(f"`{coll}` names no grant before `for`")
    if "where" in lows:
        w = lows.index("where")
        gwords = rest[:w]
        if w == len(rest) - 1:
            raise _LineError("`where` needs a condition", rest[w][1] + 1)
        fstart = rest[w + 1][1]
        ftext = text[fstart:end].rstrip()
    else:
        gwords = rest
        fstart, ftext = -1, ""
    if not gwords:
        raise _LineError("a rule names its grants before `where`", rest[0][1] + 1)
    gtext = text[gwords[0][1]:gwords[-1][1] + len(gwords[-1][0])]
    grants, fields, named = _grants(gtext, gwords[0][1] + 1)
    filt = None
    if ftext and "control" in grants:
        raise _LineError("`control` is granted on a collection's queues, not on rows: a rule granting it "
                         "takes no `where`", fstart + 1)
    if ftext:
        filt = _filter(ftext, fstart + 1)
        _check_filter(filt, fstart + 1)
    terms = and_terms(filt)
    transition = tuple(t for t in terms if mentions(t, lambda n: isinstance(n, A.New)))
    if transition:
        if grants != {"update"}:
            raise _LineError("`new.` says what an update may make of a row: a rule using it grants update only",
                             fstart + 1)
        assert filt is not None  # the transition terms are terms of the filter
        if not _new_only_at_top(filt):
            raise _LineError("`new.` terms must be top-level `and` terms of the filter", fstart + 1)
    using_terms = [t for t in terms if t not in transition]
    using = None if not using_terms else (using_terms[0] if len(using_terms) == 1 else A.And(tuple(using_terms)))
    return Rule(number, coll, grants, fields, filt, ftext or None, role, _claims(filt), using, transition,
                _pins(using_terms), named)


def parse_rules(text: str) -> tuple[list[Rule], list[AppendOnly]]:
    """Every rule of a policy text; PolicyError names the first bad line."""
    rules: list[Rule] = []
    ao: list[AppendOnly] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            got = parse_line(line, number)
        except _LineError as e:
            where = f" (column {e.col})" if e.col is not None else ""
            raise PolicyError(f"policy line {number}: {e.why}{where}") from None
        if isinstance(got, Rule):
            rules.append(got)
        elif isinstance(got, AppendOnly):
            ao.append(got)
    closed = {a.collection for a in ao}
    for r in rules:
        if ("*" in closed or r.collection in closed) and r.named & {"update", "delete"}:
            which = "update" if "update" in r.named else "delete"
            what = "every collection is" if "*" in closed else f"`{r.collection}` is"
            raise PolicyError(f"policy line {r.line}: {what} append-only, so no rule grants {which} there")
    return rules, ao
