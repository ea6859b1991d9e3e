"""The Python SDK's builder-vectors runner (conformance.md Part A).

Reads the vectors file named by FENEC_VECTORS (default: this folder's builder.json), runs every
case through `fenecdb` (FENEC_ONLY keeps the cases whose name holds that text), and reports one
line a case and a tally. Endpoint cases run on a client bound to a capture transport (the
client's `transport=`): it records the bytes of the one request sent, as the client's own HTTP/1.1
encoder writes them, and answers what A.4 says, so the runner checks the statement, its
parameters as they went over the wire, and the headers.

    python conformance/python_vectors.py [file]     # exit 1 when any case failed
"""

from __future__ import annotations

import array
import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fenecdb
from fenecdb import FenecError
from fenecdb._http11 import Answer, Target
from fenecdb._wire import Request

HERE = Path(__file__).resolve().parent
DEFAULT_VECTORS = HERE / "builder.json"
MIN_PROJECT_CASES = 150

TEXT_TERMINALS = {"toFenecQL", "toInsert", "toUpdate", "toDelete"}
ENDPOINTS = {"rows", "first", "count", "insert", "update", "delete"}
STEPS = {"from", "select", "where", "orWhere", "order", "limit", "offset", "require"}


class CaseError(Exception):
    """The case itself is wrong (malformed, unsupported op, unknown encoding)."""


def decode(value: Any) -> Any:
    """A vectors argument as the Python value it stands for (A.3)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, inner), = value.items()
        if key.startswith("$"):
            if key == "$or":
                return fenecdb.or_(*decode(inner))
            if key == "$and":
                return fenecdb.and_(*decode(inner))
            if key == "$not":
                return fenecdb.not_(decode(inner))
            if key == "$raw":
                text, *params = decode(inner)
                return fenecdb.raw(text, *params)
            if key == "$expr":
                text, *params = decode(inner)
                return fenecdb.expr(text, *params)
            if key == "$inc":
                return fenecdb.inc(decode(inner))
            if key == "$date":
                return dt.datetime.fromisoformat(inner)
            if key == "$f32":
                return array.array("f", inner)
            raise CaseError(f"unknown encoding {key}")
    return {k: decode(v) for k, v in value.items()}


def same_json(expected: Any, got: Any) -> bool:
    """A.5: the same JSON type at each place; integers and floats kept apart."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, int):
        return type(got) is int and got == expected
    if isinstance(expected, float):
        return type(got) is float and got == expected
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(
            same_json(e, g) for e, g in zip(expected, got, strict=True))
    if isinstance(expected, dict):
        return isinstance(got, dict) and got.keys() == expected.keys() and all(
            same_json(v, got[k]) for k, v in expected.items())
    return type(expected) is type(got) and expected == got


def canned(text: str) -> Any:
    """What the capture answers a statement (A.4)."""
    if text.startswith("put "):
        return {"affected": 0}
    if text.startswith(("set ", "del ")):
        return [] if " returning " in text else {"affected": 0}
    if text.endswith(" count"):
        return [{"count": 0}]
    return []


class Sent:
    """A request as it went over the wire: its header fields (names in lower case) and its body."""

    def __init__(self, wire: bytes) -> None:
        head, _, self.content = wire.partition(b"\r\n\r\n")
        self.headers: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()


class Capture:
    target = Target("http://capture.invalid")

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def __call__(self, request: Request) -> Answer:
        sent = Sent(self.target.encode(request))
        self.sent.append(sent)
        body = json.loads(sent.content)
        return 200, {}, json.dumps(canned(body["query"])).encode()


def _options(args: list[Any], first_is_payload: bool) -> tuple[list[Any], dict[str, Any], float | None]:
    positional = list(args)
    opts: dict[str, Any] = {}
    want = 2 if first_is_payload else 1
    if len(positional) == want:
        opts = dict(positional.pop())
    wait = opts.pop("wait", None)
    return positional, opts, (None if wait is None else wait / 1000)


