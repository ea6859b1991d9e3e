"""A syntax error as a user reads it: the position with its line and column and a caret under
the text, what the parser expected in the words a user types (never the grammar's own names),
a close keyword suggested for a misspelt one, and named messages for the common mistakes
(an unclosed bracket or `case`, a chained comparison, a lone `!`, an unterminated text).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import FenecError
from .ast import RESERVED

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
                              "PAUSE", "RESUME", "FIRE", "UNLIMIT", "SHOW"})
# The order a list of expected words is given in: the clauses first, then values, then the rest.
_FIRST = ("WHERE", "SELECT", "ORDER", "LIMIT", "OFFSET", "COUNT", "REQUIRE", "RETURNING", "AS", "ASC", "DESC",
          "AND", "OR", "THEN", "WHEN", "ELSE", "END", "CMP_OP", "ADD_OP", "MUL_OP", "IN", "IS", "HAS", "NOT")
_SHOWN = 10


def _qerr(msg: str) -> FenecError:
    return FenecError("query", msg)


def caret(text: str, pos: int) -> tuple[int, int, str]:
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


def _innermost_open(text: str, lex: Callable[[str], Iterable[Token]]) -> str | None:
    """The closing bracket the text still owes last (`RSQB` for `x in [1, (2)`), None if none;
    read from the tokens, so a bracket inside a text literal does not count."""
    stack: list[str] = []
    try:
        for tok in lex(text):
            if tok.type in _CLOSER_OF:
                stack.append(_CLOSER_OF[tok.type])
            elif tok.type in _CLOSE_TEXT and stack and stack[-1] == tok.type:
                stack.pop()
    except UnexpectedInput:
        return None
    return stack[-1] if stack else None


def syntax_error(text: str, e: UnexpectedInput, lex: Callable[[str], Iterable[Token]]) -> FenecError:
    """The 400 of a text lark refused (`lex`: the parser's lexer, to find what is left open)."""
    pos = getattr(e, "pos_in_stream", None)
    if pos is None:
        pos = len(text)
    line, col, shown = caret(text, pos)
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
        return _qerr(f"{where}: {msg}{shown}")
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        expected = getattr(e, "expected", None) or getattr(e, "accepts", None) or set()
        closer = _innermost_open(text, lex) if len(expected) <= 3 else None
        if "END" in expected:
            msg = "expected `end` to close `case`"
        elif closer is not None and closer in expected:
            msg = f"expected `{_CLOSE_TEXT[closer]}` to close `{_OPEN_TEXT[closer]}`"
        else:
            msg = f"the statement ends too soon: expected {_expected(set(expected))}"
        return _qerr(f"{where}: {msg}{shown}")
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
    return _qerr(f"{where}: {msg}{shown}")
