"""The parse tree's rules -> the frozen dataclasses of `ast.py`, run by lark as each rule is
reduced (parser.py), refusing what the grammar alone cannot say (fenecql.md §2 "Rules the
grammar alone does not say"): names too long or reserved, integers past 64 bits, a clause given
twice, a column named twice. A refusal with a position raises `Located`, which the parser turns
into a 400 with a caret.

One method per grammar rule, named as the rule: `Expressions` the literals and operands,
`ToAst` the clauses and statements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from lark import Token, Transformer, v_args

from ..errors import FenecError
from . import ast as A
from .ast import MAX_NAME, MAX_PATH_KEYS, RESERVED
from .escapes import unescape as _unescape

TYPES = {
    "bool": "bool", "int": "int", "float": "float", "text": "text", "string": "text", "bytes": "bytes",
    "blob": "bytes", "timestamp": "timestamp", "timestamptz": "timestamp", "json": "json", "geo": "geo",
}
ANNOTATIONS = {"hash", "unique", "sorted", "geo", "ttl"}

DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def split_duration(s: str) -> tuple[int, str]:
    """A DURATION token's count and unit: `30s` -> (30, "s")."""
    i = 0
    while s[i].isdigit():
        i += 1
    return int(s[:i]), s[i:]


def duration_ms(s: str) -> int | None:
    """A DURATION token in ms where its unit is ms, s, m, h or d; None for a calendar unit (mo, w, y)."""
    n, unit = split_duration(s)
    return n * DURATION_MS[unit] if unit in DURATION_MS else None


def _qerr(msg: str) -> FenecError:
    return FenecError("query", msg)


