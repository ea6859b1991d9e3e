"""A write is all or nothing, whatever fails on its way (server README, invariants 2 and 3).

A fault is injected at each step of a keyed write — applying the documents, storing the key with
its answers, encoding the record, appending it, measuring it, telling the listeners — as
each kind of exception: a `FenecError`, a bug (`RuntimeError`), `MemoryError`, an encoder's
`UnicodeEncodeError` (issue 18: a Latin-1 `Idempotency-Key` failed the record's encoding after the
rows were in memory; the write was answered 500, read, claimed and replayed, then gone after a
restart). (The answer is rendered by the HTTP layer after the write, outside the lock: no step of
the write.) Then memory, the file after a reopen, and a retry under the same key must agree: the
write is everywhere, replayed under its key, or nowhere, with no key kept.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from typing import Any

import pytest
from fenecdb_server import Database
from fenecdb_server.database import Idem
from fenecdb_server.engine import records as records_module
from fenecdb_server.engine.collection import Collection
from fenecdb_server.engine.idempotency import Keys
from fenecdb_server.errors import FenecError
from fenecdb_server.http.idempotency import namespaced, request_hash
from fenecdb_server.storage.files import FaultyFiles

pytestmark = pytest.mark.sources  # faults injected inside the engine: on the sources (conftest)

PUT = "put jobs [{n: 1, tag: 'a'}, {n: 2, tag: 'b'}, {n: 3, tag: 'c'}]"
KEY = Idem(namespaced(b"k-1"), request_hash("POST", b"/query", PUT.encode()), 60_000)


def rows(db: Database) -> list[dict]:
    return db.query("get jobs order id")


def put(db: Database, key: Idem = KEY) -> Any:
    return db.execute([(PUT, None)], idempotency=key)


def answers(stored: Any) -> Any:
    """A replay's stored answers (None: not a replay)."""
    return None if stored is None else stored.answers


def fresh(path: str, files: Any = None) -> Database:
    db = Database(path, sync="always", files=files)
    db.query("create collection jobs (n int, tag text @unique)")
    db.query("put jobs {n: 0, tag: 'z'}")
    return db


class Boom(Exception):
    """An injected fault."""


def fault(kind: str) -> BaseException:
    return {
        "fenec": FenecError("type", "an injected refusal"),
        "bug": RuntimeError("an injected bug"),
        "memory": MemoryError(),
        "encoding": UnicodeEncodeError("utf-8", "order-\udce9", 6, 7, "surrogates not allowed"),
    }[kind]


