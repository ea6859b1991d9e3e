"""Who gets the job (http.md §8.7, issue 10): held claims ordered by their own point bid, and the
nearest waiting courier takes each order — against a real `fenec-server`, plus the engine's look
among the rows written since a change, in process."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from typing import Any

import httpx
import pytest
from fenecdb_server import Database
from fenecdb_server.engine import bids
from fenecdb_server.held.written import Written
from test_http_e2e import Server, fresh_collection, q, served
from test_http_held import HeldWorker, read_answer, request, status_of, wait_held


@pytest.fixture(scope="module")
def server() -> Any:
    with served("--max-connections", "0") as s:
        yield s


RIDES = "create collection rides (pickup geo @geo, run_at timestamp @sorted, owner text, attempts int)"
NEAREST = ("set rides {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
           "where run_at <= now() order distance(pickup, $2) limit 1 returning id, owner, pickup")
OLDEST = ("set rides {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
          "where run_at <= now() order run_at limit 1 returning id, owner, pickup")


@pytest.fixture
def rides(server: Server) -> Any:
    """A fresh rides collection per test: (client, name)."""
    yield from fresh_collection(server, RIDES, "r")


def point(i: int) -> list[float]:
    """Courier i's point: 1.1 km apart along a street."""
    return [29.0 + 0.013 * i, 41.0]


def courier(server: Server, name: str, who: str, at: list[float]) -> HeldWorker:
    return HeldWorker(server, request(NEAREST.replace("rides", name), who, at, wait=20000))


def put_order(c: httpx.Client, name: str, at: list[float]) -> int:
    r = q(c, f"put {name} {{pickup: $1, run_at: now(), attempts: 0}}", at)
    assert r.status_code == 200, r.text
    return last_ids(c, name, 1)[0]


def last_ids(c: httpx.Client, name: str, n: int) -> list[int]:
    rows = q(c, f"get {name} select id order id desc limit {n}").json()
    return sorted(row["id"] for row in rows)


def counter(c: httpx.Client, metric: str) -> int:
    m = re.search(rf"^{metric} (\d+)$", c.get("/_metrics").text, re.M)
    assert m, metric
    return int(m.group(1))


def answered(workers: dict[str, HeldWorker]) -> list[str]:
    return [who for who, w in workers.items() if not w.thread.is_alive()]


def took(w: HeldWorker) -> dict:
    status, rows = w.result()
    assert status == 200 and len(rows) == 1, (status, rows)
    return rows[0]


def close_all(workers: Any) -> None:
    for w in workers:
        w.close()


@pytest.fixture
def workers() -> Any:
    """The test's held claims by name, each closed at its end whatever happened."""
    held: dict[str, HeldWorker] = {}
    yield held
    close_all(held.values())


def line_up(server: Server, c: httpx.Client, name: str, workers: dict[str, HeldWorker], n: int) -> None:
    """Couriers c0 ... c{n-1}, courier i at point(i), each held before the next comes."""
    for i in range(n):
        workers[f"c{i}"] = courier(server, name, f"c{i}", point(i))
        wait_held(c, len(workers))


