"""An ordered index (`@sorted`, `@ttl`): (value, id) pairs in order.

Two kinds. `PackedIndex`, for a typed `int` or `timestamp` field (a queue's `run_at`), packs
each pair into one integer and keeps them in a `SortedInts` (engine/sorted_ints.py), which moves
a claim's page of entries as slices. `SortedIndex`, for every other field and for paths, keeps
(value, id) tuples in a SortedList.

Nulls are kept apart, in id order, since `null` is the lowest value (fenecql.md §10): a walk
ascending yields them first, descending last, and a range never includes them. Values of a
typed field are all of one kind and compare natively; a path's values may mix kinds, so they
are stored under `values.sort_key` (the total order of §3.4).

Readers share the engine's read lock, but a SortedList is not read-only when read: a write that
splits or joins its sublists drops its positional index, and the next positional read
(`bisect_*`, `islice`, `[k]`) builds it again. Two readers building it at once saw a half-built
index (an IndexError, a 500, under 16 threads reading one million jobs), so every positional
read of a `SortedIndex` takes the index's own small lock (`_pos`); it is uncontended but for
concurrent reads. A `SortedInts` builds nothing when read, so a `PackedIndex` needs no lock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

from sortedcontainers import SortedList

from .. import values as V
from .sorted_ints import SortedInts

_INF = float("inf")


class SortedIndex:
    __slots__ = ("items", "nulls", "keyed", "_pos")

    def __init__(self, keyed: bool) -> None:
        self.items = SortedList()
        self.nulls: dict[int, None] = {}
        self.keyed = keyed  # values go in under sort_key (paths)
        self._pos = threading.Lock()  # positional reads (see the module's docstring)

    def key(self, v: Any) -> Any:
        return V.sort_key(v) if self.keyed else v

    def add(self, rid: int, v: Any) -> None:
        if v is None:
            self.nulls[rid] = None
        else:
            self.items.add((V.sort_key(v) if self.keyed else v, rid))

    def remove(self, rid: int, v: Any) -> None:
        if v is None:
            self.nulls.pop(rid, None)
        else:
            self.items.remove((V.sort_key(v) if self.keyed else v, rid))

    def __len__(self) -> int:
        return len(self.items) + len(self.nulls)

    def _bounds(self, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool) -> tuple[int, int]:
        sl = self.items
        if lo is None:
            i = 0
        else:
            i = sl.bisect_left((lo, 0)) if lo_incl else sl.bisect_right((lo, _INF))
        if hi is None:
            j = len(sl)
        else:
            j = sl.bisect_right((hi, _INF)) if hi_incl else sl.bisect_left((hi, 0))
        return i, max(i, j)

    def count(self, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool) -> int:
        with self._pos:
            i, j = self._bounds(lo, lo_incl, hi, hi_incl)
        return j - i

    def _range(self, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool, reverse: bool) -> Iterator[Any]:
        """The stored keys of a range, in order (or reversed)."""
        with self._pos:
            i, j = self._bounds(lo, lo_incl, hi, hi_incl)
            return self.items.islice(i, j, reverse=reverse)

    def _key_at_or_above(self, key: Any, right: bool) -> Any:
        """The first stored key at or past `key` (past it when `right`), or None."""
        sl = self.items
        with self._pos:
            k = sl.bisect_right(key) if right else sl.bisect_left(key)
            return sl[k] if k < len(sl) else None

    def walk(self, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool, desc: bool, with_nulls: bool) -> Iterator[int]:
        """Every id in order of value: asc gives nulls first, desc last; ties by ascending id."""
        keys = self._range(lo, lo_incl, hi, hi_incl, desc)
        if not desc:
            if with_nulls:
                yield from sorted(self.nulls)  # ids in order: a row set to null later is not last
            for item in keys:
                yield item[1]
        else:
            # Descending by value, but ties still by ascending id: walk groups of equal values.
            group: list[int] = []
            last = _SENTINEL
            for item in keys:
                v = item[0]
                if v != last and group:
                    yield from reversed(group)
                    group = []
                last = v
                group.append(item[1])
            if group:
                yield from reversed(group)
            if with_nulls:
                yield from sorted(self.nulls)  # ids in order: a row set to null later is not last

    def first_above(self, bound: Any, incl: bool) -> Any:
        """The least value > bound (>= when incl), or None."""
        item = self._key_at_or_above((bound, 0) if incl else (bound, _INF), not incl)
        return None if item is None else item[0]

    def min_value(self) -> Any:
        return self.items[0][0] if self.items else None


_SENTINEL = object()

_SHIFT = 64
_MASK = (1 << _SHIFT) - 1


def _least(b: Any, incl: bool) -> int | None:
    """The least whole value >= b (> b when not incl); None above every value (b = inf)."""
    if type(b) is float and not math.isfinite(b):
        return None if b > 0 else -(1 << 80)
    return math.ceil(b) if incl else math.floor(b) + 1


def _greatest(b: Any, incl: bool) -> int | None:
    """The greatest whole value <= b (< b when not incl); None above every value."""
    if type(b) is float and not math.isfinite(b):
        return None if b > 0 else -(1 << 80)
    return math.floor(b) if incl else math.ceil(b) - 1


class PackedIndex:
    """An ordered index over a typed `int` or `timestamp` field: each (value, id) pair is one
    integer, value << 64 | id, kept in a `SortedInts` (engine/sorted_ints.py). Ids are 64-bit, so
    the low bits hold any id; the high bits keep the value's sign, so the order of the integers
    is the order of (value, id): one integer compares and moves faster than a tuple, and `move`
    takes a page of entries out and back in as two slices, not one entry at a time."""

    __slots__ = ("keys", "nulls", "ts", "field")
    keyed = False

    def __init__(self, ts: bool, field: str = "") -> None:
        self.keys = SortedInts()
        self.nulls: dict[int, None] = {}
        self.ts = ts  # values come back as timestamps
        self.field = field  # the row key it indexes (move_rows reads it)

    def add(self, rid: int, v: Any) -> None:
        if v is None:
            self.nulls[rid] = None
        else:
            self.keys.add((int(v) << _SHIFT) | rid)

    def remove(self, rid: int, v: Any) -> None:
        if v is None:
            self.nulls.pop(rid, None)
        else:
            self.keys.remove((int(v) << _SHIFT) | rid)

    def move_rows(self, olds: list[dict], news: list[dict]) -> None:
        """Each row's entry from its old value to its new one, all at once: the old keys out,
        the new ones in, each side sorted so that neighbours go as one slice. Values are ints
        (a timestamp is one), so a key is built without converting them."""
        field = self.field
        try:
            # Most often every row has a value before and after: two comprehensions. A row whose
            # value did not change goes out and back in as the same key, which is no change.
            out = [(old[field] << 64) | old["id"] for old in olds]  # 64: _SHIFT, as a constant
            back = [(new[field] << 64) | new["id"] for new in news]
        except (KeyError, TypeError):  # a null before or after (a row may leave a null field out)
            out = []
            back = []
            nulls = self.nulls
            for old, new in zip(olds, news, strict=True):
                rid = old["id"]
                a = old.get(field)
                b = new.get(field)
                if a is None:
                    nulls.pop(rid, None)
                else:
                    out.append((a << _SHIFT) | rid)
                if b is None:
                    nulls[rid] = None
                else:
                    back.append((b << _SHIFT) | rid)
        out.sort()
        back.sort()
        self.keys.remove_sorted(out)
        self.keys.add_sorted(back)

    def move_net(self, rids: list[int], olds: list[dict | None], news: list[dict | None]) -> None:
        """Each row `rids[i]`'s entry from `olds[i]` to `news[i]` (None: no row, so no entry),
        all at once, as `move_rows` (`Collection.apply_net`)."""
        field = self.field
        nulls = self.nulls
        out: list[int] = []
        back: list[int] = []
        for rid, old, new in zip(rids, olds, news, strict=True):
            a = old.get(field) if old is not None else None
            b = new.get(field) if new is not None else None
            if a is not None and b is not None:
                if a == b:
                    continue
                out.append((int(a) << _SHIFT) | rid)
                back.append((int(b) << _SHIFT) | rid)
                continue
            old_null = old is not None and a is None
            new_null = new is not None and b is None
            if old_null and new_null:
                continue
            if a is not None:
                out.append((int(a) << _SHIFT) | rid)
            elif old_null:
                nulls.pop(rid, None)
            if b is not None:
                back.append((int(b) << _SHIFT) | rid)
            elif new_null:
                nulls[rid] = None
        out.sort()
        back.sort()
        self.keys.remove_sorted(out)
        self.keys.add_sorted(back)

    def __len__(self) -> int:
        return len(self.keys) + len(self.nulls)

    def _value(self, key: int) -> Any:
        v = key >> _SHIFT
        return V.Ts(v) if self.ts else v

    @staticmethod
    def _bounds(lo: Any, lo_incl: bool, hi: Any, hi_incl: bool) -> tuple[int | None, int | None, bool]:
        """The range as keys: (first key in, first key past, empty)."""
        first = last = None
        if type(hi) is V.Ts and lo is None:  # `run_at <= now()`: no float to round
            return None, (hi + 1 if hi_incl else hi) << _SHIFT, False
        if lo is not None:
            least = _least(lo, lo_incl)
            if least is None:
                return None, None, True
            first = least << _SHIFT
        if hi is not None:
            greatest = _greatest(hi, hi_incl)
            if greatest is None:
                hi = None
            else:
                last = (greatest + 1) << _SHIFT
        return first, last, False

    def count(self, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool) -> int:
        first, last, empty = self._bounds(lo, lo_incl, hi, hi_incl)
        return 0 if empty else self.keys.count(first, last)

    def page(self, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool, n: int, rows: dict) -> list[dict]:
        """The rows of the first n entries of a range, ascending, without nulls: a claim's page."""
        first, last, empty = self._bounds(lo, lo_incl, hi, hi_incl)
        if empty:
            return []
        return [rows[k & _MASK] for k in self.keys.page(first, last, n)]

    def walk(self, lo: Any, lo_incl: bool, hi: Any, hi_incl: bool, desc: bool, with_nulls: bool) -> Iterator[int]:
        """Every id in order of value: asc gives nulls first, desc last; ties by ascending id."""
        first, last, empty = self._bounds(lo, lo_incl, hi, hi_incl)
        keys = iter(()) if empty else self.keys.iterate(first, last, desc)
        if not desc:
            if with_nulls:
                yield from sorted(self.nulls)  # ids in order: a row set to null later is not last
            for key in keys:
                yield key & _MASK
        else:
            # Descending by value, but ties still by ascending id: walk groups of equal values.
            group: list[int] = []
            last_v = None
            for key in keys:
                v = key >> _SHIFT
                if v != last_v and group:
                    yield from reversed(group)
                    group = []
                last_v = v
                group.append(key & _MASK)
            if group:
                yield from reversed(group)
            if with_nulls:
                yield from sorted(self.nulls)  # ids in order: a row set to null later is not last

    def first_above(self, bound: Any, incl: bool) -> Any:
        """The least value > bound (>= when incl), or None."""
        least = _least(bound, incl)
        if least is None:
            return None
        got = self.keys.page(least << _SHIFT, None, 1)
        return self._value(got[0]) if got else None

    def min_value(self) -> Any:
        k = self.keys.first()
        return None if k is None else self._value(k)
