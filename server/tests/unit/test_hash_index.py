"""hash_index: value -> ids, nulls never indexed, kinds kept apart on paths."""

from __future__ import annotations

from fenecdb_server.engine.hash_index import HashIndex


def test_add_lookup_remove():
    idx = HashIndex(unique=False, keyed=False)
    for rid, v in [(1, "a"), (2, "b"), (3, "a"), (4, None)]:
        idx.add(rid, v)
    assert idx.lookup("a") == [1, 3]
    assert idx.lookup("zz") == []
    assert idx.lookup(None) == []
    idx.remove(1, "a")
    assert idx.lookup("a") == [3]
    idx.remove(3, "a")
    assert idx.lookup("a") == [] and "a" not in idx.map
    idx.remove(9, "never")  # removing what is not there is harmless
    assert idx.lookup("b") == [2]


def test_numbers_one_key_across_int_and_float():
    idx = HashIndex(unique=True, keyed=False)
    idx.add(1, 1.0)
    idx.add(2, -0.0)
    assert idx.lookup(1) == [1]
    assert idx.lookup(0.0) == [2]


def test_nulls_repeat_freely():
    idx = HashIndex(unique=True, keyed=False)
    idx.add(1, None)
    idx.add(2, None)
    assert idx.map == {}


def test_keyed_paths_keep_bool_and_int_apart():
    idx = HashIndex(unique=False, keyed=True)
    idx.add(1, True)
    idx.add(2, 1)
    idx.add(3, [1, {"a": 2}])
    assert idx.lookup(True) == [1]
    assert idx.lookup(1) == [2]
    assert idx.lookup([1, {"a": 2}]) == [3]
    idx.remove(3, [1, {"a": 2}])
    assert idx.lookup([1, {"a": 2}]) == []
