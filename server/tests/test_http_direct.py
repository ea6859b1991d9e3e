"""The claim's direct path (http/protocol.py): a `POST /query` or `/batch` is read and answered
by the protocol itself, with no ASGI cycle. It must answer exactly what the ASGI door answers, in the
order requests came on a connection, whichever path each took.

The ASGI door is what a server with `--access-log` runs for every request, so the same requests sent
to such a server are the reference. Each test runs at the default `--sync 250` and at `--sync always`,
where a write's answer waits for its loop turn's fdatasync (http/durable.py) and the connection's next
request waits behind it."""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path

import pytest
from test_http_e2e import Server, complete, read_from

SYNCS = pytest.mark.parametrize("sync", ["250", "always"])


def server(tmp_path: Path, sync: str, name: str, *flags: str) -> Server:
    return Server("--file", str(tmp_path / f"{name}.fenec"), "--sync", sync, *flags)

JOBS = "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)"
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 2 returning id, owner, attempts")

# (path, body, extra headers): every kind of answer the direct path gives, and the ones it hands on
REQUESTS: list[tuple[str, bytes, dict[str, str]]] = [
    ("/query", json.dumps({"query": JOBS}).encode(), {}),
    ("/query", json.dumps({"query": "put jobs $1", "params": [[{"run_at": 0, "attempts": 0}] * 5]}).encode(), {}),
    ("/query", json.dumps({"query": CLAIM, "params": ["w1"]}).encode(), {}),
    ("/batch", (json.dumps({"query": "get jobs count"}) + "\n" + json.dumps({"query": CLAIM, "params": ["w2"]})).encode(), {}),
    ("/query", json.dumps({"query": "put jobs {attempts: 1}"}).encode(), {"Idempotency-Key": "k-1"}),
    ("/query", json.dumps({"query": "put jobs {attempts: 1}"}).encode(), {"Idempotency-Key": "k-1"}),  # replayed
    ("/query", json.dumps({"query": "put jobs {attempts: 2}"}).encode(), {"Idempotency-Key": "k-1"}),  # 422
    ("/query", b'{"query": ', {}),  # not JSON
    ("/query", b'{"query": "get jobs", "params": [1]}\xff', {}),  # not UTF-8
    ("/query", json.dumps({"query": "get nope"}).encode(), {}),  # 404
    ("/query", json.dumps({"query": "get jobs where"}).encode(), {}),  # 400 with a caret
    ("/query", json.dumps({"query": "del jobs where id = 99 require 1"}).encode(), {}),  # 412
    ("/query", json.dumps({"query": "get jobs where id = $1", "params": [12345678901234567890123]}).encode(), {}),
    ("/batch", b"\n\n", {}),  # an empty batch
    ("/query", json.dumps({"query": "get jobs where owner in [" + ",".join(['"w1"'] * 2000) + "] count"}).encode(),
     {}),  # a long text: parsed off the loop, through the ASGI door
    ("/query", json.dumps({"query": CLAIM, "params": ["w3"]}).encode(), {"Fenec-Wait": "1"}),  # held, takes at once
    ("/query", json.dumps({"query": CLAIM, "params": ["w4"]}).encode(), {"Fenec-Wait": "30"}),  # held to its deadline
    ("/query", json.dumps({"query": "get jobs where owner = 'w3' count"}).encode(), {}),
]


def answers(server: Server) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    """Each request's status, headers (all but the date) and body, over one keep-alive connection."""
    conn = http.client.HTTPConnection(*server.addr, timeout=60)
    out = []
    try:
        for path, body, headers in REQUESTS:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **headers})
            r = conn.getresponse()
            got = r.read()
            out.append((r.status, sorted((k.lower(), v) for k, v in r.getheaders() if k.lower() != "date"), got))
    finally:
        conn.close()
    return out