def run_case(case: dict[str, Any]) -> tuple[str, list[Any], dict[str, str]]:
    """Runs one case: the statement and parameters as sent (or made), and the headers."""
    steps = case.get("steps")
    if not isinstance(steps, list) or not steps or steps[0].get("op") != "from":
        raise CaseError("malformed case")
    ops = [s.get("op") for s in steps]
    last = ops[-1]
    terminals = [i for i, op in enumerate(ops) if op in TEXT_TERMINALS or op in ENDPOINTS]
    if terminals != [len(ops) - 1]:
        for op in ops:
            if op not in STEPS and op not in TEXT_TERMINALS and op not in ENDPOINTS:
                raise CaseError(f"unsupported op {op}")
        raise CaseError("malformed case")
    for op in ops[:-1]:
        if op not in STEPS:
            raise CaseError(f"unsupported op {op}")

    capture = Capture()
    client = fenecdb.Client("http://capture.invalid", transport=capture)
    try:
        args0 = decode(steps[0].get("args", []))
        query: Any = client.collection(*args0) if last in ENDPOINTS else fenecdb.collection(*args0)
        for step in steps[1:-1]:
            op, args = step["op"], decode(step.get("args", []))
            if op == "orWhere":
                query = query.or_where(*args)
            elif op == "select":
                query = query.select(*args)
            elif op == "where":
                query = query.where(*args)
            else:
                query = getattr(query, op)(*args)
        args = decode(steps[-1].get("args", []))
        if last == "toFenecQL":
            text, params = query.to_fenecql()
        elif last in ("toInsert", "toUpdate"):
            pos, opts, _ = _options(args, True)
            text, params = (query.to_insert if last == "toInsert" else query.to_update)(*pos, **opts)
        elif last == "toDelete":
            pos, opts, _ = _options(args, False)
            text, params = query.to_delete(*pos, **opts)
        else:
            endpoint: Callable[..., Any] = getattr(query, last)
            if last in ("insert", "update"):
                pos, opts, wait = _options(args, True)
            elif last == "delete":
                pos, opts, wait = _options(args, False)
            else:
                pos, opts, wait = list(args), {}, None
            if wait is not None:
                opts["wait"] = wait
            endpoint(*pos, **opts)
            if len(capture.sent) != 1:
                raise CaseError(f"{len(capture.sent)} statements sent, not one")
            body = json.loads(capture.sent[0].content)
            return body["query"], body["params"], dict(capture.sent[0].headers)
        # the same wire encoder POST /query uses, read back with a parser that keeps int and float apart
        body = json.loads(client._wire.query(text, params).body)
        return body["query"], body["params"], {}
    finally:
        client.close()


def run_file(path: Path, only: str | None, out: Callable[[str], None] = print) -> tuple[int, int]:
    """Runs a vectors file; answers (passed, failed), a file that cannot be read counting one failure."""
    try:
        cases = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(cases, list) or not cases:
            raise ValueError("the file holds no case")
    except (OSError, ValueError) as exc:
        out(f"FAIL {path}: cannot read the vectors: {exc}")
        out(f"vectors {path}: 0 ok, 1 FAIL, 0 checked-elsewhere")
        return 0, 1
    passed = failed = elsewhere = 0
    for case in cases:
        name = str(case.get("name", "?")) if isinstance(case, dict) else "?"
        if only and only not in name:
            continue
        verdict = judge(case)
        if verdict is None:
            passed += 1
            out(f"ok {name}")
        else:
            failed += 1
            out(f"FAIL {name}: {verdict}")
    if path.resolve() == DEFAULT_VECTORS and not only and len(cases) < MIN_PROJECT_CASES:
        failed += 1
        out(f"FAIL {path}: {len(cases)} cases, the project's file holds at least {MIN_PROJECT_CASES}")
    out(f"vectors {path}: {passed} ok, {failed} FAIL, {elsewhere} checked-elsewhere")
    return passed, failed


def judge(case: Any) -> str | None:
    """None when the case passed, else `<expected> / <got>`."""
    if not isinstance(case, dict) or ("text" in case) == ("error" in case):
        return "malformed case"
    expect = f"error {case['error']!r}" if "error" in case else f"{case['text']!r} {json.dumps(case.get('params'))}"
    try:
        text, params, headers = run_case(case)
    except CaseError as exc:
        return str(exc)
    except FenecError as exc:
        if exc.status != 0:
            return f"{expect} / a server error {exc!r}"
        if "error" in case:
            return None if str(exc) == case["error"] else f"{expect} / error {str(exc)!r}"
        return f"{expect} / error {str(exc)!r}"
    except Exception as exc:  # any other exception fails the case (A.5)
        return f"{expect} / {type(exc).__name__}: {exc}"
    got = f"{text!r} {json.dumps(params, ensure_ascii=False)}"
    if "error" in case:
        return f"{expect} / {got}"
    if text != case["text"] or not same_json(case.get("params", []), params):
        return f"{expect} / {got}"
    for name, value in (case.get("headers") or {}).items():
        seen = {k.lower(): v for k, v in headers.items()}.get(name.lower())
        if seen != value:
            return f"header {name}: {value!r} / {seen!r}"
    return None


def vectors_path() -> Path:
    given = os.environ.get("FENEC_VECTORS")
    return Path(given).resolve() if given else DEFAULT_VECTORS


def main(argv: list[str]) -> int:
    path = Path(argv[1]).resolve() if len(argv) > 1 else vectors_path()
    _, failed = run_file(path, os.environ.get("FENEC_ONLY") or None)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
