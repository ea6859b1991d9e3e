"""`unescape`: a text literal's escapes resolved (`\\n`, `\\t`, `\\r`, `\\0`; a backslash before any
other character stands for that character), for the parser and the literal reader (literals.py)."""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\\(.)", re.S)
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_PIECES = 4096  # pieces joined into one chunk: the list of one-character pieces never grows past this


def unescape(body: str) -> str:
    """A text literal's escapes resolved, in memory a small multiple of the text: pieces are
    joined into chunks every `_PIECES`, so `\\"` repeated a million times never holds a
    million one-character strings."""
    if "\\" not in body:
        return body
    chunks: list[str] = []
    pieces: list[str] = []
    at = 0
    for m in _ESCAPE.finditer(body):
        pieces.append(body[at:m.start()])
        c = m.group(1)
        pieces.append(_ESCAPED.get(c, c))
        at = m.end()
        if len(pieces) >= _PIECES:
            chunks.append("".join(pieces))
            pieces.clear()
    pieces.append(body[at:])
    chunks.append("".join(pieces))
    return "".join(chunks)


__all__ = ["unescape"]
