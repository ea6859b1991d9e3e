"""`ParseCache`: statement texts and what they parsed to, kept for the texts that come again.

A text is parsed once (ql/parser.py; a put of literal documents as its shape, ql/literals.py)
and kept with the highest parameter each of its statements names, within `PARSE_CACHE` texts and
`CACHE_CHARS` characters (catalog.py), the oldest going first; a text longer than `CACHE_TEXT_MAX`
is parsed every time it comes. A hit is one dict lookup under no lock: writers take the mutex
the engine shares with its plan cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ..errors import FenecError
from ..pacing import PACE_ROWS, hand_over
from ..ql import ast as A
from ..ql.literals import shape
from ..ql.parser import read
from .catalog import CACHE_CHARS, CACHE_TEXT_MAX, PARSE_CACHE, PREPARE_OUTSIDE

ONE_AT_A_TIME = "one statement at a time here: send several as a batch"

Parsed = tuple[str, A.Statement, list]  # (text, statement, params)


class ParseCache:
    """Texts -> (statements, the highest parameter each names), oldest first."""

    def __init__(self, mutex: threading.Lock) -> None:
        self.parsed: OrderedDict[str, tuple[list[A.Statement], list[int]]] = OrderedDict()
        self.chars = 0
        self._mutex = mutex

    def parse(self, text: str) -> list[A.Statement]:
        return self.entry(text)[0]

    def entry(self, text: Any) -> tuple[list[A.Statement], list[int]]:  # anything but text: 400
        if not isinstance(text, str):
            raise FenecError("query", "`query` must be text")
        got = self.parsed.get(text)
        if got is not None:
            return got
        entry = read(text)
        if len(text) > CACHE_TEXT_MAX:
            return entry
        with self._mutex:
            if text not in self.parsed:
                self.parsed[text] = entry
                self.chars += len(text)
                while len(self.parsed) > PARSE_CACHE or self.chars > CACHE_CHARS:
                    old, _ = self.parsed.popitem(last=False)
                    self.chars -= len(old)
        return entry

    def cached(self, text: str) -> bool:
        """Whether `text` is parsed already (HTTP runs a long uncached one off its loop)."""
        return text in self.parsed

    def texts(self) -> list[str]:
        return list(self.parsed)

    def statements(self, statements: list[tuple[Any, Any]], block: bool) -> list[Parsed]:
        if not block:
            if len(statements) != 1:
                raise FenecError("query", ONE_AT_A_TIME)
            return [self.statement(*statements[0])]
        out = []
        for i, (text, params) in enumerate(statements):
            if i % PACE_ROWS == 0 and i:
                hand_over()  # a /batch of many lines, in a worker thread (pacing.py)
            try:
                out.append(self.statement(text, params))
            except FenecError as e:
                e.at = i
                raise
        return out

    def statement(self, text: Any, params: Any) -> Parsed:  # text checked by `entry`
        try:  # the cache's hit, without a call
            stmts, needs = self.parsed[text]
        except (KeyError, TypeError):  # not parsed yet, or not text (which `entry` refuses)
            shaped = shape(text) if type(text) is str and len(text) < PREPARE_OUTSIDE else None
            if shaped is not None:
                # a put of literal documents runs as its shape (ql/literals.py), parsed and
                # prepared once for every text that differs from it only in its values; the
                # texts themselves are not kept, so they push no other statement out
                text, params = shaped
            try:
                stmts, needs = self.parsed[text]
            except (KeyError, TypeError):
                stmts, needs = self.entry(text)
        if len(stmts) != 1:
            raise FenecError("query", ONE_AT_A_TIME)
        if type(params) is not list:
            params = _params(params)
        if needs[0] > len(params):
            raise FenecError("query", f"parameter ${needs[0]} is not bound")
        return text, stmts[0], params


def _params(params: Any) -> list:
    if params is None:
        return []
    if isinstance(params, (list, tuple)):
        return list(params)
    return [params]
