"""collection: rows and indexes kept together; undo puts everything back; @unique clashes and
expired holders (fenecql.md §4.4)."""

from __future__ import annotations

import pytest
from fenecdb_server import FenecError
from fenecdb_server import values as V
from fenecdb_server.engine.collection import Collection
from fenecdb_server.plan.schema import FieldInfo, Schema


def make():
    return Collection(Schema("c", {
        "email": FieldInfo("email", "text", index="unique"),
        "at": FieldInfo("at", "timestamp", index="ttl", ttl_ms=1000),
        "p": FieldInfo("p", "geo", index="geo"),
        "n": FieldInfo("n", "int", index="sorted"),
        "k": FieldInfo("k", "text", index="hash"),
        "meta": FieldInfo("meta", "json"),
    }, {"meta.lang": "hash"}))


def state(c):
    """Rows and what every index says, comparable before and after."""
    out = {"rows": {rid: dict(r) for rid, r in c.rows.items()}, "next": c.next_id}
    for target, (kind, idx, _) in c.indexes.items():
        if kind in ("sorted", "ttl"):
            out[target] = (list(idx.walk(None, True, None, True, False, False)), sorted(idx.nulls))
        elif kind in ("hash", "unique"):
            out[target] = sorted((repr(k), sorted(v)) for k, v in idx.map.items())
        else:
            out[target] = sorted((k, sorted(v)) for k, v in idx.cells.items()), sorted(idx.nulls)
    return out


def row(rid, **kw):
    return {"id": rid, **kw}


def test_insert_indexes_every_field_and_path():
    c = make()
    c.insert(row(1, email="a", at=V.Ts(5), p=(1.0, 2.0), n=3, k="x", meta={"lang": "tr"}), None)
    c.insert(row(2, n=None, meta={"lang": 5}), None)
    assert c.index("email").lookup("a") == [1]
    assert c.index("meta.lang").lookup("tr") == [1] and c.index("meta.lang").lookup(5) == [2]
    assert list(c.index("n").walk(None, True, None, True, False, True)) == [2, 1]
    assert c.next_id == 3 and c.index("nope") is None


def test_undo_puts_everything_back():
    c = make()
    c.insert(row(1, email="a", n=1, k="x", p=(1.0, 1.0), meta={"lang": "tr"}), None)
    c.insert(row(2, email="b", n=2, k="y", at=V.Ts(10)), None)
    c.insert(row(3, email="c", n=3), None)
    before = state(c)
    undo: list = []
    c.replace(c.rows[1], row(1, email="z", n=9, k="y", p=(5.0, 5.0), meta={"lang": "en"}), undo)
    c.delete(c.rows[2], undo)
    c.insert(row(4, email="b", n=0), undo)
    c.replace(c.rows[3], row(3, email="c", n=None), undo)
    c.delete(c.rows[1], undo)
    assert state(c) != before
    for coll, rid, old in reversed(undo):
        coll.undo_one(rid, old)
    after = state(c)
    after["next"] = before["next"]  # ids handed out are handed out again by the engine, not undo_one
    assert after == before
    assert list(c.ids_in_order()) == [1, 2, 3]


def test_replace_all_is_replace_for_each_row_and_undoes_the_same():
    """The batch a claim uses: rows and every index end as after one `replace` each, nulls
    included (a value set to null, a null given a value), and undo puts them back."""
    def fill(c):
        c.insert(row(1, n=1, k="x", at=V.Ts(10)), None)
        c.insert(row(2, n=2, k="y"), None)
        c.insert(row(3, n=None, k="z", at=V.Ts(30)), None)
        c.insert(row(4, n=4, p=(1.0, 1.0)), None)

    news = [row(1, n=7, k="x", at=V.Ts(10)), row(2, n=None, k="q"), row(3, n=3, k="z", at=None),
            row(4, n=4, p=(2.0, 2.0))]
    one, batch = make(), make()
    fill(one)
    fill(batch)
    before = state(batch)
    for new in news:
        one.replace(one.rows[new["id"]], new, [])
    undo: list = []
    batch.replace_all([batch.rows[i] for i in (1, 2, 3, 4)], news, undo)
    assert state(batch) == state(one)
    for coll, rid, old in reversed(undo):
        coll.undo_one(rid, old)
    assert state(batch) == before


def test_out_of_order_insert_is_read_in_id_order():
    c = make()
    c.insert(row(5), None)
    c.insert(row(2), None)
    assert list(c.ids_in_order()) == [2, 5]
    assert c.next_id == 6


def test_unique_clash_names_value_and_holder():
    c = make()
    c.insert(row(1, email="a@x"), None)
    new = row(2, email="a@x")
    with pytest.raises(FenecError) as ei:
        c.unique_check(new, lambda r: True, [])
    e = ei.value
    assert e.status == 409 and "email" in e.message and '"a@x"' in e.message and "1" in e.message


def test_a_row_does_not_clash_with_itself_and_nulls_repeat():
    c = make()
    c.insert(row(1, email="a"), None)
    c.unique_check(row(1, email="a", n=5), lambda r: True, [])
    c.insert(row(2, email=None), None)
    c.unique_check(row(3, email=None), lambda r: True, [])


def test_expired_holder_is_released_and_deleted_with_undo():
    c = make()
    c.insert(row(1, email="a", at=V.Ts(0)), None)
    c.insert(row(2, email="b", at=V.Ts(0)), None)
    before = state(c)
    undo: list = []
    c.unique_check(row(3, email="a"), lambda r: r["id"] != 1, undo)  # row 1 is past its @ttl
    assert 1 not in c.rows and c.index("email").lookup("a") == []
    with pytest.raises(FenecError):
        c.unique_check(row(3, email="b"), lambda r: r["id"] != 1, undo)  # row 2 is alive
    for coll, rid, old in reversed(undo):
        coll.undo_one(rid, old)
    assert state(c) == before


def test_build_and_drop_index():
    c = make()
    c.insert(row(1, meta={"rank": 3}), None)
    c.insert(row(2, meta={"rank": 1}), None)
    c.build_index("meta.rank", "sorted")
    assert list(c.index("meta.rank").walk(None, True, None, True, False, False)) == [2, 1]
    c.drop_index("meta.rank")
    assert c.index("meta.rank") is None
    with pytest.raises(FenecError):
        c.build_index("x", "nonsense")
