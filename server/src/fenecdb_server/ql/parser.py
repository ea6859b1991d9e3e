"""Text -> statements. Lark (LALR, contextual lexer) builds a tree; a Transformer turns it into
the frozen dataclasses of `ast.py`, refusing what the grammar alone cannot (fenecql.md §2
"Rules the grammar alone does not say"). Errors are 400s that name the line, the column and
the offending text, with a caret under it:

    position 14 (line 1, column 15): expected a value, found `where`
      get jobs where where
                     ^
"""

from __future__ import annotations

import difflib
import importlib.resources
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from lark import Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lark import PostLex

from ..errors import FenecError
from . import ast as A
from .ast import MAX_DEPTH, MAX_NAME, MAX_PATH_KEYS, RESERVED
from .grammar_cache import build as build_parser
from .literals import read_put
from .literals import unescape as _unescape

TYPES = {
    "bool": "bool", "int": "int", "float": "float", "text": "text", "string": "text", "bytes": "bytes",
    "blob": "bytes", "timestamp": "timestamp", "timestamptz": "timestamp", "json": "json", "geo": "geo",
}
ANNOTATIONS = {"hash", "unique", "sorted", "geo", "ttl"}

DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

# What a syntax error names for the terminals it expected: the words a user types, never the
# grammar's own names (`add_op`). Several terminals may read the same (INT, DECIMAL, NEG_NUM are
# all "a number"); a terminal mapped to "" is left out (a token claim is refused in a client's
# statement anyway).
_EXPECT_NAMES = {
    "NAME": "a name", "PATH": "a path", "INT": "a number", "DECIMAL": "a number", "NEG_NUM": "a number",
    "STRING": "a text", "PARAM": "a parameter", "DURATION": "a duration", "CLAIM": "",
    "CMP_OP": "a comparison", "ADD_OP": "`+` or `-`", "MUL_OP": "`*`, `/` or `%`", "STAR": "`*`",
    "LPAR": "`(`", "RPAR": "`)`", "LSQB": "`[`", "RSQB": "`]`", "LBRACE": "`{`", "RBRACE": "`}`",
    "COMMA": "`,`", "CONST_OPEN": "", "CONST_MORE": "", "COLON": "`:`", "_SEMI": "`;`", "$END": "the end of the text",
}
# Keywords that start a statement: after a complete statement the parser would take any of them, and
# listing all ten hides the clause a user meant; they are named once, as "another statement".
_STATEMENT_WORDS = frozenset({"PUT", "INSERT", "SET", "UPDATE", "DEL", "DELETE", "GET", "_CREATE", "_DROP",
                              "PAUSE", "RESUME", "UNLIMIT", "SHOW"})
# The order a list of expected words is given in: the clauses first, then values, then the rest.
_FIRST = ("WHERE", "SELECT", "ORDER", "LIMIT", "OFFSET", "COUNT", "REQUIRE", "RETURNING", "AS", "ASC", "DESC",
          "AND", "OR", "THEN", "WHEN", "ELSE", "END", "CMP_OP", "ADD_OP", "MUL_OP", "IN", "IS", "HAS", "NOT")
_SHOWN = 10

_GRAMMAR = importlib.resources.files(__package__).joinpath("grammar.lark").read_text(encoding="utf-8")

def _qerr(msg: str) -> FenecError:
    return FenecError("query", msg)