class Located(Exception):
    """A refusal found while building the tree, with where in the text it stands."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message


def _name(tok: Token, what: str = "name") -> str:
    s = str(tok)
    if s.lower() in RESERVED:
        raise Located(tok.start_pos or 0, f"`{s}` is a keyword and cannot be a {what}")
    if len(s) > MAX_NAME:
        raise Located(tok.start_pos or 0, f"a {what} is at most {MAX_NAME} characters")
    return s


def _int(tok: Token) -> int:
    v = int(str(tok).replace("_", ""))
    if v > 2**63 - 1:
        raise FenecError("query", f"integer {tok} is out of range (64-bit)")
    return v


def _uint(tok: Any, clause: str) -> int:
    if isinstance(tok, Token) and tok.type == "INT":
        return _int(tok)
    if isinstance(tok, Token) and tok.type == "PARAM":
        raise _qerr(f"`{clause}` takes a number written in the statement, not a parameter")
    raise _qerr(f"`{clause}` takes a non-negative whole number")


def _split_path(text: str) -> tuple[str, tuple[str, ...]]:
    parts = text.split(".")
    for p in parts:
        if p.lower() in RESERVED and p is parts[0]:
            raise _qerr(f"`{p}` is a keyword and cannot be a name")
        if len(p) > MAX_NAME:
            raise _qerr(f"a name is at most {MAX_NAME} characters")
    if len(parts) - 1 > MAX_PATH_KEYS:
        raise _qerr(f"a path names at most {MAX_PATH_KEYS} keys")
    return parts[0], tuple(parts[1:])


_CONST_ITEM = re.compile(
    r"""(-\s*+)?+(\d(?:_?\d)*+(?:\.\d(?:_?\d)*+)?+(?:[eE][+-]?\d++)?+)"""
    r"""|("[^"\\]*+(?:\\.[^"\\]*+)*+"|'[^'\\]*+(?:\\.[^'\\]*+)*+')"""
    r"""|(true|false|null)""",
    re.I | re.S,
)
_WORDS = {"true": True, "false": False, "null": None}


def _const_items(tok: Token, shared: dict[tuple[type, Any], A.Lit]) -> list[A.Expr]:
    """The items of a CONST_OPEN or CONST_MORE token (grammar.lark), which the lexer has matched
    whole, as the literal rules read them one by one: the same values, the same refusals. Equal
    values of the same type share one `Lit` node (`shared`, one per list), so `in [1, 1, …]` of a
    megabyte holds one node, not 500 000."""
    out: list[A.Expr] = []
    for m in _CONST_ITEM.finditer(tok):
        digits = m.group(2)
        v: Any
        if digits is not None:
            sign = m.group(1)
            if "." in digits or "e" in digits or "E" in digits:
                written = ("-" if sign else "") + digits.replace("_", "")
                v = float(written)
                if v in (float("inf"), float("-inf")):
                    raise FenecError("type", f"number {written} is out of range")
                out.append(A.Lit(v))
                continue
            v = int(digits.replace("_", ""))
            if sign:
                v = -v
                if v < -(2**63):
                    raise FenecError("query", f"integer -{digits.replace('_', '')} is out of range (64-bit)")
            elif v > 2**63 - 1:
                raise FenecError("query", f"integer {digits} is out of range (64-bit)")
        elif m.group(3) is not None:
            v = _unescape(m.group(3)[1:-1])
        else:
            v = _WORDS[m.group(4).lower()]
        key = (type(v), v)
        node = shared.get(key)
        if node is None:
            node = shared[key] = A.Lit(v)
        out.append(node)
    return out


def _toks(children: list, *types: str) -> list[Token]:
    return [c for c in children if isinstance(c, Token) and c.type in types]


def _nodes(children: list) -> list:
    return [c for c in children if not isinstance(c, Token)]


class _Clause:
    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any) -> None:
        self.kind = kind
        self.value = value




@v_args(inline=False)
class Expressions(Transformer):
    # ---------------------------------------------------------------- literals and operands
    def int_lit(self, c):
        return A.Lit(_int(c[0]))

    def dec_lit(self, c):
        v = float(str(c[0]).replace("_", ""))
        if v != v or v in (float("inf"), float("-inf")):
            raise FenecError("type", f"number {c[0]} is out of range")
        return A.Lit(v)

    def neg_lit(self, c):
        s = str(c[0]).replace("_", "").replace(" ", "").replace("\t", "").replace("\n", "")
        body = s[1:]
        if "." in body or "e" in body or "E" in body:
            v = float(s)
            if v in (float("inf"), float("-inf")):
                raise FenecError("type", f"number {s} is out of range")
            return A.Lit(v)
        n = int(s)
        if n < -(2**63):
            raise FenecError("query", f"integer {s} is out of range (64-bit)")
        return A.Lit(n)

    def str_lit(self, c):
        return A.Lit(_unescape(str(c[0])[1:-1]))

    def true_lit(self, c):
        return A.Lit(True)

    def false_lit(self, c):
        return A.Lit(False)

    def null_lit(self, c):
        return A.Lit(None)

    def dur_lit(self, c):
        return A.Duration(*split_duration(str(c[0])))

    def param(self, c):
        n = int(str(c[0])[1:])
        if n == 0:
            raise _qerr("parameters are numbered from $1; $0 is not one")
        return A.Param(n)

    def claim(self, c):
        return A.Claim(tuple(str(c[0]).split(".")[1:]))

    def field(self, c):
        return A.Field(_name(c[0]))

    def path(self, c):
        name, keys = _split_path(str(c[0]))
        if name == "new":
            return A.New(keys[0], keys[1:])
        return A.Path(name, keys)

    def paren(self, c):
        return c[0]

    def call(self, c):
        name = str(c[0]).lower()
        return A.Call(name, tuple(_nodes(c[1:])), pos=c[0].start_pos or 0)

    def count_call(self, c):
        raise _qerr("`count(...)` and other aggregates are not in this subset; use the `count` clause")

    def case(self, c):
        parts = _nodes(c)
        has_else = any(isinstance(t, Token) and t.type == "ELSE" for t in c)
        else_ = parts.pop() if has_else else None
        whens = tuple((parts[i], parts[i + 1]) for i in range(0, len(parts), 2))
        return A.Case(whens, else_)

    def list(self, c):
        if c and isinstance(c[0], Token) and c[0].type == "CONST_OPEN":
            items: list[A.Expr] = []
            shared: dict = {}
            for t in c:
                if isinstance(t, Token):
                    if t.type in ("CONST_OPEN", "CONST_MORE"):
                        items.extend(_const_items(t, shared))
                else:
                    items.append(t)
            return A.ListExpr(tuple(items))
        return A.ListExpr(tuple(_nodes(c)))

    def obj_entry(self, c):
        k = c[0]
        key = _unescape(str(k)[1:-1]) if k.type == "STRING" else str(k)
        return (key, c[1])

    def object(self, c):
        items = tuple(c)
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise FenecError("type", f"object holds the key `{dup}` twice")
        return A.ObjectExpr(items)

    # ---------------------------------------------------------------- operators
    def arith(self, c):
        return A.Arith(str(c[1]), c[0], c[2])

    def cmp(self, c):
        left, op, right = c
        if isinstance(left, A.Cmp) or isinstance(right, A.Cmp):
            raise _qerr("comparisons do not chain: write `a < b and b < c`")
        o = str(op)
        o = {"==": "=", "<>": "!="}.get(o, o)
        return A.Cmp(o, left, right)

    def match(self, c):
        return A.Match(c[0], c[1])

    def has(self, c):
        return A.Has(c[0], c[2])

    def in_(self, c):
        left, src = c[0], c[2]
        if isinstance(src, A.ListExpr):
            return A.In(left, src.items)
        if isinstance(src, Token) and src.type == "CLAIM":
            return A.In(left, None, A.Claim(tuple(str(src).split(".")[1:])))
        if isinstance(src, Token) and src.type == "PARAM":
            raise Located(src.start_pos or 0, "`in` takes a list or a token claim: write `in [$1, $2]`")
        raise _qerr("`in` takes a list")

    def is_null(self, c):
        return A.IsNull(c[0], False)

    def is_not_null(self, c):
        return A.IsNull(c[0], True)

    def not_(self, c):
        return A.Not(c[1])

    def and_chain(self, c):
        items = _nodes(c)
        if len(items) == 1:
            return items[0]
        return A.And(tuple(items))

    def or_chain(self, c):
        items = _nodes(c)
        if len(items) == 1:
            return items[0]
        return A.Or(tuple(items))


@v_args(inline=False)
class ToAst(Expressions):
    # ---------------------------------------------------------------- clauses
    def where(self, c):
        return _Clause("where", c[1])

    def order_key(self, c):
        desc = any(isinstance(t, Token) and t.type == "DESC" for t in c[1:])
        return A.OrderKey(c[0], desc)

    def order(self, c):
        return _Clause("order", tuple(_nodes(c)))

    def limit(self, c):
        return _Clause("limit", _uint(c[1], "limit"))

    def offset(self, c):
        return _Clause("offset", _uint(c[1], "offset"))

    def require(self, c):
        return _Clause("require", _uint(c[1], "require"))

    def count(self, c):
        return _Clause("count", True)

    def item(self, c):
        expr = c[0]
        alias = _toks(c, "NAME")
        if alias:
            return A.SelectItem(expr, _name(alias[-1], "column name"))
        if isinstance(expr, A.Field):
            return A.SelectItem(expr, expr.name)
        if isinstance(expr, A.Path):
            return A.SelectItem(expr, ".".join((expr.name, *expr.keys)))
        raise _qerr("a computed column needs a name: write `<expression> as <name>`")

    def select_list(self, c):
        if isinstance(c[0], Token) and c[0].type == "STAR":
            return None
        items = tuple(c)
        names = [i.name for i in items]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise _qerr(f"the column `{dup}` is named twice")
        return items

    def select(self, c):
        return _Clause("select", c[1])

    def column(self, c):
        tok = c[0]
        if tok.type == "PATH":
            name, keys = _split_path(str(tok))
            return A.SelectItem(A.Path(name, keys), str(tok))
        name = _name(tok, "column name")
        return A.SelectItem(A.Field(name), name)

    def returning(self, c):
        if isinstance(c[1], Token) and c[1].type == "STAR":
            return _Clause("returning", None)
        items = tuple(c[1:])
        names = [i.name for i in items]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise _qerr(f"the column `{dup}` is named twice")
        return _Clause("returning", items)

    # ---------------------------------------------------------------- statements
    @staticmethod  # `list` in this class names the rule method above, hence `Iterable`
    def _clauses(children: Iterable[Any], verb: str, allowed: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for cl in children:
            if not isinstance(cl, _Clause):
                continue
            if cl.kind not in allowed:
                if cl.kind in ("offset", "count"):
                    raise _qerr(f"`{cl.kind}` is a clause of reads: a `{verb}` cannot take it")
                raise _qerr(f"`{cl.kind}` is not a clause of `{verb}`")
            if cl.kind in out:
                raise _qerr(f"the `{cl.kind}` clause is given twice")
            out[cl.kind] = cl.value
        return out

    def get(self, c):
        coll = _name(c[1], "collection name")
        return self._get(coll, c[2:], None, False)

    def select_from(self, c):
        sel = c[1]
        coll = _name(c[2], "collection name")
        return self._get(coll, c[3:], sel, True)

    def _get(self, coll, rest, sel, has_sel):
        cl = self._clauses(rest, "get", {"select", "where", "order", "limit", "offset", "count", "require"})
        if has_sel:
            if "select" in cl:
                raise _qerr("the `select` clause is given twice")
            cl["select"] = sel
        if cl.get("count"):
            for other in ("select", "order", "limit", "offset", "require"):
                if other in cl:
                    raise _qerr(f"`count` combines only with `where`, not with `{other}`")
        return A.Get(coll, cl.get("select"), cl.get("where"), cl.get("order", ()), cl.get("limit"),
                     cl.get("offset"), bool(cl.get("count")), cl.get("require"))

    def set(self, c):
        coll = _name(c[1], "collection name")
        patch = next(x for x in c[2:] if isinstance(x, tuple))
        cl = self._clauses(c[2:], "set", {"where", "order", "limit", "returning", "require"})
        ret = cl.get("returning", False)
        return A.Set(coll, patch, cl.get("where"), cl.get("order", ()), cl.get("limit"),
                     ret if ret is not False else None, ret is None, cl.get("require"))

    def del_(self, c):
        coll = _name(c[1], "collection name")
        cl = self._clauses(c[2:], "del", {"where", "order", "limit", "returning", "require"})
        ret = cl.get("returning", False)
        return A.Del(coll, cl.get("where"), cl.get("order", ()), cl.get("limit"),
                     ret if ret is not False else None, ret is None, cl.get("require"))

    def entry(self, c):
        k = c[0]
        if k.type == "STRING":
            name, keys = _unescape(str(k)[1:-1]), ()
            if "." in name:
                name, keys = _split_path(name)
        elif k.type == "PATH":
            name, keys = _split_path(str(k))
        else:
            name, keys = _name(k, "field name"), ()
        return A.Entry(A.Target(name, keys), c[1])

    def _entries(self, c) -> tuple:
        entries = tuple(c)
        seen = [e.target.text for e in entries]
        if len(set(seen)) != len(seen):
            dup = next(n for n in seen if seen.count(n) > 1)
            raise _qerr(f"`{dup}` is written twice")
        return entries

    def document(self, c):
        return self._entries(c)

    def patch(self, c):
        return self._entries(c)

    def documents(self, c):
        if len(c) == 1 and isinstance(c[0], Token) and c[0].type == "PARAM":
            n = int(str(c[0])[1:])
            if n == 0:
                raise _qerr("parameters are numbered from $1; $0 is not one")
            return ("param", n)
        return ("docs", tuple(c))

    def if_absent(self, c):
        patch = next((x for x in c if isinstance(x, tuple)), None)
        return ("absent", patch)

    def put_require(self, c):
        return ("require", _uint(c[1], "require"))

    def put(self, c):
        verb = str(c[0]).lower()
        coll = _name(_toks(c, "NAME")[0], "collection name")
        docs = None
        param = None
        absent = False
        patch = None
        req = None
        for x in c:
            if isinstance(x, tuple) and x and x[0] == "docs":
                docs = x[1]
            elif isinstance(x, tuple) and x and x[0] == "param":
                param = x[1]
            elif isinstance(x, tuple) and x and x[0] == "absent":
                absent = True
                patch = x[1]
            elif isinstance(x, tuple) and x and x[0] == "require":
                req = x[1]
        return A.Put(verb, coll, docs, param, absent, patch, req)

    # ---------------------------------------------------------------- schema
    def ftype(self, c):
        t = str(c[0]).lower()
        if t not in TYPES:
            raise _qerr(f"unknown type `{c[0]}`: expected one of bool, int, float, text, bytes, timestamp, json, geo")
        return TYPES[t]

    def list_type(self, c):
        t = str(c[0]).lower()
        if t not in TYPES:
            raise _qerr(f"unknown type `{c[0]}`")
        if TYPES[t] == "json":
            raise _qerr("a list field holds a scalar type, not json")
        return ("list", TYPES[t])

    def annotation(self, c):
        name = str(c[0]).lower()
        if name not in ANNOTATIONS:
            raise _qerr(f"unknown annotation `@{c[0]}`: expected @hash, @unique, @sorted, @geo or @ttl(...)")
        if name == "unique" and len(c) > 1:
            if str(c[1]).lower() != "pending":
                raise _qerr(f"`@unique` takes `(pending)` or nothing, not `({c[1]})`")
            return ("unique_pending", None)
        if name == "ttl":
            if len(c) < 2 or c[1].type != "DURATION":
                raise _qerr("`@ttl` takes a duration: `@ttl(30m)`")
            ms = duration_ms(str(c[1]))
            if ms is None:
                raise _qerr(f"a @ttl duration is whole ms, s, m, h or d, not `{c[1]}`")
            return ("ttl", ms)
        if len(c) > 1:
            raise _qerr(f"`@{name}` takes no argument")
        return (name, None)

    def field_def(self, c):
        name = _name(c[0], "field name")
        if name == "id":
            raise _qerr("`id` is implicit: every document has one, so it is not declared")
        ftype = c[1]
        required = False
        index = None
        ttl = None
        for f in c[2:]:
            if isinstance(f, Token) and f.type == "REQUIRED":
                required = True
            elif isinstance(f, tuple):
                if index is not None:
                    raise _qerr(f"field `{name}` takes at most one index annotation")
                index, ttl = f
        return A.FieldDef(name, ftype, required, index, ttl)

    def if_not_exists(self, c):
        return "ine"

    def if_exists(self, c):
        return "ie"

    def create_coll(self, c):
        ine = "ine" in c
        names = [x for x in c if isinstance(x, Token) and x.type == "NAME"]
        name = _name(names[0], "collection name")
        fields = tuple(x for x in c if isinstance(x, A.FieldDef))
        return A.CreateCollection(name, fields, ine)

    def drop_coll(self, c):
        ie = "ie" in c
        names = [x for x in c if isinstance(x, Token) and x.type == "NAME"]
        return A.DropCollection(_name(names[0], "collection name"), ie)

    def create_index(self, c):
        ine = "ine" in c
        toks = [x for x in c if isinstance(x, Token) and x.type in ("NAME", "PATH")]
        coll = _name(toks[0], "collection name")
        if toks[1].type == "PATH":
            name, keys = _split_path(str(toks[1]))
        else:
            name, keys = _name(toks[1], "field name"), ()
        ann = next(x for x in c if isinstance(x, tuple))
        return A.CreateIndex(coll, A.Target(name, keys), ann[0], ann[1], ine)

    def text(self, c):
        return [x for x in c if isinstance(x, A.Statement)]


# `del` is a Python keyword: lark calls the rule's method by name.
setattr(ToAst, "del", ToAst.del_)
