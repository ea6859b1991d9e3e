"""sorted_index: (value, id) pairs walked in order, nulls apart, descending ties by ascending id."""

from __future__ import annotations

import random

from fenecdb_server import values as V
from fenecdb_server.engine.sorted_index import SortedIndex


def build(pairs, keyed=False):
    idx = SortedIndex(keyed)
    for rid, v in pairs:
        idx.add(rid, v)
    return idx


PAIRS = [(1, 5), (2, None), (3, 2), (4, 5), (5, 9), (6, None), (7, 2), (8, 5)]


def test_walk_ascending_nulls_first_ties_by_id():
    idx = build(PAIRS)
    assert list(idx.walk(None, True, None, True, False, True)) == [2, 6, 3, 7, 1, 4, 8, 5]
    assert list(idx.walk(None, True, None, True, False, False)) == [3, 7, 1, 4, 8, 5]


def test_walk_descending_nulls_last_ties_still_ascending_id():
    idx = build(PAIRS)
    assert list(idx.walk(None, True, None, True, True, True)) == [5, 1, 4, 8, 3, 7, 2, 6]


def test_ranges_inclusive_and_exclusive():
    idx = build(PAIRS)
    assert list(idx.walk(2, True, 5, True, False, False)) == [3, 7, 1, 4, 8]
    assert list(idx.walk(2, False, 5, True, False, False)) == [1, 4, 8]
    assert list(idx.walk(2, True, 5, False, False, False)) == [3, 7]
    assert list(idx.walk(2, False, 5, False, False, False)) == []
    assert list(idx.walk(6, True, None, True, True, False)) == [5]
    assert idx.count(2, True, 5, True) == 5
    assert idx.count(None, True, 4, True) == 2
    assert idx.count(10, True, None, True) == 0
    assert idx.count(9, True, 2, True) == 0  # lo above hi is empty, never negative


def test_remove_and_len():
    idx = build(PAIRS)
    assert len(idx) == 8
    idx.remove(4, 5)
    idx.remove(2, None)
    assert len(idx) == 6
    assert list(idx.walk(None, True, None, True, False, True)) == [6, 3, 7, 1, 8, 5]


def test_first_above_and_min():
    idx = build(PAIRS)
    assert idx.first_above(2, False) == 5
    assert idx.first_above(2, True) == 2
    assert idx.first_above(9, False) is None
    assert idx.min_value() == 2
    assert SortedIndex(False).min_value() is None


def test_mixed_int_float_timestamp_in_one_index():
    idx = build([(1, V.Ts(3)), (2, 2.5), (3, 3), (4, 1)])
    assert list(idx.walk(None, True, None, True, False, False)) == [4, 2, 1, 3]
    assert list(idx.walk(3, True, 3, True, False, False)) == [1, 3]


def test_keyed_index_over_mixed_kinds_follows_total_order():
    vals = [True, 3, "a", [1], {"k": 1}, 2.5, "B", False]
    idx = build(list(enumerate(vals, start=1)), keyed=True)
    got = list(idx.walk(None, True, None, True, False, False))
    want = [rid for rid, _ in sorted(enumerate(vals, start=1), key=lambda p: (V.sort_key(p[1]), p[0]))]
    assert got == want
    idx.remove(3, "a")
    assert 3 not in list(idx.walk(None, True, None, True, False, False))


def test_random_against_brute_force():
    rnd = random.Random(7)
    pairs = [(i, rnd.choice([None] + list(range(20)))) for i in range(1, 400)]
    idx = build(pairs)
    for _ in range(50):
        lo, hi = sorted(rnd.sample(range(-2, 22), 2))
        li, hinc, desc = rnd.random() < 0.5, rnd.random() < 0.5, rnd.random() < 0.5
        inside = [(v, r) for r, v in pairs if v is not None and (lo < v or li and lo == v) and (v < hi or hinc and v == hi)]
        inside.sort(key=lambda p: (-p[0] if desc else p[0], p[1]))
        assert list(idx.walk(lo, li, hi, hinc, desc, False)) == [r for _, r in inside]
        assert idx.count(lo, li, hi, hinc) == len(inside)


