"""The hand-written wire agrees with the server's OpenAPI document (server/openapi.json).

The client ships no generated code; openapi-python-client's client is generated here, into a
temporary folder (scripts/generate_reference.py), and the requests `fenecdb._wire` makes are held
to it: the route, the method, the header names and values, the JSON body. POST /batch has no
generated function (its body is NDJSON), so its parameters and body type are read from the
document, and each of its lines is checked against the generated `Statement`. The answers the
client reads (`error`, `at`, `completed`; `affected`; `ok`, `results`) are checked against the
document's schemas of the statuses the client maps."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from capture_transport import TARGET, Sent
from fenecdb._errors import _BY_STATUS
from fenecdb._wire import Shared, Wire

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import generate_reference  # noqa: E402

DOC = generate_reference.document()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    folder = generate_reference.generate(tmp_path_factory.mktemp("openapi"))
    sys.path.insert(0, str(folder.parent))
    try:
        yield importlib.import_module(f"{generate_reference.PACKAGE}.api.default.query")
    finally:
        sys.path.remove(str(folder.parent))
        for name in [n for n in sys.modules if n.split(".")[0] == generate_reference.PACKAGE]:
            del sys.modules[name]


def operation(path: str) -> dict[str, Any]:
    found: dict[str, Any] = DOC["paths"][path]["post"]
    return found


@pytest.mark.parametrize(("wait", "key"), [(None, None), (2, None), (None, "k-1"), (0.25, "claim:w1:7")])
def test_a_query_is_the_generated_request(reference: ModuleType, wait: float | None, key: str | None) -> None:
    wire = Wire("t0ken", 30.0, None, Shared())
    request = wire.query("set jobs {owner: $1} where id = $2 returning *", ["w1:1", 7], wait=wait,
                         idempotency_key=key, read=False)
    sent = Sent(request)
    unset = reference.UNSET
    made = reference._get_kwargs(
        body=reference.Statement(query="set jobs {owner: $1} where id = $2 returning *", params=["w1:1", 7]),
        fenec_wait=unset if wait is None else str(round(wait * 1000)),
        idempotency_key=unset if key is None else key)
    assert sent.method == made["method"].upper() and sent.path == made["url"] == "/query"
    for name, value in made["headers"].items():
        assert sent.headers[name] == value, name
    assert json.loads(sent.content) == made["json"]
    # what the client adds beyond the generated request: the bearer token of the document's
    # security scheme, the Accept of its JSON answers, and the body's length
    assert DOC["components"]["securitySchemes"]["bearer"] == {"scheme": "bearer", "type": "http"}
    assert set(sent.headers) - {n.lower() for n in made["headers"]} == {
        "host", "authorization", "accept", "content-length"}
    assert sent.headers["authorization"] == "Bearer t0ken" and sent.headers["accept"] == "application/json"


def test_a_batch_is_what_the_document_says(reference: ModuleType) -> None:
    statement = reference.Statement
    spec = operation("/batch")
    headers = {p["name"] for p in spec["parameters"] if p["in"] == "header"}
    assert headers == {"Fenec-Wait", "Idempotency-Key"}
    assert list(spec["requestBody"]["content"]) == ["application/x-ndjson"]
    wire = Wire(None, 30.0, None, Shared())
    pairs = [("del jobs where id = $1 and owner = $2 require 1", [1, "w1:1"]), ("get jobs count", [])]
    sent = Sent(wire.batch(pairs, wait=1, idempotency_key="ack-1"))
    assert sent.method == "POST" and sent.path == "/batch"
    assert sent.headers["content-type"] == "application/x-ndjson"
    assert sent.headers["fenec-wait"] == "1000" and sent.headers["idempotency-key"] == "ack-1"
    lines = sent.content.decode().splitlines()
    assert [json.loads(line) for line in lines] == [statement(query=t, params=p).to_dict() for t, p in pairs]


def test_the_header_parameters_the_client_sends_are_the_documents() -> None:
    query = operation("/query")
    params = {p["name"]: p for p in query["parameters"] if p["in"] == "header"}
    assert set(params) == {"Fenec-Wait", "Idempotency-Key"}
    pattern = params["Fenec-Wait"]["schema"]["pattern"]
    import re
    sent = Sent(Wire(None, 30.0, None, Shared()).query("get jobs", [], wait=12.5))
    assert re.fullmatch(pattern, sent.headers["fenec-wait"])
    assert TARGET.encode(Wire(None, None, None, Shared()).query("get jobs", None)).startswith(b"POST /query ")


def _schema(ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    ref = ref_or_schema.get("$ref")
    if ref is None:
        return ref_or_schema
    found: dict[str, Any] = DOC["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return found


def test_the_answers_the_client_reads_are_the_documents() -> None:
    for path in ("/query", "/batch"):
        responses = operation(path)["responses"]
        for status in _BY_STATUS:  # every status the client maps to an exception, as the document answers it
            if str(status) not in responses:
                continue
            schema = _schema(responses[str(status)]["content"]["application/json"]["schema"])
            assert "error" in schema["required"] and schema["properties"]["error"]["type"] == "string"
            if path == "/batch" and status == 412:  # a refused batch names its statement
                assert {"at", "completed"} <= set(schema["properties"])
        ok = responses["200"]["content"]["application/json"]["schema"]
        if path == "/batch":
            assert set(_schema(ok)["required"]) == {"ok", "results"}
        else:  # rows, {"affected": n} or {"message": ...}
            shapes = [_schema(s) for s in ok["oneOf"]]
            assert [s["type"] for s in shapes] == ["array", "object", "object"]
            assert {next(iter(s["required"])) for s in shapes[1:]} == {"affected", "message"}
