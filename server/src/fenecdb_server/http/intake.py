"""A request's body read into the `Work` it asks the engine to run (http.md §3, §4), or a
`Refusal` with the status and body that answers it: the JSON decoded, each statement's text and
params, the statement text's ceiling (`--max-statement-bytes`), `Fenec-Wait`, `Idempotency-Key`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..pacing import PACE_ROWS, hand_over
from . import errors as E
from . import numbers
from .auth import OPEN, Caller
from .config import Config
from .exchange import Request
from .idempotency import IDEM_NO_SUB, check_key, make_idem, namespace_of, namespaced, request_hash
from .limits import OFF_LOOP_BODY, OFF_LOOP_TEXT, parse_wait

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is optional
    orjson = None  # type: ignore[assignment]


class Refusal(Exception):
    """An answer decided before the engine ran (a bad body, a bad header)."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body


class Work:
    """What one request asks the engine to run: its statements and how (again, when held). Not a
    queue's job: a job is a row."""

    __slots__ = ("statements", "block", "idem", "wait", "caller", "large", "bulk")

    def __init__(self, statements: list[tuple[str, Any]], block: bool, idem: Any, wait: int,
                 caller: Caller = OPEN, *, large: bool = False, bulk: bool = False) -> None:
        self.statements = statements
        self.block = block
        self.idem = idem
        self.wait = wait  # Fenec-Wait, ms, as sent (held/lines.py caps a held claim's wait)
        self.caller = caller
        self.large = large  # its text is long and not parsed yet: parsed and run off the loop
        self.bulk = bulk  # its body is over OFF_LOOP_BODY: run with the collector held off (gc_policy.py)

    def held_again(self) -> None:
        """It is held: an Idempotency-Key keeps no answer that took nothing (http.md §8.5)."""
        if self.idem is not None:
            self.idem = replace(self.idem, keep_empty=False)


def statement(doc: Any) -> tuple[str, list[Any] | None]:
    """One `/query` body (or `/batch` line) → (text, params); raises ValueError(why)."""
    if not isinstance(doc, dict):
        raise ValueError(E.NOT_AN_OBJECT)
    text = doc.get("query")
    if text is None:
        text = doc.get("sql")
    if text is None:
        raise ValueError(E.QUERY_REQUIRED)
    if not isinstance(text, str):
        raise ValueError(E.QUERY_NOT_TEXT)
    params = doc.get("params")
    if params is not None and not isinstance(params, list):
        params = [params]
    return text, params


def decode(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal(E.BAD_REQUEST, E.body(E.NOT_UTF8)) from None
    try:
        return numbers.loads(raw, text)
    except numbers.OutOfRange as past:  # named apart from the ValueError below (server/README.md, Compiled modules)
        raise Refusal(E.BAD_REQUEST, E.body(str(past))) from None
    except ValueError as e:
        raise Refusal(E.BAD_REQUEST, E.bad_json(str(e).split("\n")[0][:200])) from None
    except RecursionError:
        raise Refusal(E.BAD_REQUEST, E.bad_json("nested too deep")) from None


def read(raw: bytes) -> Any:
    """`decode`, by orjson straight from the bytes where it reads them as `decode` would
    (numbers.plain), with no str made of them first: orjson refuses every body that is not
    UTF-8, as `decode` does, and a body it refuses is read again by `decode`, which words the
    refusal."""
    if numbers.plain(raw):
        try:
            return orjson.loads(raw)
        except Exception:
            pass
    return decode(raw)


class Intake:
    """Reads bodies into `Work` under the command line's ceilings."""

    def __init__(self, config: Config, cached: Callable[[str], bool]) -> None:
        self.config = config
        self.cached = cached  # whether a statement text is parsed already (the engine's cache)

    def query_work(self, req: Request, raw: bytes) -> Work:
        try:
            text, params = statement(read(raw))
        except ValueError as e:
            raise Refusal(E.BAD_REQUEST, E.body(str(e))) from None
        return self.work_of(req, raw, [(text, params)], block=False)

    def batch_work(self, req: Request, raw: bytes) -> Work:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refusal(E.BAD_REQUEST, E.body(E.NOT_UTF8)) from None
        statements: list[tuple[str, list[Any] | None]] = []
        # a body orjson reads as `decode` would (numbers.plain): each line straight through it; a
        # line it refuses is read again the general way, which words its refusal
        fast = numbers.plain(raw)
        for k, line in enumerate(raw.split(b"\n"), start=1):
            if k % PACE_ROWS == 0:
                hand_over()  # a body over OFF_LOOP_BODY, read in a worker thread (pacing.py)
            if not line.strip():
                continue
            if fast:
                try:
                    statements.append(statement(orjson.loads(line)))
                    continue
                except Exception:
                    pass
            try:
                statements.append(statement(decode(line)))
            except Refusal as r:
                why = orjson.loads(r.body)["error"] if orjson else json.loads(r.body)["error"]
                raise Refusal(E.BAD_REQUEST, E.batch_line(k, why, len(statements))) from None
            except ValueError as e:
                raise Refusal(E.BAD_REQUEST, E.batch_line(k, str(e), len(statements))) from None
        if not statements:
            raise Refusal(E.BAD_REQUEST, E.body(E.EMPTY_BATCH))
        return self.work_of(req, raw, statements, block=True)

    def text_size(self, statements: list[tuple[str, Any]]) -> tuple[int, int]:
        """(UTF-8 bytes of the request's distinct statement texts, characters of those not parsed
        yet). A text repeated in a batch is parsed once (the cache), so it counts once."""
        cached = self.cached
        if len(statements) == 1:  # a /query: one text
            text = statements[0][0]
            n = len(text)
            size = n if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            return size, 0 if cached(text) else n
        size = 0
        fresh = 0
        for text in {t for t, _ in statements}:
            n = len(text)
            size += n if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            if not cached(text):
                fresh += n
        return size, fresh

    def work_of(self, req: Request, raw: bytes, statements: list[tuple[str, Any]], *, block: bool) -> Work:
        size, fresh = self.text_size(statements)
        ceiling = self.config.max_statement_bytes
        if ceiling and size > ceiling:
            raise Refusal(E.TOO_LARGE, E.statement_too_large(size, ceiling))
        wait = 0
        if req.wait is not None:
            parsed = parse_wait(req.wait)
            if parsed is None:
                raise Refusal(E.BAD_REQUEST, E.body(E.WAIT_NOT_MS))
            wait = parsed
        idem = None
        caller = req.caller
        if req.idem is not None:
            if not check_key(req.idem):
                raise Refusal(E.BAD_REQUEST, E.body(E.IDEM_SIZE))
            namespace = namespace_of(caller.claims) if caller.scoped else None
            if caller.scoped and namespace is None:
                raise Refusal(E.BAD_REQUEST, E.body(IDEM_NO_SUB))
            key = namespaced(req.idem) if namespace is None else namespaced(req.idem, namespace)
            idem = make_idem(key, request_hash(req.method, req.target, raw), self.config.idempotency_ttl_ms)
        return Work(statements, block, idem, wait, caller, large=fresh > OFF_LOOP_TEXT, bulk=len(raw) > OFF_LOOP_BODY)