# The writer's turns: each moves ten entries out of the readers' range (values up to 2 000 000), so
# 1 000 turns leave 190 000 of the 200 000 in it, and every page a reader reads holds ten whatever
# the machine's speed (a fixed 1.5 s let a fast machine empty the range: issue 17). A turn grows
# slower as the moved keys pile up at the end (4 000 turns took 33 s pinned to one core, 1 000 take
# 0.3 s), and with the index lock removed 1 000 still fail, 3 runs of 3 on two cores (pinned to one
# core the race did not show in one run). On a slower machine the writer stops at MOVER_SECONDS: fewer turns only make the race less likely to show,
# never a reader's page short.
MOVER_TURNS = 1_000
MOVER_SECONDS = 20.0
READS_A_TURN = 20  # a reader's reads between two of the writer's turns, at most


def _race(idx) -> list[BaseException]:
    """Eight readers under the read lock, one writer moving a claim's ten entries under the write
    lock for MOVER_TURNS turns, with threads switched often: what any thread raised. The readers
    read until the writer is done, and the writer starts once every reader has read a page."""
    import itertools
    import sys
    import threading
    import time

    from fenecdb_server.engine.rwlock import RWLock

    lock = RWLock()
    values = {rid: 1_000 + rid // 7 for rid in range(1, 200_001)}
    for rid, v in values.items():
        idx.add(rid, v)
    errors: list[BaseException] = []
    done = threading.Event()
    turn = [0]  # the writer's turns so far
    readers_started = threading.Barrier(9)

    def reader() -> None:
        started = False
        seen, reads = -1, 0
        try:
            while not done.is_set() or not started:
                if turn[0] != seen:
                    seen, reads = turn[0], 0
                elif reads >= READS_A_TURN:
                    # enough reads against this turn's index: block a moment, so that eight readers
                    # cannot keep the writer from the GIL (pinned to one busy core they did, for minutes)
                    time.sleep(0.0005)
                    continue
                reads += 1
                lock.acquire_read()
                try:
                    page = list(itertools.islice(idx.walk(None, True, 2_000_000, True, False, False), 10))
                    assert len(page) == 10
                    idx.count(None, True, 50_000, True)
                    idx.first_above(5_000, False)
                finally:
                    lock.release_read()
                if not started:
                    started = True
                    readers_started.wait(60)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            errors.append(e)
            readers_started.abort()

    def mover() -> None:
        # a claim's moves: the oldest ten out of the front, back in at the end (sublists join and split)
        nxt = 10_000_000
        try:
            readers_started.wait(60)
            until = time.monotonic() + MOVER_SECONDS
            for _ in range(MOVER_TURNS):
                if time.monotonic() > until:
                    break
                lock.acquire_write()
                try:
                    for rid in list(itertools.islice(idx.walk(None, True, None, True, False, False), 10)):
                        idx.remove(rid, values[rid])
                        nxt += 1
                        values[rid] = nxt
                        idx.add(rid, nxt)
                finally:
                    lock.release_write()
                turn[0] += 1
                if errors:
                    break
        except threading.BrokenBarrierError:
            pass  # a reader failed before the race began; it reported why
        except BaseException as e:  # noqa: BLE001 - the test reports it
            errors.append(e)
        finally:
            done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, as a loaded server does
    threads = [threading.Thread(target=mover)] + [threading.Thread(target=reader) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        done.set()
        readers_started.abort()
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "the race did not finish in 300 s"
    assert len(idx) == 200_000
    return errors


def test_readers_sharing_the_read_lock_never_see_a_half_built_index():
    """A SortedList drops its positional index when a write splits or joins sublists, and the next
    positional read builds it again: readers that share the engine's read lock must not build it
    at once (a half-built one raised IndexError: a 500 under 16 reading threads)."""
    from fenecdb_server.engine.sorted_index import PackedIndex

    for idx in (PackedIndex(True), SortedIndex(False)):
        errors = _race(idx)
        assert not errors, repr(errors[:3])


def test_nulls_walk_in_id_order_whenever_they_became_null():
    """A row set to null after others is still walked by its id among the nulls (ties by ascending id): the
    nulls were kept in the order they became null, so `order f limit 1` answered id 8 where a scan answers 3
    (found by test_plans_hypothesis)."""
    from fenecdb_server.engine.sorted_index import PackedIndex

    for idx in (PackedIndex(True), SortedIndex(False)):
        for rid in (8, 5):
            idx.add(rid, None)
        idx.add(3, 7)
        idx.remove(3, 7)
        idx.add(3, None)
        assert list(idx.walk(None, True, None, True, False, True)) == [3, 5, 8]
        assert list(idx.walk(None, True, None, True, True, True)) == [3, 5, 8]
