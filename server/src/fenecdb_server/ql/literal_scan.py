"""The literal reader's scanner: characters, names, texts, numbers and `$n`, as the grammar's
terminals read them (literals.py's docstring gives the reader's contract).

`LiteralScanner` holds the cursor over the text (`at`) and reads one token at it, moving past
it; `literals._Reader` extends it with the statement, documents, objects, lists and calls. Any
token this scanner cannot read exactly as lark would raises `Decline`, and lark reads the text.
Each character is looked at a bounded number of times.
"""

from __future__ import annotations

import re
from typing import Any, Final

from .escapes import unescape

# The grammar's STRING terminal, for a text holding escapes (one without is found with str.find).
_DOUBLE = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S)
_SINGLE = re.compile(r"'[^'\\]*+(?:\\.[^'\\]*+)*+'", re.S)

_INT_MAX: Final = 2**63 - 1
DIGITS_MAX: Final = 40  # a longer number is left to lark (int() refuses thousands of digits)


# Character classes by code point, ASCII only: any other character makes the reader decline. The
# end of the text reads as -1, in no class.
def space(c: int) -> bool:
    return c == 32 or c == 10 or c == 9 or c == 13


def letter(c: int) -> bool:
    """A letter or `_`: what starts a name."""
    return 97 <= c <= 122 or 65 <= c <= 90 or c == 95


def digit(c: int) -> bool:
    return 48 <= c <= 57


def word_char(c: int) -> bool:
    return 97 <= c <= 122 or 65 <= c <= 90 or 48 <= c <= 57 or c == 95


class Decline(Exception):
    """The text is not one this reader takes: lark reads it."""


class LiteralScanner:
    """A cursor over `text` and the tokens read at it. `shaping`: values become parameters
    (`literals.shape`), so a `$n` written in the text declines; `top`: the highest `$n` read."""

    __slots__ = ("text", "n", "at", "top", "shaping")

    def __init__(self, text: str, shaping: bool) -> None:
        self.text = text
        self.n = len(text)
        self.at = 0
        self.top = 0
        self.shaping = shaping

    # ---------------------------------------------------------------- characters and names

    def _code(self, i: int) -> int:
        """The character at i as a code point below 128; -1 at the end. Declines past ASCII."""
        if i >= self.n:
            return -1
        c = ord(self.text[i])
        if c >= 128:
            raise Decline()
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
                raise Decline()
            if not space(c):
                self.at = i
                if c == 35:  # '#'
                    raise Decline()
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
                raise Decline()
            if not word_char(c):
                break
            i += 1
        self.at = i
        return text[start:i]

    def _expect(self, code: int) -> None:
        if self._skip() != code:
            raise Decline()
        self.at += 1

    # ---------------------------------------------------------------- texts, numbers, `$n`

    def text_literal(self, quote: int) -> str:
        """The text of a literal opening at `at` with `quote`, its escapes resolved."""
        text = self.text
        start = self.at
        end = text.find('"' if quote == 34 else "'", start + 1)
        if end < 0:
            raise Decline()
        if text.find("\\", start + 1, end) < 0:
            self.at = end + 1
            return text[start + 1:end]
        m = (_DOUBLE if quote == 34 else _SINGLE).match(text, start)
        if m is None:
            raise Decline()
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
        if c == 46 and digit(self._code(i + 1)):  # .digit
            i = self._digits(i + 1)
            fraction = True
            c = self._code(i)
        if c == 101 or c == 69:  # e E
            j = i + 1
            if self._code(j) in (43, 45):
                j += 1
            if not digit(self._code(j)):
                raise Decline()
            while digit(self._code(j)):
                j += 1
            i = j
            fraction = True
            c = self._code(i)
        if c == 46 or word_char(c):
            raise Decline()
        self.at = i
        written = text[start:i]
        if "_" in written:
            written = written.replace("_", "")
        if fraction:
            v = float(written)
            if v == float("inf"):
                raise Decline()
            return -v if negative else v
        if len(written) > DIGITS_MAX:
            raise Decline()
        n = int(written)
        if negative:
            if n > _INT_MAX + 1:
                raise Decline()
            return -n
        if n > _INT_MAX:
            raise Decline()
        return n

    def _digits(self, i: int) -> int:
        """Past `\\d(?:_?\\d)*` from i (a digit)."""
        while True:
            i += 1
            c = self._code(i)
            if c == 95 and digit(self._code(i + 1)):  # _digit
                i += 1
            elif not digit(c):
                return i

    def param(self) -> int:
        """`$n` at `at`, n from 1."""
        i = self.at + 1
        c = self._code(i)
        if not digit(c):
            raise Decline()
        while digit(c):
            i += 1
            c = self._code(i)
        if c == 46 or word_char(c):
            raise Decline()
        written = self.text[self.at + 1:i]
        if len(written) > DIGITS_MAX:
            raise Decline()
        n = int(written)
        if n == 0 or self.shaping:  # a text naming parameters keeps them as they are
            raise Decline()
        self.at = i
        if n > self.top:
            self.top = n
        return n
