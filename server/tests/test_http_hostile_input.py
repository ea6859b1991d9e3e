"""The reproductions of issue 18 (hostile input), against a real `fenec-server`: each was a broken
promise on the old code, each is a regression test now.

* An `Idempotency-Key` that is not UTF-8 (Latin-1 `order-\\xe9`, allowed: 1 to 255 bytes) lost an
  acknowledged write: the record failed to encode, the block stayed in memory, the retry was
  replayed, and a restart dropped the row.
* Integers past 64 bits in `params` were silently changed (a float, or clamped into an int field);
  the same literal in the text was, and is, 400.
* A `Fenec-Wait` of more than 4 300 digits escaped as a plain-text 500.
* Rows leaked through error messages: another queue's card numbers, through a get by id, a set, a
  claim and a held claim, under the server README's own policy (test_policy_engine.py and
  test_policy_hypothesis.py hold the in-process cases).
* A job with `attempts` at the 64-bit maximum stopped every claim of its queue.
* A token whose `sub` holds a lone surrogate lost its keyed writes as the Latin-1 key did, and its
  rows were answered 500.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from test_http_e2e import Server, raw, status_of
from test_http_held import wait_held

JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
PUT = {"query": "put jobs {payload: $1, run_at: now(), attempts: 0}", "params": [{"to": "ada@example.com"}]}


def count(c: httpx.Client) -> int:
    r = c.post("/query", json={"query": "get jobs count"})
    assert r.status_code == 200, r.text
    return int(r.json()[0]["count"])


def held(s: Server, c: httpx.Client, root: dict[str, str], auth: dict[str, str],
         body: dict[str, Any]) -> Callable[[], httpx.Response]:
    """Send `body` as a held claim (20 s) from a thread, with `auth`'s token, and wait until the
    server holds it (`root` reads the metrics); the function returned waits for its answer."""
    got: dict[str, httpx.Response] = {}

    def post() -> None:
        with s.client() as hc:
            got["r"] = hc.post("/query", json=body, headers={**auth, "Fenec-Wait": "20000"})

    t = threading.Thread(target=post)
    t.start()
    wait_held(c, 1, headers=root)

    def answer() -> httpx.Response:
        t.join(30)
        return got["r"]
    return answer


# -- 1. an acknowledged write is never lost --------------------------------------------------------

def test_a_latin1_idempotency_key_keeps_its_write_across_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "q.fenec")
    key = {"Idempotency-Key": b"order-\xe9"}  # type: ignore[dict-item]  # bytes: the header as sent
    s = Server("--file", path, "--sync", "always")
    try:
        with s.client() as c:
            assert c.post("/query", json={"query": JOBS}).status_code == 200
            first = c.post("/query", json=PUT, headers=key)
            assert first.status_code == 200 and first.json() == {"affected": 1}, first.text
            assert "idempotent-replayed" not in first.headers
            again = c.post("/query", json=PUT, headers=key)
            assert again.status_code == 200 and again.content == first.content
            assert again.headers["idempotent-replayed"] == "true"
            assert count(c) == 1
    finally:
        assert s.stop() == 0
    s = Server("--file", path, "--sync", "always")
    try:
        with s.client() as c:
            assert count(c) == 1  # the acknowledged row is still there
            third = c.post("/query", json=PUT, headers=key)
            assert third.headers.get("idempotent-replayed") == "true" and third.content == first.content
            assert count(c) == 1
    finally:
        assert s.stop() == 0


# -- 7. integers past 64 bits are refused, in params as in the text --------------------------------

def test_integers_past_64_bits_are_refused_in_params_as_in_the_text() -> None:
    s = Server()
    try:
        with s.client() as c:
            assert c.post("/query", json={"query": JOBS}).status_code == 200
            big = "12345678901234567890123"
            text = c.post("/query", json={"query": f"put jobs {{attempts: {big}}}"})
            assert text.status_code == 400 and text.json() == {"error": f"integer {big} is out of range (64-bit)"}
            for value in (big, "-9223372036854775809", "9223372036854775808", "18446744073709551616",
                          "-" + "9" * 5000):
                for doc in (f'{{"query":"put jobs {{attempts: $1}}","params":[{value}]}}',
                            f'{{"query":"put jobs {{payload: $1}}","params":[{{"n":[1,{value}]}}]}}',
                            f'{{"query":"get jobs where attempts = $1","params":{value}}}'):
                    r = c.post("/query", content=doc.encode())
                    assert r.status_code == 400, (doc[:80], r.text)
                    assert r.json()["error"].startswith("integer ") and "out of range (64-bit)" in r.json()["error"]
                    assert len(r.content) < 300  # the number is not echoed whole
                line = f'{{"query":"put jobs {{attempts: $1}}","params":[{value}]}}'
                b = c.post("/batch", content=(json.dumps(PUT) + "\n" + line).encode())
                assert b.status_code == 400 and b.json()["error"].startswith("batch line 2: integer "), b.text
            assert count(c) == 0  # nothing was written, nothing clamped
            # the edges of the range, and long numbers that are not integers, pass as they are
            edge = b'{"query":"put jobs {attempts: $1, payload: $2}","params":[-9223372036854775808,' \
                   b'{"hi":9223372036854775807,"f":1.2345678901234567890123,"e":12345678901234567890e-10}]}'
            assert c.post("/query", content=edge).json() == {"affected": 1}
            got = c.post("/query", json={"query": "get jobs select attempts, payload"}).json()
            assert got == [{"attempts": -9223372036854775808,
                            "payload": {"e": 1234567890.123456789, "f": 1.2345678901234567, "hi": 9223372036854775807}}]
            # a float past a double's range is refused as orjson refuses `1e400`, long or short
            for doc in (b'{"query":"put jobs {payload: $1}","params":[1e400]}',
                        b'{"query":"put jobs {payload: $1}","params":[1' + b"0" * 400 + b'.5]}'):
                r = c.post("/query", content=doc)
                assert r.status_code == 400 and "infinity" in r.json()["error"], r.text
            # digits inside text are text
            assert c.post("/query", json={"query": "put jobs {owner: $1}", "params": ["9" * 40]}).status_code == 200
    finally:
        assert s.stop() == 0


# -- 8. a header number of any length is a JSON 400 (or its cap), never a 500 -----------------------

def test_headers_of_thousands_of_digits_are_answered_in_json() -> None:
    s = Server()
    try:
        body = b'{"query":"get jobs"}'
        for wait, want in ((b"9" * 5000, 404), (b"0" * 5000 + b"5", 404), (b"1" * 4301, 404),
                           (b"-" + b"9" * 5000, 400), (b"9" * 5000 + b".5", 400)):
            r = raw(s.addr, b"POST /query HTTP/1.1\r\nHost: x\r\nFenec-Wait: " + wait +
                    b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            assert status_of(r) == want, r[:300]
            head, _, payload = r.partition(b"\r\n\r\n")
            assert b"application/json" in head and "error" in json.loads(payload)
        for length in (b"9" * 5000, b"0" * 5000 + b"2"):
            r = raw(s.addr, b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}")
            head, _, payload = r.partition(b"\r\n\r\n")
            assert status_of(r) in (400, 413) and b"application/json" in head and "error" in json.loads(payload)
    finally:
        assert s.stop() == 0


# -- 6. an error never shows a row the token may not read ------------------------------------------

SECRET = "a secret for the hostile-input tests, longer than 32 bytes"
ROOT = "root-token-for-hostile-tests"
CARDS = ["4111 1111 1111 1111", "5500 0000 0000 0004", "3400 0000 0000 009", "6011 0000 0000 0004"]
README_JOBS = "create collection jobs (queue text @hash, payload json, run_at timestamp @sorted, owner text, attempts int)"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_no_error_over_http_shows_a_row_of_another_queue(tmp_path: Path) -> None:
    from fenecdb_server.http.tokens import mint_claims
    from test_policy_engine import OWN_JOBS_POLICY

    # the stricter policy (a worker reads only the jobs it holds): a ready job of its own queue is one
    # it may claim but not read, the case the last held claim below needs
    (tmp_path / "jobs.policy").write_text(OWN_JOBS_POLICY)
    (tmp_path / "jwt.secret").write_text(SECRET + "\n")
    s = Server("--http-token", ROOT, "--jwt-secret-file", str(tmp_path / "jwt.secret"),
               "--policy", str(tmp_path / "jobs.policy"), "--auth-delay", "0")
    root = bearer(ROOT)
    w = bearer(mint_claims({"sub": "w-7", "role": "worker", "queue": "mail", "exp": int(time.time()) + 600},
                           SECRET.encode()))
    try:
        with s.client() as c:
            def q(auth: dict[str, str], text: str, *params: Any, **headers: str) -> httpx.Response:
                return c.post("/query", json={"query": text, "params": list(params)}, headers={**auth, **headers})

            assert q(root, README_JOBS).status_code == 200
            for card in CARDS:
                assert q(root, "put jobs {queue: 'pay', payload: {card: $1}, run_at: now(), attempts: 0}",
                         card).status_code == 200
            answers = []
            for rid in range(1, 5):
                answers.append(q(w, "get jobs where id = $1 and timestamp(payload.card) > 0", rid))
                answers.append(q(w, "set jobs {run_at: now()} where id = $1 and timestamp(payload.card) > 0", rid))
            answers.append(q(w, "set jobs {owner: 'w-7', run_at: now() + 30000, attempts: attempts + 1} "
                                "where run_at <= now() and timestamp(payload.card) > 0 order run_at limit 4 returning id"))
            for r in answers:
                assert r.status_code == 200 and r.json() in ([], {"affected": 0}), r.text
            # a held claim, woken by a job of its own queue that it may claim but not read
            answer = held(s, c, root, w, {"query": (
                "set jobs {owner: 'w-7', run_at: now() + 30000, attempts: attempts + 1} "
                "where run_at <= now() and timestamp(payload.card) > 0 order run_at limit 1 returning id")})
            assert q(root, "put jobs {queue: 'mail', payload: {card: $1}, run_at: now(), attempts: 0}",
                     CARDS[0]).status_code == 200
            r = answer()
            assert r.status_code == 400 and r.json() == {"error": "`set jobs` failed on a row this token may not read; "
                                                                  "the reason is withheld, since it would show the row"}
            for card in CARDS:
                assert all(card not in a.text for a in answers) and card not in r.text
    finally:
        assert s.stop() == 0


# -- 9. one job never stops its queue --------------------------------------------------------------

def test_a_job_at_the_64_bit_maximum_of_attempts_does_not_stop_its_queue() -> None:
    s = Server("--http-token", ROOT)
    root = bearer(ROOT)
    claim = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
             "where run_at <= now() order run_at limit 1 returning id, attempts")
    try:
        with s.client() as c:
            def q(text: str, *params: Any, **headers: str) -> httpx.Response:
                return c.post("/query", json={"query": text, "params": list(params)}, headers={**root, **headers})

            assert q(JOBS).status_code == 200
            assert q("put jobs {payload: {}, run_at: now() - 1000, attempts: $1}", 9223372036854775807).status_code == 200
            assert q("put jobs {payload: {}, run_at: now(), attempts: 0}").status_code == 200
            r = q(claim, "w1")
            assert r.status_code == 200 and r.json() == [{"id": 2, "attempts": 1}], r.text
            assert q(claim, "w2").json() == []
            # a held claim beside the poison job is answered the next job that comes
            answer = held(s, c, root, root, {"query": claim, "params": ["w3"]})
            assert q("put jobs {payload: {}, run_at: now(), attempts: 0}").status_code == 200
            r = answer()
            assert r.status_code == 200 and r.json() == [{"id": 3, "attempts": 1}]
            got = q("get jobs select id, owner, attempts order id").json()
            assert got == [{"id": 1, "owner": None, "attempts": 9223372036854775807},
                           {"id": 2, "owner": "w1", "attempts": 1}, {"id": 3, "owner": "w3", "attempts": 1}]
    finally:
        assert s.stop() == 0


# -- 1. (cont.) a token whose sub is not Unicode: its key and its rows are stored and answered -------

def test_a_sub_holding_a_lone_surrogate_keeps_its_keyed_write_and_its_rows_answer(tmp_path: Path) -> None:
    from fenecdb_server.http.tokens import mint_claims

    (tmp_path / "p.policy").write_text("notes read,insert where owner = $jwt.sub\n")
    (tmp_path / "jwt.secret").write_text(SECRET + "\n")
    path = str(tmp_path / "n.fenec")
    flags = ("--file", path, "--http-token", ROOT, "--jwt-secret-file", str(tmp_path / "jwt.secret"),
             "--policy", str(tmp_path / "p.policy"), "--auth-delay", "0")
    odd = bearer(mint_claims({"sub": "u-\ud800", "exp": int(time.time()) + 600}, SECRET.encode()))
    put = {"query": "put notes {text: 'hello'}"}
    s = Server(*flags)
    try:
        with s.client() as c:
            assert c.post("/query", json={"query": "create collection notes (owner text, text text)"},
                          headers=bearer(ROOT)).status_code == 200
            first = c.post("/query", json=put, headers={**odd, "Idempotency-Key": "n-1"})
            assert first.status_code == 200 and first.json() == {"affected": 1}, first.text
            again = c.post("/query", json=put, headers={**odd, "Idempotency-Key": "n-1"})
            assert again.headers.get("idempotent-replayed") == "true"
            got = c.post("/query", json={"query": "get notes select owner, text"}, headers=odd)
            assert got.status_code == 200 and got.json() == [{"owner": "u-\ud800", "text": "hello"}], got.text
    finally:
        assert s.stop() == 0
    s = Server(*flags)
    try:
        with s.client() as c:
            r = c.post("/query", json=put, headers={**odd, "Idempotency-Key": "n-1"})
            assert r.headers.get("idempotent-replayed") == "true"
            assert c.post("/query", json={"query": "get notes count"}, headers=bearer(ROOT)).json() == [{"count": 1}]
    finally:
        assert s.stop() == 0
