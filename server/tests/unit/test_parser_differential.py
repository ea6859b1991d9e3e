"""The literal reader and lark agree (ql/literals.py): statements generated from `grammar.lark` are read
both ways, and wherever the literal reader answers, lark answers the same statements (the same nodes,
the same call positions); wherever lark refuses a text (any error), the literal reader declines it, so
`parse` names lark's error. A text's shape, its literal values as parameters, reads to the same
statements once the parameters are bound back to their values.

Two generators, both hypothesis's `from_lark` on the grammar file itself: the whole language
(the literal reader must decline nearly all of it, and take none that lark refuses), and the put rules
with an expression cut down to its primaries (literals, parameters, calls, lists, objects, names,
durations, ...), where most texts are the literal reader's to take. Each token is followed by a space,
a line break, a tab or nothing, so tokens also run together; half the puts are plain: documents
of literals only, their tokens ASCII, each followed by a space.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from typing import Any

from fenecdb_server.errors import FenecError
from fenecdb_server.ql import ast as A
from fenecdb_server.ql import parser as P
from fenecdb_server.ql.literal_nodes import BY_SLOTS as _BY_SLOTS
from fenecdb_server.ql.literals import read_put, shape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark
from lark import Lark
from lark.exceptions import UnexpectedInput

GRAMMAR = importlib.resources.files("fenecdb_server.ql").joinpath("grammar.lark").read_text(encoding="utf-8")

# The put rules with `expr` cut down to one primary, and the primaries to the values a document
# holds (and a few the literal reader must decline: names, paths, claims, durations, parentheses).
_EXPR = "?expr: or_expr\n"
_PRIMARY = GRAMMAR[GRAMMAR.index("?primary:"):GRAMMAR.index("call:")]
assert _EXPR in GRAMMAR and _PRIMARY.count("|") == 9, "grammar.lark changed: update the cut below"
PUTS = GRAMMAR.replace(_EXPR, "?expr: primary\n").replace(_PRIMARY, """?primary: literal
        | PARAM -> param
        | CLAIM -> claim
        | NAME -> field
        | PATH -> path
        | call
        | "(" expr ")" -> paren
        | list
        | object
""")

# ... and the same with the primaries of a document of literals only, no `if absent`: the texts the
# literal reader (ql/literals.py) takes.
_LITERAL_PRIMARIES = """?primary: literal
        | PARAM -> param
        | call
        | list
        | object
