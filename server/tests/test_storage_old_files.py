"""Files written before the record vocabulary moved to engine/records.py still open, and read back
as the code that wrote them read them (tests/data/make_v1_files.py says how they were written):
their rows, ids, change number and Idempotency-Keys, whose stored answer was then the HTTP status
and body bytes, replayed byte for byte. Also: a record with a lone surrogate is encoded by the
fallback encoder and reads back the same, one without by orjson."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest
from fenecdb_server import Database
from fenecdb_server.engine import records
from fenecdb_server.engine.execute import encode_row
from fenecdb_server.engine.idempotency import Idem

DATA = Path(__file__).resolve().parent / "data"
EXPECTED = json.loads((DATA / "v1_expected.json").read_text())
CLAIM = ("set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} "
         "where run_at <= now() order run_at limit 2 returning id, payload, owner")
HASH = bytes(range(20))


def state(db: Database) -> dict:
    """As the generator's `state`, read through today's names."""
    keys = {}
    for k, s in sorted(db.keys.items()):
        assert s.raw is not None, k  # an older file's key keeps its status and body
        keys[k] = {"hash": s.request_hash.hex(), "status": s.raw[0], "body": s.raw[1].decode(), "at": s.at,
                   "ttl_ms": s.ttl_ms}
    return {
        "seq": db.seq,
        "collections": {name: {"schema": c.schema.to_json(), "next_id": c.next_id,
                               "rows": [[rid, encode_row(c.schema, row)] for rid, row in sorted(c.rows.items())]}
                        for name, c in sorted(db.collections.items())},
        "keys": keys,
    }


def clock() -> int:
    return 1_777_800_000_000 + 70_000


@pytest.mark.parametrize("name", ["v1_log.fenec", "v1_compacted.fenec"])
def test_an_older_file_opens_and_reads_back_as_it_was_written(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    shutil.copy(DATA / name, path)
    db = Database(str(path), clock=clock)
    expected = EXPECTED[name]
    assert json.loads(json.dumps(state(db))) == expected
    # the keyed claim is answered its stored bytes, and runs nothing
    again = db.execute([(CLAIM, ["w1\udc80"])], idempotency=Idem("*:claim-w1-1", HASH, 86_400_000))
    stored = expected["keys"]["*:claim-w1-1"]
    assert again.replayed is not None and again.replayed.raw == (200, stored["body"].encode())
    assert db.seq == expected["seq"]
    # written on: a compaction keeps the older key as it was, a new key keeps its answers
    new = db.execute([("put jobs {attempts: 0}", None)], idempotency=Idem("*:new", HASH, 86_400_000))
    assert new.answers == [{"affected": 1}]
    db.compact()
    db.query("put jobs {attempts: 1}")
    db.close()
    reopened = Database(str(path), clock=clock)
    assert reopened.keys.get("*:claim-w1-1") == db.keys.get("*:claim-w1-1")
    kept = reopened.keys.get("*:new")
    assert kept is not None and kept.answers == [{"affected": 1}] and kept.raw is None
    assert reopened.query("get jobs count") == [{"count": len(expected["collections"]["jobs"]["rows"]) + 2}]
    assert reopened.query("get jobs where id = 1 select payload, owner") == [
        {"payload": {"n": 0, "s": "x\ud800y"}, "owner": "w1\udc80"}]
    reopened.close()


def test_a_record_is_orjsons_unless_it_holds_a_lone_surrogate() -> None:
    plain = {"s": 1, "o": [["p", "t", 1, {"s": "é", "n": 1.5}]]}
    assert records.dumps(plain) == orjson.dumps(plain)
    odd = {"s": 2, "o": [["p", "t", 1, {"s": "x\ud800y"}]]}
    with pytest.raises(TypeError):
        orjson.dumps(odd)
    encoded = records.dumps(odd)
    assert encoded == '{"s":2,"o":[["p","t",1,{"s":"x\ud800y"}]]}'.encode("utf-8", "surrogatepass")
    assert json.loads(encoded) == odd
    # read back: orjson where it can, json where it refuses the bytes
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(encoded)
    assert records.loads(encoded) == odd
    assert records.loads(records.dumps(plain)) == plain == orjson.loads(records.dumps(plain))


def test_an_unknown_op_is_refused_not_passed_over() -> None:
    db = Database()
    with pytest.raises(Exception, match="unknown op 'n'"):
        records.replay(db, b'{"s":1,"o":[["n","t",5]]}')
