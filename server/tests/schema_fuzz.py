"""Schemathesis over the server's own `/_openapi.json`: requests built from the document (and,
in negative mode, requests that break it) sent to a live `fenec-server`, counted by status.

Used two ways:

* `tests/test_http_schemathesis.py` runs a bounded, derandomized pass in `make test`;
* `make fuzz` (this file as a script) runs a long one and prints its report: the requests sent,
  the count per status, and every 5xx with the request that caused it. Exit 1 on any 5xx.

    python server/tests/schema_fuzz.py --examples 20000 [--seed N] [--url http://...]

Two things the document alone does not give: `/batch` takes NDJSON, so its body is generated as
a list of `Statement` objects (or any text) and serialized one object a line; and `Fenec-Wait`
is cut to 50 ms, so a held claim cannot make a run last 30 s an example.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seed_with
from hypothesis import strategies as st
from schemathesis import GenerationMode

WAIT_CAP_MS = 50
SETUP = [
    "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, queue text @hash)",
    "put jobs [{payload: 1, run_at: now(), attempts: 0}, {payload: {a: [1, 2]}, run_at: now() + 5, attempts: 0}]",
]


# Statements the engine runs (with parameters drawn by the document's `params`), beside the
# arbitrary text the document allows: without them nearly every request stops at the parser.
STATEMENTS = [
    "get jobs", "get jobs count", "get jobs where id = $1", "get jobs where owner = $1 order run_at desc limit 2",
    "get jobs where attempts in [$1, $2, 3] select id, payload.a as a",
    "put jobs {payload: $1, run_at: now(), attempts: 0}", "put jobs $1", "put jobs {queue: $1, attempts: $2}",
    "set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
    "where run_at <= now() order run_at limit 1 returning *",
    "set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
    "where run_at <= now() order run_at limit 1 returning * require 1",
    "del jobs where id = $1 and owner = $2 require 1", "del jobs where run_at <= now() order run_at limit 1 returning id",
    "set jobs {run_at: $1} where id = $2", "set jobs {attempts: attempts * $1} where queue = $2",
    "get jobs where timestamp($1) < run_at", "get jobs select bucket(run_at, $1) as b",
    "create collection jobs (x int)", "create index on jobs (payload.a) @hash", "drop collection if exists other",
]


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx: Any, value: Any) -> bytes:
    """A list becomes one JSON document a line; text (and anything else) is sent as it is."""
    if isinstance(value, list):
        lines = [json.dumps(item, ensure_ascii=False) for item in value]
        return "\n".join(lines).encode("utf-8", "surrogatepass")
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")


def fuzz_document(served: dict[str, Any]) -> dict[str, Any]:
    """The served document, with `/batch`'s body described as what its text holds: Statement
    objects, one a line (the document says `string`, which is how it travels)."""
    doc = copy.deepcopy(served)
    media = doc["paths"]["/batch"]["post"]["requestBody"]["content"]["application/x-ndjson"]
    media["schema"] = {"anyOf": [
        {"type": "array", "items": {"$ref": "#/components/schemas/Statement"}, "maxItems": 5},
        {"type": "string"},
    ]}
    return doc


@dataclass
class Report:
    sent: int = 0
    not_sent: int = 0  # refused by the HTTP client before sending (a header it cannot write)
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    bad_errors: list[str] = field(default_factory=list)  # a 4xx whose body is not {"error": text}

    def lines(self) -> list[str]:
        shown = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        return [f"requests sent: {self.sent} ({self.not_sent} more refused by the client before sending)",
                f"5xx seen: {len(self.server_errors)}",
                f"by status: {shown}",
                *(f"  5xx: {e}" for e in self.server_errors[:20]),
                *(f"  4xx without a JSON error: {e}" for e in self.bad_errors[:20])]


def describe(case: Any) -> str:
    texts = [b.get("query") for b in (case.body if isinstance(case.body, list) else [case.body])
             if isinstance(b, dict)]
    return f"{case.method} {case.path} queries={texts!r} headers={case.headers!r} body={str(case.body)[:300]!r}"


def with_statements(case: Any, pick: int) -> None:
    """Half the time, the generated `query` texts become STATEMENTS (the document's `string`
    cannot say "a FenecQL statement": hypothesis-jsonschema folds an enum of texts into it)."""
    if pick >= len(STATEMENTS):
        return
    bodies = case.body if isinstance(case.body, list) else [case.body]
    for i, body in enumerate(bodies):
        if isinstance(body, dict) and "query" in body:
            body["query"] = STATEMENTS[(pick + i) % len(STATEMENTS)]


def cap_wait(case: Any) -> None:
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "fenec-wait":
            value = str(headers[name]).strip()
            if value.isdigit() and int(value) > WAIT_CAP_MS:
                headers[name] = str(WAIT_CAP_MS)


def run(url: str, examples: int, *, seed: int | None = None, derandomize: bool = False) -> Report:
    """Send `examples` generated requests to the server at `url`; count what came back."""
    served = httpx.get(url + "/_openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(fuzz_document(served))
    strategy = st.one_of(schema.as_strategy(GenerationMode.POSITIVE), schema.as_strategy(GenerationMode.NEGATIVE))
    report = Report()

    @settings(max_examples=examples, derandomize=derandomize, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(case=strategy, pick=st.integers(0, 2 * len(STATEMENTS) - 1))
    def one(case: Any, pick: int) -> None:
        with_statements(case, pick)
        cap_wait(case)
        try:
            response = case.call(base_url=url, timeout=60)
        except Exception as e:  # the client would not send it (an invalid header name or value)
            if "Connection" in type(e).__name__ or "Timeout" in type(e).__name__:
                report.sent += 1
                report.server_errors.append(f"{type(e).__name__}: {describe(case)}")
            else:
                report.not_sent += 1
            return
        report.sent += 1
        status = response.status_code
        report.statuses[status] += 1
        if status >= 500:
            report.server_errors.append(f"{status} {response.content[:200]!r}: {describe(case)}")
        elif status >= 400:
            try:
                doc = json.loads(response.content)
                ok = isinstance(doc, dict) and isinstance(doc.get("error"), str)
            except ValueError:
                ok = False
            if not ok:
                report.bad_errors.append(f"{status} {response.content[:200]!r}: {describe(case)}")

    if seed is not None:
        one = seed_with(seed)(one)
    one()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: a random one, printed)")
    parser.add_argument("--url", default=None, help="a running server (default: start one on a free port)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    server = None
    url = args.url
    if url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from test_http_e2e import Server

        server = Server("--max-connections", "0")
        url = server.url
    try:
        with httpx.Client(base_url=url, timeout=30) as c:
            for text in SETUP:
                c.post("/query", json={"query": text})
        started = time.monotonic()
        report = run(url, args.examples, seed=seed)
        print(f"schemathesis over {url}/_openapi.json, seed {seed}, {args.examples} examples, "
              f"{time.monotonic() - started:.0f} s")
        for line in report.lines():
            print(line)
    finally:
        died = server is not None and server.proc.poll() is not None
        if server is not None:
            server.stop()
    if died:
        print("the server died during the run")
        return 1
    return 1 if report.server_errors or report.bad_errors else 0


if __name__ == "__main__":
    sys.exit(main())