"""
LITERAL_PUTS = GRAMMAR.replace(_EXPR, "?expr: primary\n").replace(_PRIMARY, _LITERAL_PRIMARIES).replace(
    "documents if_absent? put_require?", "documents put_require?")
assert LITERAL_PUTS.count("documents put_require?") == 1

_SEPARATORS = st.sampled_from([" ", " ", " ", "", "\n", "\t", "  "])
_ASCII = st.characters(codec="ascii", exclude_categories=("Cc",)) | st.sampled_from("\n\t")


def _tokens(grammar: Lark, plain: bool) -> dict[str, st.SearchStrategy[str]]:
    """Each terminal's strategy: ASCII (the literal reader's alphabet) or any character, then a
    separator. `plain`: ASCII, a space after each token, and a space where the grammar ignores
    something (a comment, any white space)."""
    out: dict[str, st.SearchStrategy[str]] = {}
    for t in grammar.terminals:
        if t.name in grammar.ignore_tokens:
            if plain:
                out[t.name] = st.just(" ")
            continue
        pattern = re.compile(t.pattern.to_regexp())
        ascii_token = st.from_regex(pattern, fullmatch=True, alphabet=_ASCII)
        if plain:
            out[t.name] = ascii_token.map(lambda s: s + " ")
        else:
            token = ascii_token | st.from_regex(pattern, fullmatch=True)
            out[t.name] = st.tuples(token, _SEPARATORS).map("".join)
    return out


_WHOLE = Lark(GRAMMAR, parser="lalr", lexer="contextual")
_PUTS = Lark(PUTS, parser="lalr", lexer="contextual", start="put")
_LITERAL_PUTS = Lark(LITERAL_PUTS, parser="lalr", lexer="contextual", start="put")
whole_texts = from_lark(_WHOLE, explicit=_tokens(_WHOLE, False))
put_texts = from_lark(_PUTS, start="put", explicit=_tokens(_PUTS, False)) | from_lark(
    _LITERAL_PUTS, start="put", explicit=_tokens(_LITERAL_PUTS, True))


def _lark(text: str) -> Any:
    """What lark reads: the statements, or the kind of error."""
    try:
        return P._LARK.parse(text)
    except (UnexpectedInput, FenecError, P.Located, ValueError, RecursionError) as e:
        return type(e).__name__


def _positions(stmts: list) -> list[int]:
    return [n.pos for s in stmts for n in A.walk(s) if isinstance(n, A.Call)]


def _bind(node: Any, values: list[Any]) -> Any:
    """`node` with each `Param(n)` replaced by `Lit(values[n - 1])`."""
    if isinstance(node, A.Param):
        return A.Lit(values[node.n - 1])
    if isinstance(node, tuple):
        return tuple(_bind(x, values) for x in node)
    if isinstance(node, list):
        return [_bind(x, values) for x in node]
    if isinstance(node, (A.Expr, A.Statement, A.Entry)):
        fields = {f: _bind(getattr(node, f), values) for f in A._FIELDS[type(node)]}
        return type(node)(**fields)
    return node


def agree(text: str) -> bool:
    """Check one text both ways; True when the literal reader took it."""
    short = read_put(text)
    by_lark = _lark(text)
    if short is None:
        assert shape(text) is None, text
        return False
    stmts, needs = short
    assert stmts == by_lark, (text, stmts, by_lark)
    assert _positions(stmts) == _positions(by_lark), text
    assert needs == [A.highest_param(s) for s in by_lark], text
    shaped = shape(text)
    if shaped is not None:
        shape_text, values = shaped
        again = read_put(shape_text)
        assert again is not None, shape_text
        assert again[1] == [len(values)]
        assert _bind(again[0], values) == stmts, (text, shape_text)
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(whole_texts)
def test_the_whole_language(text: str) -> None:
    agree(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(put_texts)
def test_puts(text: str) -> None:
    agree(text)


# Texts the literal reader must take (so the generated ones above are not all declined), and texts at
# its edges, each checked against lark.
TAKEN = [
    'put jobs {payload: {to: "user7@example.com", n: 7}, run_at: now(), attempts: 0}',
    "insert into jobs [{a: 1}, {b: -2.5e3, c: [1, 'x', TRUE, null, {}]}] require 2;",
    "put jobs {'a.b': 'x\\'y', c: 1_000, d: $2, e: \"\\n\\t\\0\\q\"}",
    ";; PUT into {x: NOW ( ), y: {true: 1, 'k': []}} ;",
    "insert into into {}",
    "put jobs $3",
    "put jobs {a: -0, b: -9223372036854775808, c: 9223372036854775807, d: 1e308, e: 0.5E-3}",
    "put jobs {a.b.c: 1, f: from(1, [2], {x: 'y'})}",
]
DECLINED = [
    "put jobs {true: 1}", "put jobs {a: 5m}", "put jobs {a: 1 + 2}", "put jobs {a: 9223372036854775808}",
    "put jobs {a: -9223372036854775809}", "put jobs {a: 1e309}", "put jobs {a: 1} put jobs {b: 2}",
    "put jobs {a: where()}", "put jobs {a: 1, a: 2}", "put jobs {a: {b: 1, b: 2}}", "put jobs {a: x}",
    "put jobs {a: 1} -- a comment", "put jobs {a: 1.}", "put jobs {a: $0}", "put jobs {a: $jwt.sub}",
    "put jobs {a: 1} if absent", "put jobs {é: 1}", "put jobs {a: 1} require 1.5", "put jobs {a: - 1}",
    "insert into {a: 1}", "put where {a: 1}", "put jobs {" + "x" * 129 + ": 1}", "put jobs {a: 1_}",
    "put jobs {a: \"open}", "put jobs []", "put jobs {a: [1,]}", "put jobs {a: 1}}", "get jobs",
]


def test_the_short_way_takes_literal_puts() -> None:
    for text in TAKEN:
        assert agree(text), text


def test_the_short_way_declines_the_rest() -> None:
    for text in DECLINED:
        assert not agree(text), text


def test_a_shape_names_values_only() -> None:
    got = shape("put jobs [{n: 7, to: 'a', at: now(), p: {k: [1, null]}}] require 1")
    assert got == ("put jobs [{n: $1, to: $2, at: now(), p: {k: [$3, $4]}}] require 1", [7, "a", 1, None])
    assert shape("put jobs {n: $1, m: 2}") is None  # a text naming parameters keeps its own
    assert shape("put jobs {at: ts('2024-01-01')}") is None  # a call's arguments stay as written
    assert shape("get jobs where n = 7") is None


def test_the_generators_reach_the_short_way() -> None:
    """Most generated puts are the literal reader's to take: the differential test is not vacuous."""
    taken = 0
    seen = 0

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(put_texts)
    def count(text: str) -> None:
        nonlocal taken, seen
        seen += 1
        taken += agree(text)

    count()
    assert taken >= seen // 10, (taken, seen)




def test_the_nodes_built_by_their_slots_are_whole() -> None:
    """The literal reader fills the slots of the nodes it builds most rather than run their `__init__`:
    it fills every field each of those classes has, and none of them does more at construction."""
    for cls, names in _BY_SLOTS.items():
        assert tuple(f.name for f in dataclasses.fields(cls)) == names, cls
        assert not hasattr(cls, "__post_init__"), cls
