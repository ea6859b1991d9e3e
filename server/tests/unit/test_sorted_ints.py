"""sorted_ints: every operation agrees with a plain sorted list, across run splits and joins."""

from __future__ import annotations

from bisect import bisect_left

import pytest
from fenecdb_server.engine import sorted_ints
from fenecdb_server.engine.sorted_ints import SortedInts
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def small_runs(monkeypatch):
    """Runs of at most 8 keys, so a few dozen keys split and join runs many times."""
    monkeypatch.setattr(sorted_ints, "LOAD", 4)


def check_shape(s: SortedInts, ref: list[int]) -> None:
    flat = [k for run in s.runs for k in run]
    assert flat == ref
    assert len(s) == len(ref)
    assert s.maxes == [run[-1] for run in s.runs]
    assert all(run for run in s.runs)
    assert all(len(run) <= 2 * sorted_ints.LOAD for run in s.runs)


def ref_range(ref: list[int], lo: int | None, hi: int | None) -> list[int]:
    return [k for k in ref if (lo is None or k >= lo) and (hi is None or k < hi)]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 200)),
        st.tuples(st.just("remove"), st.integers(0, 200)),
        st.tuples(st.just("add_sorted"), st.lists(st.integers(0, 200), max_size=12)),
        st.tuples(st.just("remove_sorted"), st.lists(st.integers(0, 200), max_size=12)),
        st.tuples(st.just("take_front"), st.integers(1, 12)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 220), st.integers(0, 220), st.integers(1, 20))
def test_agrees_with_a_sorted_list(program, lo, hi, n):
    s = SortedInts()
    ref: list[int] = []
    for op, arg in program:
        if op == "add":
            if arg not in ref:
                s.add(arg)
                ref.insert(bisect_left(ref, arg), arg)
        elif op == "remove":
            if arg in ref:
                s.remove(arg)
                ref.remove(arg)
            else:
                with pytest.raises(KeyError):
                    s.remove(arg)
        elif op == "add_sorted":
            keys = sorted(set(arg) - set(ref))
            s.add_sorted(keys)
            ref = sorted(ref + keys)
        elif op == "remove_sorted":
            keys = sorted(set(arg))
            if set(keys) <= set(ref):
                s.remove_sorted(keys)
                ref = [k for k in ref if k not in set(keys)]
            else:
                before = list(ref)
                with pytest.raises(KeyError):
                    s.remove_sorted(keys)
                assert [k for run in s.runs for k in run] == before  # nothing removed
        else:  # a claim: the first keys out, the same count back in at the end
            front = ref[:arg]
            s.remove_sorted(front)
            top = (ref[-1] + 1) if ref else 0
            back = list(range(max(top, 1000), max(top, 1000) + len(front)))
            s.add_sorted(back)
            ref = ref[len(front):] + back
        check_shape(s, ref)
    for a, b in ((lo, hi), (None, hi), (lo, None), (None, None)):
        want = ref_range(ref, a, b)
        assert list(s.iterate(a, b, False)) == want
        assert list(s.iterate(a, b, True)) == want[::-1]
        assert s.count(a, b) == len(want)
        assert s.page(a, b, n) == want[:n]
    assert s.first() == (ref[0] if ref else None)
    for k in (lo, hi):
        assert s.has(k) == (k in ref)


def test_a_claims_keys_move_as_two_slices():
    """Ten keys off the front and ten back at the end touch two runs, never one key at a time."""
    s = SortedInts()
    s.add_sorted(list(range(100)))
    runs_before = len(s.runs)
    s.remove_sorted(list(range(10)))
    s.add_sorted(list(range(1000, 1010)))
    assert [k for run in s.runs for k in run] == list(range(10, 100)) + list(range(1000, 1010))
    assert abs(len(s.runs) - runs_before) <= 2


def test_an_empty_store_answers_nothing():
    s = SortedInts()
    assert len(s) == 0 and s.first() is None
    assert list(s.iterate(None, None, False)) == [] and list(s.iterate(None, None, True)) == []
    assert s.count(None, None) == 0 and s.page(None, None, 5) == []
    s.remove_sorted([])
    s.add_sorted([])
    assert s.runs == []
