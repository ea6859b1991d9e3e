"""Hypothesis against the HTTP layer of a real `fenec-server`: bodies shaped by the committed
OpenAPI document's `Statement` schema (and broken ones), headers the spec names, and raw
malformed requests over a socket. Whatever comes in: never a 500, never a hang, never a crash,
and every error body is JSON with an `error` string."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_http_e2e import JOBS, OPENAPI, Server, served

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def server() -> Any:
    setup = [JOBS, "put jobs [{payload: 1, run_at: now(), attempts: 0}, {payload: 2, run_at: now() + 5, attempts: 0}]"]
    with served("--max-connections", "0", setup=setup) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    with server.client(timeout=10) as c:
        yield c


WORDS = ["get", "set", "del", "put", "jobs", "where", "run_at", "<=", "now()", "+", "30000", "order", "limit",
         "1", "returning", "*", "require", "{", "}", "owner:", "$1", "$2", "count", "select", "id", ",", "(", ")",
         "and", "or", "not", "null", "'x'", "create", "collection", "drop", "[", "]", "desc", "case", "when",
         "then", "else", "end", "=", "!=", "attempts", "payload.to", "bucket(now(), 60000)", ";", "\"", "-"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
statements = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join)


def statement_bodies() -> st.SearchStrategy[Any]:
    """Objects per the document's `Statement` schema, and everything else a client might send."""
    schema = json.loads(OPENAPI.read_text())["components"]["schemas"]["Statement"]
    assert schema["required"] == ["query"]
    good = st.fixed_dictionaries({"query": statements}, optional={"params": st.none() | st.lists(json_values, max_size=3)})
    return good | st.fixed_dictionaries({"sql": statements, "params": json_values}) | json_values


headers = st.fixed_dictionaries({}, optional={
    "Fenec-Wait": st.sampled_from(["0", "1", "20", "05", "-1", "x", "99999999999999999999"]),
    "Idempotency-Key": st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=300),
})


def check(r: httpx.Response) -> None:
    assert r.status_code < 500, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    if r.status_code >= 400:
        assert isinstance(doc, dict) and isinstance(doc["error"], str)


@SETTINGS
@given(body=statement_bodies(), hdrs=headers)
def test_query_bodies(client: httpx.Client, body: Any, hdrs: dict[str, str]) -> None:
    check(client.post("/query", content=json.dumps(body).encode(), headers=hdrs))


@SETTINGS
@given(lines=st.lists(statement_bodies().map(json.dumps) | st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
                      max_size=5), hdrs=headers)
def test_batch_bodies(client: httpx.Client, lines: list[str], hdrs: dict[str, str]) -> None:
    check(client.post("/batch", content="\n".join(lines).encode("utf-8", "surrogateescape"), headers=hdrs))


token = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)


@SETTINGS
@given(method=st.sampled_from(["GET", "POST", "PUT", "HEAD", "OPTIONS", "DELETE", "BREW", "TRACE", "G\x00T", ""]),
       path=st.sampled_from(["/query", "/batch", "/", "/_health", "/_metrics", "/x?y=1", "*", "//..", "/%ff"]),
       version=st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "HTTP/9.9", ""]),
       hdrs=st.lists(st.tuples(token, token), max_size=5),
       length=st.sampled_from([None, "0", "5", "-1", "abc", "99999999999999999999"]),
       body=st.binary(max_size=40))
def test_raw_requests(server: Server, method: str, path: str, version: str, hdrs: list[tuple[str, str]],
                      length: str | None, body: bytes) -> None:
    head = f"{method} {path} {version}\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs)
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    data = head.encode("latin-1") + b"Connection: close\r\n\r\n" + body
    short = length is not None and length.isdigit() and int(length) > len(body)
    with socket.create_connection(server.addr, timeout=0.5 if short else 5) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            # a body announced longer than sent is waited for: that is not a hang of the server
            assert short, data
            return
        except ConnectionResetError:
            return
    if out:
        status = int(out.split(b" ", 2)[1])
        assert status < 500 or status == 501, out  # 501: a method the server does not know
    with socket.create_connection(server.addr, timeout=5) as s:
        s.sendall(b"GET /_health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")