class _Located(Exception):
    """A refusal found while building the tree, with where in the text it stands."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message


def _name(tok: Token, what: str = "name") -> str:
    s = str(tok)
    if s.lower() in RESERVED:
        raise _Located(tok.start_pos or 0, f"`{s}` is a keyword and cannot be a {what}")
    if len(s) > MAX_NAME:
        raise _Located(tok.start_pos or 0, f"a {what} is at most {MAX_NAME} characters")
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


def _duration_ms(s: str, what: str) -> int:
    """`30s`, `1m`, ... as ms (whole ms, s, m, h or d, as `@ttl` takes them)."""
    i = 0
    while s[i].isdigit():
        i += 1
    unit = s[i:]
    if unit not in DURATION_MS:
        raise _qerr(f"{what} is whole ms, s, m, h or d, not `{s}`")
    ms = int(s[:i]) * DURATION_MS[unit]
    if ms < 1:
        raise _qerr(f"{what} is at least 1ms")
    return ms


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
class _ToAst(Transformer):
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
        s = str(c[0])
        i = 0
        while s[i].isdigit():
            i += 1
        return A.Duration(int(s[:i]), s[i:])

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
            raise _Located(src.start_pos or 0, "`in` takes a list or a token claim: write `in [$1, $2]`")
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
        if name == "ttl":
            if len(c) < 2:
                raise _qerr("`@ttl` takes a duration: `@ttl(30m)`")
            s = str(c[1])
            i = 0
            while s[i].isdigit():
                i += 1
            unit = s[i:]
            if unit not in DURATION_MS:
                raise _qerr(f"a @ttl duration is whole ms, s, m, h or d, not `{s}`")
            return ("ttl", int(s[:i]) * DURATION_MS[unit])
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

    # ---------------------------------------------------------------- queue controls
    def _queue_target(self, c):
        coll = _name(_toks(c, "NAME")[0], "collection name")
        names = _toks(c, "STRING")
        return coll, (_unescape(str(names[0])[1:-1]) if names else None)

    def pause_queue(self, c):
        return A.QueueControl("pause", *self._queue_target(c), None, None, None, None)

    def resume_queue(self, c):
        return A.QueueControl("resume", *self._queue_target(c), None, None, None, None)

    def queue_measure(self, c):
        kind = str(c[0]).lower()
        if kind == "leased":
            return ("measure", kind, None)
        return ("measure", kind, _duration_ms(str(c[1]), "a rate limit's period"))

    def per_field(self, c):
        return ("per", _name(c[0], "field name"))

    def limit_queue(self, c):
        coll, queue = self._queue_target(c)
        n = _int(_toks(c, "INT")[0])
        if n < 1:
            raise _qerr("a limit is at least 1: to stop a queue, pause it")
        measure = next(x for x in c if isinstance(x, tuple) and x[0] == "measure")
        by = next((x[1] for x in c if isinstance(x, tuple) and x[0] == "per"), None)
        return A.QueueControl("limit", coll, queue, measure[1], n, measure[2], by)

    def unlimit_queue(self, c):
        coll, queue = self._queue_target(c)
        kinds = _toks(c, "LEASED", "CLAIMED")
        by = next((x[1] for x in c if isinstance(x, tuple) and x[0] == "per"), None)
        return A.QueueControl("unlimit", coll, queue, str(kinds[0]).lower() if kinds else None, None, None, by)

    def show_queues(self, c):
        return A.ShowQueues()

    def text(self, c):
        return [x for x in c if isinstance(x, A.Statement)]


# `del` is a Python keyword: lark calls the rule's method by name.
setattr(_ToAst, "del", _ToAst.del_)

_TRANSFORMER = _ToAst()

_OPENS = frozenset({"LPAR", "LSQB", "CONST_OPEN", "LBRACE"})
_CLOSES = frozenset({"RPAR", "RSQB", "RBRACE"})


class _Guard(PostLex):
    """The nesting limit, counted on the tokens as the lexer hands them to the parser (so a `(`
    inside a text or a comment is no nesting: the lexer has already read those as one token).

    It replaces a pre-check that ran a regex over the whole text before lark: at an
    unterminated quote that regex rescanned to the end of the text, once per later quote, so
    `(` x 600, `"`, `\\"` x 50 000 (100 KB) held the GIL for 30 s. Here each token is looked
    at once, when lark reads it, and a refusal comes at the 513th open bracket or the
    2049th `and`/`or`, having read nothing past it. LALR keeps its stack in a list and the
    transformer runs as each rule is reduced, so nothing recurses on the way: the limit is
    there for what consumes the statement after (the compiler, the planner)."""

    always_accept = ()

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        links = 0
        for tok in stream:
            kind = tok.type
            if kind in _OPENS:
                depth += 1
                if depth > MAX_DEPTH:
                    raise _qerr(f"expression too deep: more than {MAX_DEPTH} levels of nesting")
            elif kind in _CLOSES:
                depth -= 1
            elif kind == "AND" or kind == "OR":
                links += 1
                if links > 4 * MAX_DEPTH:
                    raise _qerr(f"expression too deep: more than {MAX_DEPTH} links")
            yield tok


# The transformer runs inside the LALR parser, as each rule is reduced: no parse tree is built
# and walked after (measured on `in [1, 1, ...]`: the tree and its walk were a third of the time
# and most of the memory of a parse).
_LARK = build_parser(_GRAMMAR, parser="lalr", lexer="contextual", propagate_positions=False, maybe_placeholders=False,
                     transformer=_TRANSFORMER, postlex=_Guard())


def _caret(text: str, pos: int) -> tuple[int, int, str]:
    line = text.count("\n", 0, pos) + 1
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    if end < 0:
        end = len(text)
    col = pos - start + 1
    src = text[start:end]
    if len(src) > 200:
        lo = max(0, col - 100)
        src = src[lo:lo + 200]
        col -= lo
    return line, col, f"\n  {src}\n  {' ' * (col - 1)}^"


def _word(t: str) -> str | None:
    """The keyword a terminal stands for (`WHERE` -> `where`, `_CREATE` -> `create`), or None."""
    w = t.lstrip("_").lower()
    return w if w.isalpha() and t not in _EXPECT_NAMES else None


def _expected(tokens: set[str]) -> str:
    """The expected terminals as a user reads them: keywords as typed, in clause order, each
    name once, the statement keywords as one entry, at most `_SHOWN` and then `...`."""
    rank = {t: i for i, t in enumerate(_FIRST)}
    names: list[str] = []
    statement = False
    for t in sorted(tokens, key=lambda t: (rank.get(t, len(rank)), t)):
        if t in _STATEMENT_WORDS:
            statement = True
            continue
        name = _EXPECT_NAMES.get(t)
        if name is None:
            word = _word(t)
            name = f"`{word}`" if word else ""
        if name and name not in names:
            names.append(name)
    if statement and all(n in ("the end of the text", "`;`", "`select`", "`limit`") for n in names):
        # nothing but a statement may come: name the keywords that start one
        names = [f"`{w}`" for w in ("get", "put", "insert", "set", "update", "del", "delete", "select", "create",
                                    "drop", "pause", "resume", "limit", "unlimit", "show")]
        statement = False
    if not names:
        return "another statement" if statement else "something else"
    if len(names) > _SHOWN:
        names = names[:_SHOWN] + ["..."]
    return ", ".join(names + ["another statement"] * statement)


def _did_you_mean(found: str, tokens: set[str]) -> str:
    """` (did you mean `where`?)` when `found` is a word close to a keyword the parser expected."""
    if not found.isidentifier():
        return ""
    words = sorted({w for t in tokens if (w := _word(t))})
    close = difflib.get_close_matches(found.lower(), words, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close and close[0] != found.lower() else ""


_CLOSER_OF = {"LPAR": "RPAR", "LSQB": "RSQB", "CONST_OPEN": "RSQB", "LBRACE": "RBRACE"}
_CLOSE_TEXT = {"RPAR": ")", "RSQB": "]", "RBRACE": "}"}
_OPEN_TEXT = {"RPAR": "(", "RSQB": "[", "RBRACE": "{"}


def _innermost_open(text: str) -> str | None:
    """The closing bracket the text still owes last (`RSQB` for `x in [1, (2)`), None if none;
    read from the tokens, so a bracket inside a text literal does not count."""
    stack: list[str] = []
    try:
        for tok in _LARK.lex(text):
            if tok.type in _CLOSER_OF:
                stack.append(_CLOSER_OF[tok.type])
            elif tok.type in _CLOSE_TEXT and stack and stack[-1] == tok.type:
                stack.pop()
    except UnexpectedInput:
        return None
    return stack[-1] if stack else None


def _syntax_error(text: str, e: UnexpectedInput) -> FenecError:
    pos = getattr(e, "pos_in_stream", None)
    if pos is None:
        pos = len(text)
    line, col, caret = _caret(text, pos)
    where = f"position {pos} (line {line}, column {col})"
    if isinstance(e, UnexpectedCharacters):
        ch = text[pos] if pos < len(text) else ""
        rest = text[pos:]
        if ch in "\"'":
            msg = "unterminated text: a quote opens it and none closes it"
        elif ch == "!":
            msg = "a lone `!` is not an operator: write `!=` or `not`"
        elif ch == "." and rest[1:2].isdigit():
            msg = "a decimal needs a digit before the point: write `0.5`"
        elif ch == ".":
            msg = "a number or a name cannot end with `.`: a decimal needs a digit after the point"
        elif ch == "$":
            msg = "`$` starts a parameter (`$1`) or a token claim (`$jwt.sub`)"
        else:
            msg = f"unexpected character `{ch}`"
        return _qerr(f"{where}: {msg}{caret}")
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        expected = getattr(e, "expected", None) or getattr(e, "accepts", None) or set()
        closer = _innermost_open(text) if len(expected) <= 3 else None
        if "END" in expected:
            msg = "expected `end` to close `case`"
        elif closer is not None and closer in expected:
            msg = f"expected `{_CLOSE_TEXT[closer]}` to close `{_OPEN_TEXT[closer]}`"
        else:
            msg = f"the statement ends too soon: expected {_expected(set(expected))}"
        return _qerr(f"{where}: {msg}{caret}")
    assert isinstance(e, UnexpectedToken)
    tok = e.token
    found = str(tok)
    expected = set(e.accepts or e.expected or ())
    if found.lower() in RESERVED and ("NAME" in expected):
        msg = f"`{found}` is a keyword and cannot be a name here"
    elif "END" in expected and tok.type in ("GET", "PUT", "SET", "DEL", "WHERE", "ORDER", "LIMIT", "$END"):
        msg = "expected `end` to close `case`"
    elif tok.type == "CMP_OP" and "CMP_OP" not in expected:
        msg = "comparisons do not chain: write `a < b and b < c`"
    elif tok.type == "ADD_OP" and found == "-" and "NEG_NUM" in expected:
        msg = "a minus sign stands only before a number: write `0 - x`"
    else:
        msg = f"expected {_expected(expected)}, found `{found}`{_did_you_mean(found, expected)}"
    return _qerr(f"{where}: {msg}{caret}")


def parse(text: str) -> list[A.Statement]:
    """Parse a text of one or more statements. Raises FenecError (400) on bad input.

    Time and memory are linear in the text: each token is matched once by a possessive regex,
    the parser keeps an explicit stack, the AST is built as rules are reduced, and a text
    literal is unescaped in chunks (tests/unit/test_parser_linear.py counts them)."""
    return read(text)[0]


def read(text: str) -> tuple[list[A.Statement], list[int]]:
    """`parse(text)`, and the highest `$n` each statement names (0: none), which every run
    checks are bound. A put of literal documents is read without lark (literals.py), which
    counts its parameters as it reads; lark reads every other text, and names every error."""
    if not isinstance(text, str):
        raise _qerr("a statement is text")
    short = read_put(text)
    if short is not None:
        return short
    try:
        stmts: list[A.Statement] = _LARK.parse(text)  # type: ignore[assignment]  # the transformer's `text`
    except UnexpectedInput as e:
        raise _syntax_error(text, e) from None
    except _Located as inner:
        line, col, caret = _caret(text, inner.pos)
        raise _qerr(f"position {inner.pos} (line {line}, column {col}): {inner.message}{caret}") from None
    except RecursionError:
        raise _qerr(f"expression too deep: more than {MAX_DEPTH} levels") from None
    except ValueError:  # int() refuses a literal of thousands of digits
        raise _qerr("a number in the statement is out of range (64-bit)") from None
    if not stmts:
        raise _qerr("no statement: the text holds none")
    return stmts, [A.highest_param(s) for s in stmts]


def _raise_limit() -> None:
    # Lark's transformer recurses once per tree level; 512 levels of nesting need room.
    if sys.getrecursionlimit() < 20000:
        sys.setrecursionlimit(20000)


_raise_limit()
__all__ = ["parse", "read", "Tree"]
