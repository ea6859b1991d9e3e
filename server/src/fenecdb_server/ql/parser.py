"""Text -> statements. Lark (LALR, contextual lexer) builds a tree; a Transformer turns it into
the frozen dataclasses of `ast.py`, refusing what the grammar alone cannot (fenecql.md §2
"Rules the grammar alone does not say"). Errors are 400s that name the line, the column and
the offending text, with a caret under it:

    position 14 (line 1, column 15): expected a value, found `where`
      get jobs where where
                     ^
"""

from __future__ import annotations

import importlib.resources
import sys
from collections.abc import Iterator

from lark import Token, Tree
from lark.exceptions import UnexpectedInput
from lark.lark import PostLex

from ..errors import FenecError
from . import ast as A
from .ast import MAX_DEPTH
from .control_statements import ControlStatements
from .grammar_cache import build as build_parser
from .literals import read_put
from .syntax_errors import caret, syntax_error
from .to_ast import Located

_GRAMMAR = importlib.resources.files(__package__).joinpath("grammar.lark").read_text(encoding="utf-8")
_TRANSFORMER = ControlStatements()


def _qerr(msg: str) -> FenecError:
    return FenecError("query", msg)


_OPENS = frozenset({"LPAR", "LSQB", "CONST_OPEN", "LBRACE"})
_CLOSES = frozenset({"RPAR", "RSQB", "RBRACE"})


class _Guard(PostLex):
    """The nesting limit, counted on the tokens as the lexer hands them to the parser (so a `(`
    inside a text or a comment is no nesting: the lexer has already read those as one token).

    A regex over the whole text before lark would rescan to the end of the text at an
    unterminated quote, once per later quote: quadratic in the text (server/README.md, "Stalls
    measured", has the quote attack). Here each token is looked at once, when lark reads it, and a refusal comes at the 513th open bracket or the
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
# and walked after: a tree and its walk would be a large part of a parse's time and most of its
# memory (bench/README.md, "Numbers the code's comments used to carry").
_LARK = build_parser(_GRAMMAR, parser="lalr", lexer="contextual", propagate_positions=False, maybe_placeholders=False,
                     transformer=_TRANSFORMER, postlex=_Guard())



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
        raise syntax_error(text, e, _LARK.lex) from None
    except Located as inner:
        line, col, shown = caret(text, inner.pos)
        raise _qerr(f"position {inner.pos} (line {line}, column {col}): {inner.message}{shown}") from None
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
