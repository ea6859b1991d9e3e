"""The JSON of every answer's body: `dumps`, the answer of `/query` and `/batch` (`render`), and a
long answer written in pieces (`pieces`). The bytes around a body (status line, headers) are
`wire.py`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..database import Rows
from . import errors as E

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is optional
    orjson = None  # type: ignore[assignment]

# An answer of more rows than this is written in pieces of as many rows, each rendered only when
# the connection has room for it (the transport's flow control: protocol.py, cycle.py), so a reader
# that does not read holds at most a piece and the transport's buffer of rendered bytes.
PIECE_ROWS = 1_000


def _dumps_json(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        # text holding a lone surrogate (an in-process caller's, a token claim a rule pinned
        # into a row): the same JSON with it escaped, as `\ud800`, never a 500 for an answer
        return json.dumps(value, separators=(",", ":")).encode()


if orjson is not None:
    # orjson refuses ints past 64 bits, which FenecQL ints never are; anything it cannot encode
    # falls back to json. Why orjson at all: bench/README.md ("Over HTTP").
    def dumps(value: Any) -> bytes:
        try:
            return orjson.dumps(value)
        except TypeError:
            return _dumps_json(value)
else:  # pragma: no cover
    dumps = _dumps_json


def render(block: bool, answers: list[Any]) -> tuple[int, bytes]:
    """The answer of `/query` (its one statement's) or `/batch` (`{"ok": n, "results": [...]}`)."""
    if block:
        # the engine answers each statement in its /query form; a batch names rows "rows"
        results = [{"rows": a} if isinstance(a, list) else a for a in answers]
        return E.OK, dumps({"ok": len(answers), "results": results})
    return E.OK, dumps(answers[0])


def pieces(rows: list[Any] | Rows) -> Iterator[bytes]:
    """The JSON array of `rows`, PIECE_ROWS rows a piece, each rendered when it is asked for. A
    get's rows (`Rows`) are the rows it picked, each piece's made into its answer then; a write's
    are its answer, kept whole (an Idempotency-Key may hold them too)."""
    n = len(rows)
    for at in range(0, n, PIECE_ROWS):
        piece = dumps(rows.slice(at, at + PIECE_ROWS) if type(rows) is Rows else rows[at:at + PIECE_ROWS])
        yield (b"[" if at == 0 else b",") + piece[1:-1] + (b"]" if at + PIECE_ROWS >= n else b"")
