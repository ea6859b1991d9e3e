"""`/batch` bodies read line by line: the fast read of a plain body (each line straight through
orjson) answers exactly what the general read answers, statements or refusal, for every body."""

from __future__ import annotations

import json

import pytest
from fenecdb_server import Database
from fenecdb_server.http import intake
from fenecdb_server.http.app import App, Config, Refusal
from fenecdb_server.http.exchange import request_of

ACK = "del jobs where id = $1 and owner = $2 require 1"

BODIES = [
    "\n".join(json.dumps({"query": ACK, "params": [i, "w:1"]}) for i in range(10)),
    json.dumps({"query": ACK, "params": [1, "w"]}) + "\n\n   \n" + json.dumps({"sql": "get jobs"}) + "\n",
    json.dumps({"query": ACK, "params": [1, "w"]}) + "\r\n" + json.dumps({"query": "get jobs"}),
    json.dumps({"query": "get jobs", "params": 7}),
    '{"query": "get jobs"} trailing',
    # two lines that are one object only when read together: refused at line 1, never run as one
    '{"query": "get x", "params": [{}\n{}]}, {"query": "get y"}',
    '[1\n2]',
    '{"query": "get jobs"}\n[1, 2]',
    '{"query": "get jobs"}\n{"query": 5}',
    '{"query": "get jobs"}\n{"params": []}',
    '{"query": "get jobs", "params": [NaN]}',
    '{"query": "get jobs", "params": [1e999]}',
    '{"query": "get jobs", "params": [' + "[" * 2000 + "]" * 2000 + "]}",
    '{"query": "get jobs", "params": [12345678901234567890]}\n{"query": "get jobs"}',
    '{"query": "get jobs", "params": [-9223372036854775808]}',
    '{"query": "caf\u00e9", "params": ["\\ud800"]}',
    "",
    "\n\n",
]


def outcome(app: App, body: bytes) -> object:
    req = request_of({"method": "POST", "path": "/batch", "headers": [(b"content-length", b"1")], "client": None})
    try:
        work = app.intake.batch_work(req, body)
    except Refusal as r:
        return ("refused", r.status, r.body)
    return [(text, params) for text, params in work.statements]


@pytest.mark.parametrize("body", BODIES)
def test_the_fast_read_answers_as_the_general_read(body, monkeypatch):
    app = App(Database(), Config())
    raw = body.encode("utf-8", "surrogatepass")
    quick = outcome(app, raw)
    monkeypatch.setattr(intake.numbers, "plain", lambda raw: False)
    assert outcome(app, raw) == quick


def test_lines_joined_into_one_object_are_refused_at_their_first_line():
    app = App(Database(), Config())
    got = outcome(app, b'{"query": "get x", "params": [{}\n{}]}, {"query": "get y"}')
    assert got[0] == "refused" and got[1] == 400
    assert json.loads(got[2])["error"].startswith("batch line 1: ")
