"""Literals as the language writes them, and the short way for a put of literal documents.

`read_put(text)` reads the statement most texts written by hand are, a put of documents whose
values are literals, without lark:

    put|insert [into] <name> <document> | [<document>, ...] | $n   [require <int>]   [;...]

a document's keys a name, a path or a text; its values numbers, texts, `true`, `false`, `null`,
parameters, objects, lists and calls (`now()`) of those. It answers exactly the statements
`parser.parse` would answer for the text (the same `ast` nodes), or None: for anything else
(another statement, an expression, a duration, a comment, a character outside ASCII between the
literals, a name that is a keyword, a duplicate key, a number out of range, ...) it declines,
and the caller parses the text with lark, which answers it or names the error. So the grammar
stays the one definition of the language: this reader only ever takes a subset of it, and
`tests/unit/test_parser_differential.py` generates statements from the grammar and checks that
the two agree on every one this reader takes.

Why: lark's LALR loop costs a few microseconds a token in Python; this loop, compiled with the
hot modules (setup.py), reads a document of literals at a few hundred nanoseconds a token
(bench/README.md, "Statements written with literals"). Each character is looked at a bounded
number of times, and nothing recurses deeper than `_DEEPEST`, so time and memory stay linear.
"""

from __future__ import annotations

import re
from typing import Any, Final

from . import ast as A
from .ast import MAX_NAME, MAX_PATH_KEYS, RESERVED
from .escapes import unescape
from .literal_nodes import new_call as _call
from .literal_nodes import new_entry as _entry
from .literal_nodes import new_list as _list
from .literal_nodes import new_lit as _lit
from .literal_nodes import new_object as _object

# The module's constants are `Final`: compiled, any other module-level name is a dictionary lookup
# each time it is read.
_RESERVED: Final = RESERVED
_MAX_NAME: Final = MAX_NAME
_MAX_PATH_KEYS: Final = MAX_PATH_KEYS
_LIT: Final = A.Lit
# The grammar's STRING terminal, for a text holding escapes (one without is found with str.find).
_DOUBLE = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S)
_SINGLE = re.compile(r"'[^'\\]*+(?:\\.[^'\\]*+)*+'", re.S)

_DEEPEST: Final = 64  # objects and lists nested deeper are left to lark (which allows MAX_DEPTH)
_INT_MAX: Final = 2**63 - 1
_DIGITS_MAX: Final = 40  # a longer number is left to lark (int() refuses thousands of digits)


# Character classes by code point, ASCII only: any other character makes the reader decline. The
# end of the text reads as -1, in no class. (Compared rather than looked up in a table: compiled,
# comparing machine integers costs less than reading a list's item.)
def _space(c: int) -> bool:
    return c == 32 or c == 10 or c == 9 or c == 13


def _letter(c: int) -> bool:
    """A letter or `_`: what starts a name."""
    return 97 <= c <= 122 or 65 <= c <= 90 or c == 95


def _digit(c: int) -> bool:
    return 48 <= c <= 57


def _word_char(c: int) -> bool:
    return 97 <= c <= 122 or 65 <= c <= 90 or 48 <= c <= 57 or c == 95


class _Decline(Exception):
    """The text is not one this reader takes: lark reads it."""


def read_put(text: str) -> tuple[list[A.Statement], list[int]] | None:
    """The statements `text` holds when it is one put of literal documents, and the highest
    `$n` each names (0: none); else None."""
    r = _Reader(text, False)
    try:
        stmt = r.statement()
    except _Decline:
        return None
    assert stmt is not None
    return [stmt], [r.top]