def test_each_order_goes_to_the_nearest_waiting_courier_alone(
        server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    c, name = rides
    line_up(server, c, name, workers, 10)
    # the orders land near couriers in an order unrelated to how long they waited
    for n, k in enumerate([6, 2, 9, 0, 4]):
        runs = counter(c, "fenec_held_runs_total")
        at = [point(k)[0] + 0.002, point(k)[1] + 0.001]  # 200 m from courier k, 900 m+ from the rest
        oid = put_order(c, name, at)
        row = took(workers[f"c{k}"])
        assert (row["id"], row["owner"]) == (oid, f"c{k}")
        # only that courier's claim answered; the others still wait, and it ran once
        time.sleep(0.15)
        assert sorted(answered(workers)) == sorted(f"c{j}" for j in [6, 2, 9, 0, 4][: n + 1])
        assert counter(c, "fenec_held_runs_total") - runs == 1
    assert q(c, f"get {name} where owner = null").json() == []


def test_a_tie_goes_to_the_courier_waiting_longest(server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    c, name = rides
    east, west = [0.01, 41.0], [-0.01, 41.0]
    # two at one point and one as far on the other side, the one to the east first
    for who, at in (("e1", east), ("w1", west), ("e2", east)):
        workers[who] = courier(server, name, who, at)
        wait_held(c, len(workers))
    middle = [0.0, 41.0]  # as far from east as from west, to the last bit
    got = []
    for _ in range(3):
        put_order(c, name, middle)
        time.sleep(0.05)
        done = [who for who in answered(workers) if who not in got]
        assert len(done) == 1, done
        got.append(done[0])
    assert got == ["e1", "w1", "e2"]
    # and at one point: the one held longest, whatever its place in the line of points
    more = {}
    for who in ("x1", "x2"):
        more[who] = workers[who] = courier(server, name, who, east)
        wait_held(c, len(more))
    put_order(c, name, east)
    assert took(more["x1"])["owner"] == "x1"
    time.sleep(0.1)
    assert more["x2"].thread.is_alive()


def test_a_burst_of_orders_each_to_its_nearest_courier(server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    c, name = rides
    line_up(server, c, name, workers, 5)
    near = {k: [point(k)[0] + 0.001, 41.0005] for k in (3, 1, 4)}
    r = q(c, f"put {name} [" + ", ".join(f"{{pickup: ${n + 1}, run_at: now(), attempts: 0}}"
                                         for n in range(3)) + "]", *near.values())
    assert r.status_code == 200, r.text
    ids = dict(zip(near, last_ids(c, name, 3), strict=False))
    for k in (3, 1, 4):
        row = took(workers[f"c{k}"])
        assert row["id"] == ids[k]
    time.sleep(0.15)
    assert workers["c0"].thread.is_alive() and workers["c2"].thread.is_alive()
    assert q(c, f"get {name} where owner = null").json() == []


def test_more_orders_than_the_nearest_can_take_go_on_down_the_line(
        server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    c, name = rides
    line_up(server, c, name, workers, 4)
    # two orders at courier 0's door: it takes one, the next nearest (courier 1) the other
    near0 = [point(0)[0] - 0.001, 41.0]
    q(c, f"put {name} [{{pickup: $1, run_at: now(), attempts: 0}}, {{pickup: $1, run_at: now(), attempts: 0}}]",
      near0)
    assert took(workers["c0"])["owner"] == "c0"
    assert took(workers["c1"])["owner"] == "c1"
    time.sleep(0.1)
    assert answered(workers) == ["c0", "c1"]


def test_a_courier_that_disconnects_mid_bid_leaves_its_order_to_the_next_nearest(
        server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    c, name = rides
    line_up(server, c, name, workers, 4)
    workers["c2"].close()  # the nearest to the order goes away as it is placed
    oid = put_order(c, name, [point(2)[0] + 0.004, 41.0])  # then c3 is nearest, then c1
    row = took(workers["c3"])
    assert (row["id"], row["owner"]) == (oid, "c3")
    assert q(c, f"get {name} where owner = 'c2'").json() == []  # never leased to no one
    time.sleep(0.1)
    assert workers["c0"].thread.is_alive() and workers["c1"].thread.is_alive()


def test_a_close_read_with_the_put_in_one_loop_turn_still_passes_the_order_on(
        server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    """The server is stopped while c2 closes and the order is sent, so it reads both at once (as a
    busy machine does): c2's close must count before its run, not several loop turns later."""
    c, name = rides
    line_up(server, c, name, workers, 4)
    text = f"put {name} {{pickup: $1, run_at: now(), attempts: 0}}"
    body = json.dumps({"query": text, "params": [[point(2)[0] + 0.004, 41.0]]}).encode()
    producer = socket.create_connection(server.addr, timeout=40)
    producer.sendall(b"GET /_health HTTP/1.1\r\nHost: t\r\n\r\n")
    assert status_of(read_answer(producer)) == 200  # accepted and read from: the put comes on a known connection
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        workers["c2"].close()
        producer.sendall(b"POST /query HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert status_of(read_answer(producer)) == 200
    producer.close()
    oid = last_ids(c, name, 1)[0]
    row = took(workers["c3"])
    assert (row["id"], row["owner"]) == (oid, "c3")
    assert q(c, f"get {name} where owner = 'c2'").json() == []


def test_field_ordered_and_point_ordered_claims_on_one_collection(
        server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    c, name = rides
    workers["c0"] = courier(server, name, "c0", point(0))
    wait_held(c, 1)
    workers["f"] = HeldWorker(server, request(OLDEST.replace("rides", name), "f", wait=20000))
    wait_held(c, 2)
    workers["c1"] = courier(server, name, "c1", point(1))
    wait_held(c, 3)
    # at c0's door: c0 is nearest, and has waited longer than the claim that takes the oldest
    put_order(c, name, point(0))
    assert took(workers["c0"])["owner"] == "c0"
    time.sleep(0.1)
    assert answered(workers) == ["c0"]
    # at c1's door: a field order ranks every job alike, so it ties with c1, and has waited longer
    put_order(c, name, point(1))
    assert took(workers["f"])["owner"] == "f"
    time.sleep(0.1)
    assert sorted(answered(workers)) == ["c0", "f"]
    # the next goes to c1, wherever it is
    put_order(c, name, point(0))
    assert took(workers["c1"])["owner"] == "c1"
    # and field-ordered claims beside couriers keep first come, first served among themselves
    fifo = {}
    for who in ("f1", "f2", "f3"):
        fifo[who] = HeldWorker(server, request(OLDEST.replace("rides", name), who, wait=20000))
        wait_held(c, len(fifo))
    workers.update(fifo)
    workers["c9"] = courier(server, name, "c9", point(9))
    wait_held(c, 4)
    q(c, f"put {name} [{{pickup: $1, run_at: now() - 3, attempts: 0}}, {{pickup: $1, run_at: now() - 2, "
         f"attempts: 0}}, {{pickup: $1, run_at: now() - 1, attempts: 0}}]", point(9))
    got = {who: took(w) for who, w in fifo.items()}
    assert [got[w]["id"] for w in ("f1", "f2", "f3")] == sorted(got[w]["id"] for w in got)
    time.sleep(0.1)
    assert workers["c9"].thread.is_alive()  # it waited last: every field claim came before it


def test_a_delayed_order_goes_to_the_nearest_when_it_comes_due(
        server: Server, rides: Any, workers: dict[str, HeldWorker]) -> None:
    c, name = rides
    due = int(time.time() * 1000) + 700
    q(c, f"put {name} {{pickup: $1, run_at: $2, attempts: 0}}", [point(3)[0] + 0.001, 41.0], due)
    line_up(server, c, name, workers, 5)
    row = took(workers["c3"])
    assert row["owner"] == "c3" and workers["c3"].at * 1000 >= due
    time.sleep(0.1)
    assert answered(workers) == ["c3"]


def test_a_look_reads_the_rows_written_since_not_the_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    db = Database()
    db.query(RIDES)
    written = Written()
    written.start(db.observe(written.note))
    db.query("put rides [" + ", ".join(f"{{pickup: [{29 + i / 1000}, 41], run_at: now() + 600000, attempts: 0}}"
                                       for i in range(2000)) + "]")
    before = db.seq
    couriers = [[29 + i / 100, 41.0] for i in range(20)]
    holds = [db.prepare_hold([(NEAREST, [f"c{i}", at])]) for i, at in enumerate(couriers)]
    profiles = [bids.profile(h) for h in holds]
    assert all(p is not None and p.own and p.incremental for p in profiles)
    assert bids.profile(db.prepare_hold([(OLDEST, ["f"])])).own is False  # type: ignore[union-attr]
    db.query("put rides {pickup: [29.101, 41], run_at: now(), attempts: 0}")
    new = 2001

    def no_scan(*a: Any, **k: Any) -> Any:
        raise AssertionError("a look read the collection")

    monkeypatch.setattr(bids, "pick", no_scan)
    seq, looks = db.look(lambda: (db.seq, bids.look_all([bids.Ask(p, before, set()) for p in profiles], written.since)))  # type: ignore[arg-type]
    assert seq == db.seq
    assert [lk.rid for lk in looks] == [new] * 20
    assert [lk.matched for lk in looks] == [{new}] * 20
    nearest = min(range(20), key=lambda i: looks[i].rank)
    assert nearest == 10  # courier 10 stands at 29.10
    # after it is taken, each looks at the write that took it, finds nothing, and reads nothing else
    db.query("set rides {owner: 'c10', run_at: now() + 30000} where id = $1", [new])
    again = db.look(lambda: bids.look_all([bids.Ask(p, seq, {new}) for p in profiles], written.since))  # type: ignore[arg-type]
    assert all(lk.rid is None and lk.matched == set() for lk in again)
    # a change older than the history holds: the look reads the collection as the claim would
    monkeypatch.undo()
    db2 = Database()
    db2.query(RIDES)
    db2.query("put rides {pickup: [29, 41], run_at: now(), attempts: 0}")
    written2 = Written()
    written2.start(db2.observe(written2.note))
    h = db2.prepare_hold([(NEAREST, ["c", [29, 41]])])
    (lk,) = db2.look(lambda: bids.look_all([bids.Ask(bids.profile(h), 0, set())], written2.since))  # type: ignore[arg-type]
    assert lk.rid == 1 and lk.matched is None


COURIER_POLICY = """\
zones  read                            where owner = $jwt.sub                                                       for courier
zones  update(owner, run_at, attempts) where zone = $jwt.zone and run_at <= now() and new.owner = $jwt.sub   for courier
"""
ZONES = ("create collection zones (zone text, pickup geo @geo, run_at timestamp @sorted, owner text, "
         "attempts int)")
SECRET = "a secret for the bidding tests, longer than 32 bytes"


def test_couriers_with_tokens_bid_only_for_the_orders_their_rules_let_them_take(tmp_path: Any) -> None:
    from fenecdb_server.http.tokens import mint_claims

    (tmp_path / "couriers.policy").write_text(COURIER_POLICY)
    (tmp_path / "jwt.secret").write_text(SECRET + "\n")
    root = "root-token-for-the-bidding-test"
    s = Server("--http-token", root, "--jwt-secret-file", str(tmp_path / "jwt.secret"), "--policy",
               str(tmp_path / "couriers.policy"), "--max-connections", "0", "--auth-delay", "0")
    workers: dict[str, HeldWorker] = {}
    try:
        with s.client(headers={"Authorization": f"Bearer {root}"}) as c:
            assert q(c, ZONES).status_code == 200
            claim = NEAREST.replace("rides", "zones")
            spots = [[-0.01, 41.0], [0.0, 41.0], [0.01, 41.0]]
            for i, zone in enumerate(("north", "south", "north")):
                token = mint_claims({"exp": int(time.time() + 600), "sub": f"c{i}", "role": "courier",
                                     "zone": zone}, SECRET.encode())
                body = request(claim, f"c{i}", spots[i], wait=20000)
                body = body.replace(b"\r\n\r\n", f"\r\nAuthorization: Bearer {token}\r\n\r\n".encode(), 1)
                workers[f"c{i}"] = HeldWorker(s, body)
                wait_held(c, i + 1)
            # at c1's door, but in the north: c1 (south) may not take it, so the nearest northern courier does
            runs = counter(c, "fenec_held_runs_total")
            q(c, "put zones {zone: 'north', pickup: $1, run_at: now(), attempts: 0}", spots[1])
            # c0 and c2 stand as far from it: the tie goes to c0, which waited longer
            time.sleep(0.2)
            assert answered(workers) == ["c0"]
            assert took(workers["c0"])["owner"] == "c0"
            assert counter(c, "fenec_held_runs_total") - runs == 1  # c1 never bid: its rules refuse the row
            time.sleep(0.1)
            assert answered(workers) == ["c0"]
            q(c, "put zones {zone: 'south', pickup: $1, run_at: now(), attempts: 0}", [0.02, 41.0])
            assert took(workers["c1"])["owner"] == "c1"  # the only southern courier, however far
            time.sleep(0.1)
            assert sorted(answered(workers)) == ["c0", "c1"]
    finally:
        close_all(workers.values())
        assert s.stop() == 0