def direct_count(server: Server) -> int:
    conn = http.client.HTTPConnection(*server.addr, timeout=60)
    try:
        conn.request("GET", "/_metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("fenec_http_direct_total ")))


@SYNCS
def test_the_direct_path_answers_what_the_asgi_door_answers(tmp_path: Path, sync: str) -> None:
    direct = server(tmp_path, sync, "direct")
    asgi = server(tmp_path, sync, "asgi", "--access-log", str(tmp_path / "access.log"))
    try:
        got, want = answers(direct), answers(asgi)
        assert direct_count(direct) == len(REQUESTS) - 1  # all but the long text
        assert direct_count(asgi) == 0
    finally:
        assert direct.stop() == 0 and asgi.stop() == 0
    assert [s for s, _, _ in want] == [200, 200, 200, 200, 200, 200, 422, 400, 400, 404, 400, 412, 400, 400, 200, 200,
                                       200, 200]
    assert json.loads(want[-2][2]) == [] and json.loads(want[-1][2]) == [{"count": 1}]
    assert ("idempotent-replayed", "true") in want[5][1]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, (i, REQUESTS[i][0], REQUESTS[i][1][:80])
    posts = [line for line in (tmp_path / "access.log").read_text().splitlines() if " POST " in line]
    assert len(posts) == len(REQUESTS)  # the reference ran them all through its ASGI app


@SYNCS
def test_pipelined_requests_are_answered_in_order_whichever_way_each_takes(tmp_path: Path, sync: str) -> None:
    s = server(tmp_path, sync, "pipelined")
    try:
        def post(body: bytes) -> bytes:
            return b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

        setup = post(json.dumps({"query": JOBS}).encode())
        requests = [
            post(json.dumps({"query": "put jobs {attempts: 7}"}).encode()),  # direct path
            b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n",  # ASGI (under --sync always: behind a pending answer)
            post(json.dumps({"query": "get jobs select attempts"}).encode()),  # behind an ASGI answer
            post(b'{"query": "get nope"}'),
            b"GET /collections HTTP/1.1\r\nHost: x\r\n\r\n",
            post(json.dumps({"query": "get jobs count"}).encode()),
        ]
        got = _pipelined(s, setup + b"".join(requests), len(requests) + 1)
        assert [st for st, _ in got] == [200, 200, 200, 200, 404, 200, 200]
        assert json.loads(got[2][1]) == {"ok": True}
        assert json.loads(got[3][1]) == [{"attempts": 7}]
        assert json.loads(got[6][1]) == [{"count": 1}]
        # writes one after another on a connection, each answer pending on its fdatasync under always
        got = _pipelined(s, b"".join(post(json.dumps({"query": "put jobs {attempts: $1}", "params": [i]}).encode())
                                     for i in range(20)) + post(b'{"query": "get jobs where attempts < 20 count"}'), 21)
        assert [st for st, _ in got] == [200] * 21
        assert [json.loads(b) for _, b in got] == [{"affected": 1}] * 20 + [[{"count": 21}]]
        # a held claim that takes nothing answers at its deadline, and what came behind it after it
        held = post(json.dumps({"query": CLAIM, "params": ["w"]}).encode()).replace(
            b"\r\n\r\n", b"\r\nFenec-Wait: 50\r\n\r\n", 1)
        got = _pipelined(s, held + b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n" + post(b'{"query": "get jobs count"}'), 3)
        assert [(st, json.loads(b)) for st, b in got] == [(200, []), (200, {"ok": True}), (200, [{"count": 21}])]
    finally:
        assert s.stop() == 0


def _pipelined(s: Server, data: bytes, answers: int) -> list[tuple[int, bytes]]:
    """Send `data` (requests one after another) on one connection; the first `answers` answers."""
    with socket.create_connection(s.addr, timeout=60) as c:
        c.sendall(data)
        got = b""
        while len(_safe(got)) < answers:
            chunk = c.recv(65536)
            assert chunk, "the server closed the connection"
            got += chunk
    return _safe(got)


def _safe(data: bytes) -> list[tuple[int, bytes]]:
    """The whole responses in `data` so far: (status, body) each."""
    out = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)
        if len(rest) < length:
            break
        out.append((int(head.split(b" ", 2)[1]), rest[:length]))
        data = rest[length:]
    return out


@SYNCS
def test_http_1_0_and_connection_close_are_answered_then_closed(tmp_path: Path, sync: str) -> None:
    s = server(tmp_path, sync, "close")
    try:
        for n, (version, extra) in enumerate(((b"HTTP/1.0", b""), (b"HTTP/1.1", b"Connection: close\r\n"))):
            # a read, and a write (under --sync always its answer waits for the fdatasync, then closes)
            for body, status in ((json.dumps({"query": "get nothing"}).encode(), b"404"),
                                 (json.dumps({"query": f"create collection c{n} (n int)"}).encode(), b"200")):
                with socket.create_connection(s.addr, timeout=60) as c:
                    c.sendall(b"POST /query " + version + b"\r\nHost: x\r\n" + extra +
                              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                    data = b""
                    while True:
                        chunk = c.recv(65536)
                        if not chunk:
                            break  # closed by the server after its answer
                        data += chunk
                assert data.startswith(b"HTTP/1.1 " + status + b" ") and b"\r\nconnection: close\r\n" in data.lower()
    finally:
        assert s.stop() == 0


# httptools reads every head; the direct path takes a plain `POST /query` or `/batch` whose head fits
# (protocol.py `_goes_direct`), and anything else goes to the ASGI door. Each of these must be answered
# as the ASGI door answers it: (the request's bytes, cut into the parts sent one after another).
_BODY = json.dumps({"query": "get jobs count"}).encode()
_LEN = b"Content-Length: %d\r\n" % len(_BODY)
ODD_HEADS: list[list[bytes]] = [
    [b"POST /query HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nUser-Agent: t/1 (\x80\xff)\r\nX-Tab: a\tb\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-Spaces:   v   \r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n" + _LEN + b"\r\n" + _BODY],  # a space in a name
    [b"POST /query HTTP/1.1\r\nHost: x\r\n: no name\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nNo-Colon\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\n Folded: 1\r\n" + _LEN + b"\r\n" + _BODY],  # a line starting blank
    [b"POST /query HTTP/1.1\r\nHost: x\r\nX-Ctl: a\x01b\r\n" + _LEN + b"\r\n" + _BODY],  # a control byte
    [b"POST /query HTTP/1.1\r\nHost: x\r\nX-Del: a\x7fb\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nX-Cr: a\rb\r\n" + _LEN + b"\r\n" + _BODY],  # a bare CR in a value
    [b"POST /query HTTP/1.1\r\nHost: x\r\nX-Lf: a\nb\r\n" + _LEN + b"\r\n" + _BODY],  # a bare LF
    [b"POST /query HTTP/1.1\r\nHost: x\r\n" + _LEN + _LEN + b"\r\n" + _BODY],  # Content-Length twice
    [b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 1" + b"0" * 20 + b"\r\n\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(_BODY), _BODY)],
    [b"POST /query HTTP/1.1\r\nHost: x\r\n\r\n"],  # no length
    [b"post /query HTTP/1.1\r\nHost: x\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /query HTTP/1.1\r\nHost: x\r\n" + _LEN, b"\r\n" + _BODY],  # the head cut before its end
    [b"POST /query HTTP/1.1\r\nHost: x\r\n" + _LEN + b"\r\n" + _BODY[:7], _BODY[7:]],  # the body cut
    [b"POST /query HTTP/1.1\r\nHost: x\r\nFenec-Wait: 5\r\n" + _LEN + b"\r\n" + _BODY],
    [b"POST /queryx HTTP/1.1\r\nHost: x\r\n" + _LEN + b"\r\n" + _BODY],
]


def _exchange(addr: tuple[str, int], parts: list[bytes]) -> tuple[int, bytes, bool]:
    """(status, body, whether the server closed after it) for one request sent in parts."""
    with socket.create_connection(addr, timeout=60) as c:
        for k, part in enumerate(parts):
            c.sendall(part)
            if k + 1 < len(parts):
                time.sleep(0.05)  # read apart or together, the answer must be the same
        data = b""
        while not _safe(data):
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        status = int(data.split(b" ", 2)[1]) if data else 0
        got = _safe(data)
        c.settimeout(0.5)
        try:
            closed = c.recv(1) == b""
        except TimeoutError:
            closed = False
    return status, got[0][1] if got else b"", closed


@SYNCS
def test_odd_heads_are_answered_as_the_asgi_door_answers_them(tmp_path: Path, sync: str) -> None:
    direct = server(tmp_path, sync, "direct")
    asgi = server(tmp_path, sync, "reference", "--access-log", str(tmp_path / "access.log"))
    try:
        for s in (direct, asgi):
            with socket.create_connection(s.addr, timeout=60) as c:
                body = json.dumps({"query": JOBS}).encode()
                c.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                assert b" 200 " in c.recv(65536)
        for parts in ODD_HEADS:
            got, want = _exchange(direct.addr, parts), _exchange(asgi.addr, parts)
            assert got == want, (parts[0][:80], got, want)
    finally:
        assert direct.stop() == 0 and asgi.stop() == 0


def test_a_connection_of_direct_path_answers_is_closed_once_idle_not_while_requests_come(tmp_path: Path) -> None:
    """The direct path keeps one keep-alive timer armed while requests come (protocol.py `_answered`):
    requests spaced less than --idle-timeout apart keep the connection, however long they go on past
    the first answer's timeout; once none comes for the timeout, the server closes it."""
    s = server(tmp_path, "250", "idle", "--idle-timeout", "3")
    before = direct_count(s)
    body = json.dumps({"query": "get jobs count"}).encode()
    ask = b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body), body)
    try:
        with socket.create_connection(s.addr, timeout=30) as k:
            first = time.monotonic()
            for _ in range(5):  # one second apart: the last comes 4 s after the first answer, past its 3 s
                k.sendall(ask)
                answer = k.recv(65536)
                assert answer.startswith(b"HTTP/1.1 404 "), answer  # no collection: answered, not closed
                last = time.monotonic()
                time.sleep(1.0)
            assert last - first > 3
            rest = k.recv(4096)  # then silence: the server closes the connection
            while rest:
                rest = k.recv(4096)
            # not before its timeout: counted by the server from its answer's write, which comes before `last`
            # by the answer's way to this process, and on the loop's cached clock; half a second covers both
            assert time.monotonic() - last >= 2.5
        assert direct_count(s) - before == 5  # every request went the direct path
    finally:
        assert s.stop() == 0