def shape(text: str) -> tuple[str, list[Any]] | None:
    """A put of literal documents naming no parameter, as the same put with each literal value
    a parameter, and their values: `put jobs {n: 7, to: "a"}` is `put jobs {n: $1, to: $2}`
    with [7, "a"]. Two texts that differ only in their values have one shape, so the engine
    parses and prepares it once (engine.py). Only values become parameters (a key, `require`
    and a call's arguments stay as written), so the shape runs as the text would: a document's
    value is worked out to the same value from a literal or from a parameter holding it, and
    converted to its field's type by the same conversion. None for any other text, and for
    every text `read_put` declines."""
    r = _Reader(text, True)
    try:
        r.statement()
    except _Decline:
        return None
    spans = r.spans
    if not spans:
        return None
    pieces: list[str] = []
    at = 0
    for k in range(0, len(spans), 2):
        pieces.append(text[at:spans[k]])
        pieces.append(_PARAMS[k // 2] if k < 2 * len(_PARAMS) else "$" + str(k // 2 + 1))
        at = spans[k + 1]
    pieces.append(text[at:])
    return "".join(pieces), r.values


_PARAMS: Final = [f"${n}" for n in range(1, 257)]  # the first parameters' names, made once
_NOTHING: Final = A.Lit(None)  # what a value reads as while shaping: only its span and value are kept


class _Reader:
    __slots__ = ("text", "n", "at", "depth", "top", "shaping", "spans", "values", "targets", "texts",
                 "ints", "words", "entries", "checked")

    def __init__(self, text: str, shaping: bool) -> None:
        self.text = text
        self.n = len(text)
        self.at = 0
        self.depth = 0
        self.top = 0  # the highest `$n` read
        self.shaping = shaping
        self.spans: list[int] = []  # while shaping: each literal value's start and end
        self.values: list[Any] = []  # ... and its value
        # One node for each key and for each equal text, integer, boolean or null, shared by the
        # statement's documents (nodes are immutable): a thousand documents of three fields hold
        # three targets. A float is not shared: -0.0 and 0.0 are equal and not the same value.
        self.targets: dict[str, A.Target] = {}
        self.texts: dict[str, A.Lit] = {}
        self.ints: dict[int, A.Lit] = {}
        self.words: dict[str, A.Lit] = {}  # true, false and null, by the word lower-cased
        # ... and one entry for each key with each shared literal (`attempts: 0`), by the literal's id
        self.entries: dict[tuple[str, int], A.Entry] = {}
        self.checked: set[str] = set()  # the names and paths written unquoted that passed their checks

    # ---------------------------------------------------------------- characters

    def _code(self, i: int) -> int:
        """The character at i as a code point below 128; -1 at the end. Declines past ASCII."""
        if i >= self.n:
            return -1
        c = ord(self.text[i])
        if c >= 128:
            raise _Decline()
        return c

    def _skip(self) -> int:
        """Past spaces; the next character's code (-1 at the end). A comment declines (its
        reading next to `-` is lark's to make)."""
        i = self.at
        n = self.n
        text = self.text
        while i < n:
            c = ord(text[i])
            if c >= 128:
                raise _Decline()
            if not _space(c):
                self.at = i
                if c == 35:  # '#'
                    raise _Decline()
                return c
            i += 1
        self.at = n
        return -1

    def _word(self) -> str:
        """A name at `at` (the caller saw a letter or `_` there): ASCII word characters; one
        past ASCII right after them declines (lark's names take any letter)."""
        text = self.text
        start = self.at
        i = start + 1
        n = self.n
        while i < n:
            c = ord(text[i])
            if c >= 128:
                raise _Decline()
            if not _word_char(c):
                break
            i += 1
        self.at = i
        return text[start:i]

    def _expect(self, code: int) -> None:
        if self._skip() != code:
            raise _Decline()
        self.at += 1

    # ---------------------------------------------------------------- the statement

    def statement(self) -> A.Statement | None:
        """The put read; None while shaping (nothing is built then)."""
        c = self._skip()
        while c == 59:  # leading `;`
            self.at += 1
            c = self._skip()
        if not _letter(c):
            raise _Decline()
        verb = self._word().lower()
        if verb != "put" and verb != "insert":
            raise _Decline()
        c = self._skip()
        if not _letter(c):
            raise _Decline()
        coll = self._word()
        if verb == "insert" and coll.lower() == "into":  # `into` is the keyword where it may be
            c = self._skip()
            if not _letter(c):
                raise _Decline()
            coll = self._word()
        _check_name(coll)
        c = self._skip()
        docs: tuple[tuple[A.Entry, ...], ...] | None = None
        param: int | None = None
        if c == 123:  # {
            docs = (self.document(),)
        elif c == 91:  # [
            self.at += 1
            self.depth = 1
            out = [self.document()]
            c = self._skip()
            while c == 44:  # ,
                self.at += 1
                out.append(self.document())
                c = self._skip()
            if c != 93:
                raise _Decline()
            self.at += 1
            self.depth = 0
            docs = tuple(out)
        elif c == 36:  # $
            param = self.param()
        else:
            raise _Decline()
        require: int | None = None
        c = self._skip()
        if _letter(c):
            if self._word().lower() != "require":
                raise _Decline()
            c = self._skip()
            if not _digit(c):
                raise _Decline()
            written: Any = self.number(False)  # Any: compiled, a float here would fail the int check
            if type(written) is not int:
                raise _Decline()
            require = written
            c = self._skip()
        while c == 59:  # trailing `;`
            self.at += 1
            c = self._skip()
        if c >= 0:
            raise _Decline()
        if self.shaping:
            return None
        return A.Put(verb, coll, docs, param, False, None, require)

    def document(self) -> tuple[A.Entry, ...]:
        self._expect(123)
        self.depth += 1
        entries: list[A.Entry] = []
        seen: set[str] = set()
        c = self._skip()
        if c == 125:  # }
            self.at += 1
            self.depth -= 1
            return ()
        while True:
            key = self.target(c)
            self._expect(58)  # :
            value = self.value()
            if key in seen:
                raise _Decline()
            seen.add(key)
            if not self.shaping:
                target = self.targets.get(key)
                if target is None:
                    target = self.targets[key] = _target(key)
                if type(value) is _LIT and type(value.value) is not float:  # a shared literal
                    both = (key, id(value))
                    entry = self.entries.get(both)
                    if entry is None:
                        entry = self.entries[both] = _entry(target, value)
                else:
                    entry = _entry(target, value)
                entries.append(entry)
            c = self._skip()
            if c == 44:
                self.at += 1
                c = self._skip()
                continue
            if c == 125:
                self.at += 1
                self.depth -= 1
                return tuple(entries)
            raise _Decline()

    def target(self, c: int) -> str:
        """A document's key as its `Target.text`: a name (not a keyword), a path, or a text (a
        path when it holds a dot). A name or a path is checked where it is first written."""
        if c == 34 or c == 39:
            name = self.text_literal(c)
            if "." in name:
                _check_path(name)
            return name
        if not _letter(c):
            raise _Decline()
        start = self.at
        self._word()
        while self._code(self.at) == 46:  # a path: `.` and a name, again and again
            self.at += 1
            c = self._code(self.at)
            if not _letter(c):
                raise _Decline()
            self._word()
        written = self.text[start:self.at]
        if written not in self.checked:
            if "." in written:
                _check_path(written)
            else:
                _check_name(written)
            self.checked.add(written)
        return written

    # ---------------------------------------------------------------- values

    def value(self) -> A.Expr:
        c = self._skip()
        start = self.at
        if c == 34 or c == 39:  # " '
            text = self.text_literal(c)
            if self.shaping:
                return self._shaped(start, text)
            lit = self.texts.get(text)
            if lit is None:
                lit = self.texts[text] = _lit(text)
            return lit
        if _digit(c) or c == 45:  # a digit, or - before one
            if c == 45:
                self.at += 1
                if not _digit(self._code(self.at)):
                    raise _Decline()
            n = self.number(c == 45)
            if self.shaping:
                return self._shaped(start, n)
            if type(n) is float:
                return _lit(n)
            lit = self.ints.get(n)
            if lit is None:
                lit = self.ints[n] = _lit(n)
            return lit
        if _letter(c):
            low = self._word().lower()
            if low == "true" or low == "false" or low == "null":
                if self.shaping:
                    return self._shaped(start, True if low == "true" else False if low == "false" else None)
                lit = self.words.get(low)
                if lit is None:
                    lit = self.words[low] = _lit(True if low == "true" else False if low == "false" else None)
                return lit
            if low in _RESERVED or self._skip() != 40:  # only a call: a name alone reads a row
                raise _Decline()
            return self.call(low, start)
        return self.composite(c)

    def _shaped(self, start: int, v: Any) -> A.Expr:
        """While shaping: a literal value's span and value kept, no node built."""
        self.spans.append(start)
        self.spans.append(self.at)
        self.values.append(v)
        return _NOTHING

    def composite(self, c: int) -> A.Expr:
        if c == 123:  # {
            return self.obj()
        if c == 91:  # [
            return self.list_()
        if c == 36:  # $
            return A.Param(self.param())
        raise _Decline()

    def _open(self) -> None:
        self.at += 1
        self.depth += 1
        if self.depth > _DEEPEST:
            raise _Decline()

    def _items(self, closer: int) -> list[A.Expr]:
        """Values separated by `,` up to `closer`, after the opening bracket."""
        items: list[A.Expr] = []
        c = self._skip()
        if c == closer:
            self.at += 1
            self.depth -= 1
            return items
        while True:
            items.append(self.value())
            c = self._skip()
            if c == 44:
                self.at += 1
                continue
            if c == closer:
                self.at += 1
                self.depth -= 1
                return items
            raise _Decline()

    def call(self, name: str, pos: int) -> A.Expr:
        self._open()
        if self.shaping:  # a call's arguments stay as written: only `now()` is shaped
            if self._skip() != 41:
                raise _Decline()
        return _call(name, tuple(self._items(41)), pos)  # )

    def list_(self) -> A.Expr:
        self._open()
        items = self._items(93)  # ]
        return _NOTHING if self.shaping else _list(tuple(items))

    def obj(self) -> A.Expr:
        self._open()
        items: list[tuple[str, A.Expr]] = []
        seen: set[str] = set()
        c = self._skip()
        if c == 125:
            self.at += 1
            self.depth -= 1
            return _object(())
        while True:
            if c == 34 or c == 39:
                key = self.text_literal(c)
            elif _letter(c):
                key = self._word()  # an object's key may be any name, a keyword too
            else:
                raise _Decline()
            if key in seen:
                raise _Decline()
            seen.add(key)
            self._expect(58)
            v = self.value()
            if not self.shaping:
                items.append((key, v))
            c = self._skip()
            if c == 44:
                self.at += 1
                c = self._skip()
                continue
            if c == 125:
                self.at += 1
                self.depth -= 1
                return _NOTHING if self.shaping else _object(tuple(items))
            raise _Decline()

    def text_literal(self, quote: int) -> str:
        """The text of a literal opening at `at` with `quote`, its escapes resolved."""
        text = self.text
        start = self.at
        end = text.find('"' if quote == 34 else "'", start + 1)
        if end < 0:
            raise _Decline()
        if text.find("\\", start + 1, end) < 0:
            self.at = end + 1
            return text[start + 1:end]
        m = (_DOUBLE if quote == 34 else _SINGLE).match(text, start)
        if m is None:
            raise _Decline()
        self.at = m.end()
        return unescape(text[start + 1:self.at - 1])

    def number(self, negative: bool) -> Any:
        """An INT or DECIMAL at `at` (a digit), as the grammar reads them; past it stands no
        word character, digit or `.` (a duration, `1.`, `1e`: lark's to read or refuse)."""
        text = self.text
        start = self.at
        i = self._digits(start)
        fraction = False
        c = self._code(i)
        if c == 46 and _digit(self._code(i + 1)):  # .digit
            i = self._digits(i + 1)
            fraction = True
            c = self._code(i)
        if c == 101 or c == 69:  # e E
            j = i + 1
            if self._code(j) in (43, 45):
                j += 1
            if not _digit(self._code(j)):
                raise _Decline()
            while _digit(self._code(j)):
                j += 1
            i = j
            fraction = True
            c = self._code(i)
        if c == 46 or _word_char(c):
            raise _Decline()
        self.at = i
        written = text[start:i]
        if "_" in written:
            written = written.replace("_", "")
        if fraction:
            v = float(written)
            if v == float("inf"):
                raise _Decline()
            return -v if negative else v
        if len(written) > _DIGITS_MAX:
            raise _Decline()
        n = int(written)
        if negative:
            if n > _INT_MAX + 1:
                raise _Decline()
            return -n
        if n > _INT_MAX:
            raise _Decline()
        return n

    def _digits(self, i: int) -> int:
        """Past `\\d(?:_?\\d)*` from i (a digit)."""
        while True:
            i += 1
            c = self._code(i)
            if c == 95 and _digit(self._code(i + 1)):  # _digit
                i += 1
            elif not _digit(c):
                return i

    def param(self) -> int:
        """`$n` at `at`, n from 1."""
        i = self.at + 1
        c = self._code(i)
        if not _digit(c):
            raise _Decline()
        while _digit(c):
            i += 1
            c = self._code(i)
        if c == 46 or _word_char(c):
            raise _Decline()
        written = self.text[self.at + 1:i]
        if len(written) > _DIGITS_MAX:
            raise _Decline()
        n = int(written)
        if n == 0 or self.shaping:  # a text naming parameters keeps them as they are
            raise _Decline()
        self.at = i
        if n > self.top:
            self.top = n
        return n


def _check_name(name: str) -> None:
    if len(name) > _MAX_NAME or name.lower() in _RESERVED:
        raise _Decline()


def _check_path(written: str) -> None:
    """The parser's checks of a path: its name not a keyword, each part at most MAX_NAME, at
    most MAX_PATH_KEYS keys."""
    parts = written.split(".")
    if parts[0].lower() in _RESERVED or len(parts) - 1 > _MAX_PATH_KEYS:
        raise _Decline()
    for p in parts:
        if len(p) > _MAX_NAME:
            raise _Decline()


def _target(key: str) -> A.Target:
    if "." not in key:
        return A.Target(key, ())
    parts = key.split(".")
    return A.Target(parts[0], tuple(parts[1:]))


__all__ = ["read_put", "shape", "unescape"]