@contextlib.contextmanager
def injected(step: str, kind: str, db: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make `step` of the next write raise the `kind` of fault."""
    error = fault(kind)

    def boom(*_a: Any, **_k: Any) -> Any:
        raise error

    if step == "apply":  # the second document of three: the first is in memory already
        calls = {"n": 0}
        real = Collection.insert

        def insert(self: Collection, row: dict, undo: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise error
            real(self, row, undo)
        monkeypatch.setattr(Collection, "insert", insert)
    elif step == "key":  # the key kept with its answers
        monkeypatch.setattr(Keys, "keep", boom)
    elif step == "encode":
        monkeypatch.setattr(records_module, "encode_row", boom)
    elif step == "append":
        monkeypatch.setattr(db._log, "append", boom)
    elif step == "measure":  # the dead-bytes estimate, after the append
        monkeypatch.setattr(type(db._footprint), "record", boom)
    elif step == "announce":
        db.listen(boom)
    yield
    monkeypatch.undo()
    if step == "announce":
        db.unlisten(boom)


STEPS = ["apply", "key", "encode", "append", "measure", "announce"]
LANDED = ("measure", "announce")  # after the append: the write stands, and is answered
KINDS = ["fenec", "bug", "memory", "encoding"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("step", STEPS)
def test_a_fault_at_any_step_leaves_the_write_everywhere_or_nowhere(tmp_path, monkeypatch, step: str,
                                                                    kind: str) -> None:
    path = str(tmp_path / "db.fenec")
    db = fresh(path)
    before, seq = rows(db), db.seq
    with injected(step, kind, db, monkeypatch):
        if step in LANDED:
            landed = put(db)
            assert landed.replayed is None and landed.answers == [{"affected": 3}]
        else:
            with pytest.raises(FenecError) as refused:
                put(db)
            e = refused.value
            assert (e.status, e.kind) == ((400, "type") if kind == "fenec" else (500, "io")), e
    if step in LANDED:
        written = rows(db)
        assert [r["n"] for r in written] == [0, 1, 2, 3] and db.seq == seq + 1
    else:
        # nothing of it in memory: no row, no spent id, no change counted, no key kept
        assert rows(db) == before and db.seq == seq and db.keys.get(KEY.key) is None
        assert db.query("get jobs where tag = 'b' count") == [{"count": 0}]
        if step == "append":
            # the disk may hold part of that record: every later write is refused until restart
            with pytest.raises(FenecError, match="refused"):
                put(db)
            written = before
        else:
            again = put(db)  # the retry runs: it is not a replay of an answer never given
            assert again.replayed is None and again.answers == [{"affected": 3}]
            written = rows(db)
            assert [r["id"] for r in written] == [1, 2, 3, 4]  # the failed write spent no id
    db.close()
    reopened = Database(path, sync="always")
    assert rows(reopened) == written  # the file holds exactly what memory held
    retry = put(reopened)
    if written == before:  # nothing landed: the key is free, the retry runs now
        assert retry.replayed is None and retry.answers == [{"affected": 3}]
    else:  # it landed with its key: the retry is the first answer, replayed, nothing written
        assert retry.replayed is not None and retry.replayed.answers == [{"affected": 3}]
        assert rows(reopened) == written
    reopened.close()


@pytest.mark.parametrize("error", [errno.ENOSPC, MemoryError()])
def test_a_write_the_disk_refuses_is_put_back_with_its_key(tmp_path, error: Any) -> None:
    path = str(tmp_path / "db.fenec")
    files = FaultyFiles()
    db = fresh(path, files)
    before, seq = rows(db), db.seq
    files.fail("writev", error)
    with pytest.raises(FenecError) as refused:
        put(db)
    assert refused.value.status == 500 and "refused" in refused.value.message
    assert rows(db) == before and db.seq == seq and db.keys.get(KEY.key) is None
    db.close()
    reopened = Database(path)
    assert rows(reopened) == before
    assert put(reopened).replayed is None
    reopened.close()


def test_a_latin1_idempotency_key_is_kept_with_its_write_and_replayed_after_a_restart(tmp_path) -> None:
    path = str(tmp_path / "db.fenec")
    db = fresh(path)
    key = Idem(namespaced(b"order-\xe9"), KEY.request_hash, 60_000)
    other = Idem(namespaced("order-\xe9".encode()), KEY.request_hash, 60_000)  # the UTF-8 spelling
    assert key.key != other.key
    first = put(db, key)
    assert first.replayed is None and first.answers == [{"affected": 3}]
    assert answers(put(db, key).replayed) == [{"affected": 3}]
    db.close()
    reopened = Database(path)
    assert len(rows(reopened)) == 4
    assert answers(put(reopened, key).replayed) == [{"affected": 3}]
    with pytest.raises(FenecError) as ran:  # another key: not a replay, so it runs, and meets the rows
        put(reopened, other)
    assert ran.value.status == 409
    reopened.close()


def test_text_that_is_not_unicode_is_stored_and_read_back_as_it_was(tmp_path) -> None:
    # a lone surrogate reaches a row from an in-process caller (or a token's claim); the record
    # must take it, the file give it back, and a compaction keep it
    path = str(tmp_path / "db.fenec")
    db = fresh(path)
    db.query("put jobs {n: 9, tag: $1}", ["odd-\ud800"])
    db.close()
    again = Database(path)
    assert again.query("get jobs select tag where n = 9") == [{"tag": "odd-\ud800"}]
    again.compact()
    again.close()
    third = Database(path)
    assert third.query("get jobs select tag where n = 9") == [{"tag": "odd-\ud800"}]
    third.close()
