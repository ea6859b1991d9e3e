"""Literals as the language writes them, and the literal reader: a put of literal documents read without lark.

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

from typing import Any, Final

from . import ast as A
from .ast import MAX_NAME, MAX_PATH_KEYS, RESERVED
from .escapes import unescape
from .literal_nodes import new_call as _call
from .literal_nodes import new_entry as _entry
from .literal_nodes import new_list as _list
from .literal_nodes import new_lit as _lit
from .literal_nodes import new_object as _object
from .literal_scan import Decline, LiteralScanner, digit, letter

_RESERVED: Final = RESERVED
_MAX_NAME: Final = MAX_NAME
_MAX_PATH_KEYS: Final = MAX_PATH_KEYS
_LIT: Final = A.Lit
_DEEPEST: Final = 64  # objects and lists nested deeper are left to lark (which allows MAX_DEPTH)


def read_put(text: str) -> tuple[list[A.Statement], list[int]] | None:
    """The statements `text` holds when it is one put of literal documents, and the highest
    `$n` each names (0: none); else None."""
    r = _Reader(text, False)
    try:
        stmt = r.statement()
    except Decline:
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
    except Decline:
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


class _Reader(LiteralScanner):
    """The put's grammar over the scanner's tokens (literal_scan.py), and the nodes it shares."""

    __slots__ = ("depth", "spans", "values", "targets", "texts", "ints", "words", "entries", "checked")

    def __init__(self, text: str, shaping: bool) -> None:
        super().__init__(text, shaping)
        self.depth = 0
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

    # ---------------------------------------------------------------- the statement

    def statement(self) -> A.Statement | None:
        """The put read; None while shaping (nothing is built then)."""
        c = self._skip()
        while c == 59:  # leading `;`
            self.at += 1
            c = self._skip()
        if not letter(c):
            raise Decline()
        verb = self._word().lower()
        if verb != "put" and verb != "insert":
            raise Decline()
        c = self._skip()
        if not letter(c):
            raise Decline()
        coll = self._word()
        if verb == "insert" and coll.lower() == "into":  # `into` is the keyword where it may be
            c = self._skip()
            if not letter(c):
                raise Decline()
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
                raise Decline()
            self.at += 1
            self.depth = 0
            docs = tuple(out)
        elif c == 36:  # $
            param = self.param()
        else:
            raise Decline()
        require: int | None = None
        c = self._skip()
        if letter(c):
            if self._word().lower() != "require":
                raise Decline()
            c = self._skip()
            if not digit(c):
                raise Decline()
            written: Any = self.number(False)  # an int or a float: a float is declined below
            if type(written) is not int:
                raise Decline()
            require = written
            c = self._skip()
        while c == 59:  # trailing `;`
            self.at += 1
            c = self._skip()
        if c >= 0:
            raise Decline()
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
                raise Decline()
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
            raise Decline()

    def target(self, c: int) -> str:
        """A document's key as its `Target.text`: a name (not a keyword), a path, or a text (a
        path when it holds a dot). A name or a path is checked where it is first written."""
        if c == 34 or c == 39:
            name = self.text_literal(c)
            if "." in name:
                _check_path(name)
            return name
        if not letter(c):
            raise Decline()
        start = self.at
        self._word()
        while self._code(self.at) == 46:  # a path: `.` and a name, again and again
            self.at += 1
            c = self._code(self.at)
            if not letter(c):
                raise Decline()
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
        if digit(c) or c == 45:  # a digit, or - before one
            if c == 45:
                self.at += 1
                if not digit(self._code(self.at)):
                    raise Decline()
            n = self.number(c == 45)
            if self.shaping:
                return self._shaped(start, n)
            if type(n) is float:
                return _lit(n)
            lit = self.ints.get(n)
            if lit is None:
                lit = self.ints[n] = _lit(n)
            return lit
        if letter(c):
            low = self._word().lower()
            if low == "true" or low == "false" or low == "null":
                if self.shaping:
                    return self._shaped(start, True if low == "true" else False if low == "false" else None)
                lit = self.words.get(low)
                if lit is None:
                    lit = self.words[low] = _lit(True if low == "true" else False if low == "false" else None)
                return lit
            if low in _RESERVED or self._skip() != 40:  # only a call: a name alone reads a row
                raise Decline()
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
        raise Decline()

    def _open(self) -> None:
        self.at += 1
        self.depth += 1
        if self.depth > _DEEPEST:
            raise Decline()

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
            raise Decline()

    def call(self, name: str, pos: int) -> A.Expr:
        self._open()
        if self.shaping:  # a call's arguments stay as written: only `now()` is shaped
            if self._skip() != 41:
                raise Decline()
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
            elif letter(c):
                key = self._word()  # an object's key may be any name, a keyword too
            else:
                raise Decline()
            if key in seen:
                raise Decline()
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
            raise Decline()

def _check_name(name: str) -> None:
    if len(name) > _MAX_NAME or name.lower() in _RESERVED:
        raise Decline()


def _check_path(written: str) -> None:
    """The parser's checks of a path: its name not a keyword, each part at most MAX_NAME, at
    most MAX_PATH_KEYS keys."""
    parts = written.split(".")
    if parts[0].lower() in _RESERVED or len(parts) - 1 > _MAX_PATH_KEYS:
        raise Decline()
    for p in parts:
        if len(p) > _MAX_NAME:
            raise Decline()


def _target(key: str) -> A.Target:
    if "." not in key:
        return A.Target(key, ())
    parts = key.split(".")
    return A.Target(parts[0], tuple(parts[1:]))


__all__ = ["read_put", "shape", "unescape"]