def test_each_head_on_a_connection_is_read_for_itself_however_close_to_the_last(tmp_path: Path) -> None:
    """A repeated head is read once (connection.py compares each header line with the last head's):
    a head that repeats the last one but for a value, with a line fewer or a line more, is still read
    for its own lines. The token tells: each answer is the one its own Authorization line asks."""
    s = server(tmp_path, "250", "heads", "--http-token", "right-token")
    body = json.dumps({"query": "get jobs count"}).encode()

    def ask(*lines: bytes) -> bytes:
        return b"POST /query HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            b"".join(line + b"\r\n" for line in lines), len(body), body)

    right, wrong = b"Authorization: Bearer right-token", b"Authorization: Bearer wrong-token"
    steps = [((b"Host: x", right), 404), ((b"Host: x", right), 404),  # no collection: the token was taken
             ((b"Host: x", wrong), 401), ((b"Host: x", right), 404),  # a value differs, then back
             ((b"Host: x",), 401), ((b"Host: x", right), 404),  # a line fewer, then back
             ((b"Host: x", right, b"X-More: 1"), 404), ((b"Host: x", b"X-More: 1"), 401),  # a line more, one less
             ((b"host: x", right), 404), ((b"Host: x", right.upper()), 401)]  # a name's case; a value's case
    try:
        with socket.create_connection(s.addr, timeout=60) as k:
            for lines, status in steps:
                k.sendall(ask(*lines))
                answer = read_from(k, complete)
                assert answer.startswith(b"HTTP/1.1 %d " % status), (lines, answer[:120])
    finally:
        assert s.stop() == 0
