"""`Fenec-Wait` is read by one parser (http/limits.py `parse_wait`) and capped to one ceiling
(held/lines.py `MAX_WAIT_MS`) where the wait's deadline is set: a held claim's by its line, a
`Fenec-After` change's by the replication routes. Both read any number of digits and refuse anything else
(http.md §7, §8)."""

from __future__ import annotations

import asyncio

from fenecdb_server import Database
from fenecdb_server.http import errors as E
from fenecdb_server.http.exchange import Head, Request
from fenecdb_server.http.limits import BEYOND_ANY_WAIT_MS, parse_wait
from fenecdb_server.http.replication import wait_after


def test_the_parser_reads_any_length_and_refuses_what_is_not_digits() -> None:
    assert parse_wait(b" 250 ") == 250
    assert parse_wait(b"0007") == 7
    assert parse_wait(b"9" * 5000) == BEYOND_ANY_WAIT_MS
    for bad in (b"", b"-1", b"1.5", b"1_000", b"+5", b"soon"):
        assert parse_wait(bad) is None, bad


def _after(wait: bytes) -> Request:
    headers = [(b"fenec-after", b"0"), (b"fenec-wait", wait)]  # change 0: every server holds it
    return Request("POST", "/query", b"/query", Head(headers), "127.0.0.1")


def test_a_fenec_after_wait_is_read_as_a_held_claims_wait_is() -> None:
    """The change is there already: a wait of 5 000 digits is a wait like any (never handed whole
    to `int`, which refuses it) and the request runs; one that is not plain digits (`1_000`, which
    `int` reads as 1 000) is a 400."""
    assert asyncio.run(wait_after(Database(), _after(b"9" * 5000))) is None
    refused = asyncio.run(wait_after(Database(), _after(b"1_000")))
    assert refused is not None and refused.status == E.BAD_REQUEST
    assert refused.body == E.body(E.WAIT_NOT_MS)
