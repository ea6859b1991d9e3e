"""`GET /_openapi.json`: a static OpenAPI 3.1 document of the routes this server serves
(http.md §2), with no collection names in it. The Python client's transport is generated from
it; the same document is committed as `server/openapi.json` and a test checks they are equal.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ..errors import STATUS
from ..held import MAX_WAIT_MS
from . import errors as E

VERSION = "0.1.0"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _err(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _batch_err(description: str) -> dict[str, Any]:
    return _json(_ref("BatchError"), description)


_SEQ = {"Fenec-Seq": {"description": "The change counter after the write.", "schema": {"type": "integer"}}}
_VERSION_H = {"X-Fenecdb-Version": {"description": "Server version.", "schema": {"type": "string"}}}
_REPLAYED = {"Idempotent-Replayed": {"description": "`true` on a stored answer replayed.",
                                     "schema": {"type": "string", "enum": ["true"]}}}
_AUTH = {"WWW-Authenticate": {"description": "`Bearer`.", "schema": {"type": "string"}}}
_RETRY = {"Retry-After": {"description": "Seconds.", "schema": {"type": "integer"}}}

_PARAMETERS = [
    {"name": "Fenec-Wait", "in": "header", "required": False,
     "description": f"Hold a set/del claim that would take nothing for at most this many ms (cap {MAX_WAIT_MS}).",
     "schema": {"type": "string", "pattern": "^\\s*[0-9]+\\s*$"}},
    {"name": "Idempotency-Key", "in": "header", "required": False,
     "description": "Make a write safe to retry (1 to 255 bytes).",
     "schema": {"type": "string", "minLength": 1, "maxLength": 255}},
]


def _common(batch: bool) -> dict[str, Any]:
    bad = _batch_err if batch else _err
    return {
        str(E.BAD_REQUEST): bad("Malformed body, FenecQL syntax or type error, a claim that cannot be held, a bad header."),
        str(E.UNAUTHORIZED): {**_err("A token is required and is missing or unknown."), "headers": _AUTH},
        str(E.FORBIDDEN): bad("A write on a read-only server."),
        str(E.NOT_FOUND): bad("Unknown collection, field or path."),
        str(E.CONFLICT): bad("A @unique value, id or collection name already taken."),
        str(E.TIMED_OUT): _err("The request head (--header-timeout) or body (--body-timeout) did not arrive in time; "
                    "the connection is closed."),
        str(E.LENGTH_REQUIRED): _err("A chunked body."),
        str(STATUS["unmet"]): bad("`require N` not met."),
        str(E.TOO_LARGE): _err("A body over 64 MiB, or statement text over --max-statement-bytes (default 1 MiB)."),
        str(STATUS["conflict"]): _err("An Idempotency-Key already used with another request."),
        str(E.HEAD_TOO_LARGE): _err("A header block over 64 KiB."),
        str(E.FAULT): bad("The disk refused a write, or an internal fault."),
        str(E.UNAVAILABLE): {**_err("Too many connections (past --max-connections only /_health and /_metrics answer)."),
                "headers": _RETRY},
    }


def document() -> dict[str, Any]:
    answer = {"oneOf": [
        {"type": "array", "items": {"type": "object"}, "description": "Rows (or [{\"count\": n}])."},
        _ref("Affected"), _ref("Message")]}
    result = {"oneOf": [
        {"type": "object", "required": ["rows"], "properties": {"rows": {"type": "array", "items": {"type": "object"}}}},
        _ref("Affected"), _ref("Message")]}
    return {
        "openapi": "3.1.0",
        "info": {"title": "FenecDB job queues", "version": VERSION,
                 "description": "FenecQL over HTTP: one statement per /query, atomic blocks over /batch, "
                                "held claims with Fenec-Wait."},
        "paths": {
            "/query": {"post": {
                "operationId": "query", "summary": "Run one FenecQL statement.",
                "parameters": _PARAMETERS,
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Statement")}}},
                "responses": {str(E.OK): {**_json(answer, "The statement's answer."),
                                      "headers": {**_SEQ, **_VERSION_H, **_REPLAYED}}, **_common(False)},
            }},
            "/batch": {"post": {
                "operationId": "batch", "summary": "Run several statements as one atomic block.",
                "parameters": _PARAMETERS,
                "requestBody": {"required": True, "content": {"application/x-ndjson": {"schema": {
                    "type": "string", "description": "One Statement object per line; blank lines are skipped."}}}},
                "responses": {str(E.OK): {**_json(_ref("BatchAnswer"), "Every statement's result, in order."),
                                      "headers": {**_SEQ, **_VERSION_H, **_REPLAYED}}, **_common(True)},
            }},
            "/_health": {
                "get": {"operationId": "health", "summary": "Liveness and readiness; no token.",
                        "responses": {str(E.OK): _json(_ref("Health"), "The data is loaded.")}},
                "head": {"operationId": "healthHead", "summary": "Liveness, no body.",
                         "responses": {str(E.OK): {"description": "The data is loaded."}}},
            },
            "/_metrics": {"get": {
                "operationId": "metrics", "summary": "Prometheus text.",
                "responses": {str(E.OK): {"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}},
                              str(E.UNAUTHORIZED): {**_err("A token is required."), "headers": _AUTH}},
            }},
            "/": {"get": {
                "operationId": "root", "summary": "The server's version and its collections.",
                "responses": {str(E.OK): _json(_ref("Root"), "Version and collection names."),
                              str(E.UNAUTHORIZED): {**_err("A token is required."), "headers": _AUTH}},
            }},
            "/_whoami": {"get": {
                "operationId": "whoami", "summary": "What the caller's token may do.",
                "responses": {str(E.OK): _json(_ref("Whoami"), "The rules that apply to the token; "
                                                           "`full` for the server token or an open server."),
                              str(E.UNAUTHORIZED): {**_err("A token is required and is missing, unknown, forged or expired."),
                                      "headers": _AUTH}},
            }},
            "/collections": {"get": {
                "operationId": "collections", "summary": "Every collection's schema.",
                "responses": {str(E.OK): _json({"type": "array", "items": _ref("Collection")}, "Schemas."),
                              str(E.UNAUTHORIZED): {**_err("A token is required."), "headers": _AUTH}},
            }},
            "/_openapi.json": {"get": {
                "operationId": "openapi", "summary": "This document.",
                "responses": {str(E.OK): _json({"type": "object"}, "OpenAPI 3.1.")},
            }},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Statement": {"type": "object", "required": ["query"], "properties": {
                    "query": {"type": "string", "description": "Exactly one FenecQL statement (`sql` is an alias)."},
                    "params": {"description": "$1 is the first element; a non-array is one parameter.",
                               "oneOf": [{"type": "array"}, {"type": "null"}]}}},
                "Affected": {"type": "object", "required": ["affected"],
                             "properties": {"affected": {"type": "integer", "minimum": 0}}},
                "Message": {"type": "object", "required": ["message"], "properties": {"message": {"type": "string"}}},
                "BatchAnswer": {"type": "object", "required": ["ok", "results"], "properties": {
                    "ok": {"type": "integer"}, "results": {"type": "array", "items": result}}},
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
                "BatchError": {"type": "object", "required": ["error"], "properties": {
                    "error": {"type": "string"}, "completed": {"type": "integer"}, "at": {"type": "integer"}}},
                "Health": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}},
                "Root": {"type": "object", "required": ["fenecdb", "collections"], "properties": {
                    "fenecdb": {"type": "string"}, "collections": {"type": "array", "items": {"type": "string"}}}},
                "Whoami": {"type": "object", "required": ["sub", "rules"], "properties": {
                    "sub": {"description": "The token's subject; null for the server token."},
                    "full": {"type": "boolean", "description": "Everything: the server token, an open server."},
                    "append_only": {"type": "array", "items": {"type": "string"}},
                    "rules": {"type": "array", "items": _ref("Rule")}}},
                "Rule": {"type": "object", "required": ["collection", "grants", "fields", "rows"], "properties": {
                    "collection": {"type": "string"},
                    "grants": {"type": "array", "items": {"type": "string"}},
                    "fields": {"type": ["array", "null"], "items": {"type": "string"},
                               "description": "update's field list; null: any field."},
                    "rows": {"type": ["string", "null"], "description": "The filter as written; null: every row."}}},
                "Field": {"type": "object", "required": ["name", "type"], "properties": {
                    "name": {"type": "string"}, "type": {"type": "string"},
                    "index": {"type": ["string", "null"]}, "required": {"type": "boolean"}}},
                "Collection": {"type": "object", "required": ["name", "fields"], "properties": {
                    "name": {"type": "string"}, "fields": {"type": "array", "items": _ref("Field")}}},
            },
        },
        "security": [{}, {"bearer": []}],
    }


@lru_cache(maxsize=1)
def document_bytes() -> bytes:
    return text().encode()


def text() -> str:
    """The committed form (server/openapi.json): sorted keys, two-space indent, final newline."""
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"
