"""The engine on its own, with no file: it hands each write's record to its `Appender`, and those
records, replayed into a fresh engine (engine/records.py), rebuild the same state, keys included."""

from __future__ import annotations

import pytest
from fenecdb_server.engine import records
from fenecdb_server.engine.engine import Engine
from fenecdb_server.engine.idempotency import Idem
from fenecdb_server.errors import FenecError


class Recording:
    """An Appender that keeps what it is handed."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, int, list]] = []
        self.waited: list[object] = []
        self.refuse = False

    def append(self, payload: bytes, seq: int, ops: list) -> object:
        if self.refuse:
            raise FenecError("io", "the disk refused it")
        self.records.append((payload, seq, ops))
        return len(self.records)

    def wait_durable(self, ticket: object) -> None:
        self.waited.append(ticket)


def run(eng: Engine, text: str, params: list | None = None) -> object:
    return eng.execute([(text, params)]).answers[0]


def test_the_records_an_engine_hands_on_rebuild_it() -> None:
    eng = Engine(clock=lambda: 1_777_800_000_000)
    out = Recording()
    eng.appender = out
    run(eng, "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)")
    run(eng, "put jobs $1", [[{"payload": {"n": i}, "run_at": 1_777_799_999_000, "attempts": 0} for i in range(4)]])
    claim = "set jobs {owner: $1, attempts: attempts + 1} where run_at <= now() order run_at limit 2 returning id"
    first = eng.execute([(claim, ["w1"])], idempotency=Idem("*:c1", b"h", 60_000))
    assert first.answers == [[{"id": 1}, {"id": 2}]] and first.taken == 2
    assert [seq for _, seq, _ in out.records] == [1, 2, 3] and out.waited == [1, 2, 3]
    assert out.records[-1][2][-1] == ["k", "*:c1", b"h".hex(), 1_777_800_000_000, 60_000, [[{"id": 1}, {"id": 2}]]]
    again = Engine(clock=lambda: 1_777_800_000_000)
    for payload, _, _ in out.records:
        records.replay(again, payload)
    assert again.seq == eng.seq == 3
    assert run(again, "get jobs order id select id, owner, attempts") == run(eng, "get jobs order id select id, owner, attempts")
    replay = again.execute([(claim, ["w1"])], idempotency=Idem("*:c1", b"h", 60_000))
    assert replay.replayed is not None and replay.replayed.answers == first.answers and not replay.wrote


def test_a_refused_append_puts_the_write_back_and_refuses_later_ones() -> None:
    eng = Engine()
    out = Recording()
    eng.appender = out
    run(eng, "create collection t (n int)")
    out.refuse = True
    with pytest.raises(FenecError, match="refused"):
        run(eng, "put t {n: 1}")
    assert run(eng, "get t count") == [{"count": 0}] and eng.seq == 1
    assert eng.failed == "the disk refused it"
    out.refuse = False
    with pytest.raises(FenecError, match="writes are refused since the disk failed"):
        run(eng, "put t {n: 2}")
    assert run(eng, "get t count") == [{"count": 0}]  # reads go on


def test_in_memory_nothing_is_handed_on() -> None:
    eng = Engine()
    run(eng, "create collection t (n int)")
    assert run(eng, "put t {n: 1}") == {"affected": 1} and eng.seq == 2
