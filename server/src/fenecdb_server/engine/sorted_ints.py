"""Distinct integers kept sorted, in runs: the store under a packed `@sorted` index.

A list of sorted runs, each at most `2 * LOAD` long, and `maxes[i]`, the last key of run `i`.
Finding a key is two C bisects (into `maxes`, then into the run); inserting or deleting is one
`list.insert`/`del` inside a run, a memmove of at most a few kilobytes.

Why not `SortedList`: it keeps a positional index that every write updates in a Python loop and
that the next positional read rebuilds, and it moves keys one at a time. A claim moves a page of
keys at once: the ten it takes are next to each other (the first ten of the range), and the ten it
puts back, with the same `run_at`, are too. So `remove_sorted` deletes them with one slice and
`add_sorted` splices them in with one, when they fall in one run (they almost always do): two
slices cost about what one move of a key does (bench/README.md, "Numbers the code's comments used
to carry").

Nothing here is built lazily, so readers that share the engine's read lock never write: there is
no positional index for two of them to build at once. Counting a range sums the lengths of the
runs it spans (`sum(map(len, ...))`, in C): about 500 to 1 000 runs for a million keys.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator

LOAD = 1000


class SortedInts:
    __slots__ = ("runs", "maxes", "size")

    def __init__(self) -> None:
        self.runs: list[list[int]] = []
        self.maxes: list[int] = []
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def first(self) -> int | None:
        return self.runs[0][0] if self.runs else None

    # ---------------------------------------------------------------- one key

    def add(self, k: int) -> None:
        maxes = self.maxes
        if not maxes:
            self.runs.append([k])
            maxes.append(k)
            self.size = 1
            return
        pos = bisect_left(maxes, k)
        if pos == len(maxes):
            pos -= 1
            run = self.runs[pos]
            run.append(k)
            maxes[pos] = k
        else:
            run = self.runs[pos]
            insort(run, k)
        self.size += 1
        if len(run) > 2 * LOAD:
            self._split(pos)

    def remove(self, k: int) -> None:
        maxes = self.maxes
        pos = bisect_left(maxes, k)
        if pos == len(maxes):
            raise KeyError(k)
        run = self.runs[pos]
        i = bisect_left(run, k)
        if run[i] != k:
            raise KeyError(k)
        del run[i]
        self.size -= 1
        self._shrunk(pos)

    # ---------------------------------------------------------------- a page of keys at once

    def add_sorted(self, keys: list[int]) -> None:
        """Add ascending keys, none already here: one splice when they fall between two
        neighbours, one at a time otherwise."""
        n = len(keys)
        if n == 0:
            return
        maxes = self.maxes
        first, last = keys[0], keys[-1]
        pos = bisect_left(maxes, first)
        if pos == len(maxes):
            if not maxes:
                self.runs.append(list(keys))
                maxes.append(last)
                self.size = n
                self._split(0)
                return
            pos -= 1
            self.runs[pos].extend(keys)
            maxes[pos] = last
        else:
            run = self.runs[pos]
            i = bisect_left(run, first)
            if bisect_left(run, last, i) != i:
                self._add_spread(keys)
                return
            run[i:i] = keys
        self.size += n
        if len(self.runs[pos]) > 2 * LOAD:
            self._split(pos)

    def _add_spread(self, keys: list[int]) -> None:
        """`add_sorted` of keys that fall in several gaps: each stretch of keys that goes in one
        gap is one splice. The places are all found first; the splices go in from the last,
        so each place found stays right, and the runs grown too long are split from the last."""
        runs, maxes = self.runs, self.maxes
        places: list[tuple[int, int, int, int]] = []  # (run, place in it, first key, past the last key)
        n = len(keys)
        at = 0
        while at < n:
            k = keys[at]
            pos = bisect_left(maxes, k)
            if pos == len(maxes):  # past every key: the rest go at the end of the last run
                places.append((pos - 1, len(runs[pos - 1]), at, n))
                break
            run = runs[pos]
            i = bisect_left(run, k)
            bound = run[i]  # a key here above k (k is not here): the stretch is what stays below it
            end = bisect_left(keys, bound, at + 1)
            places.append((pos, i, at, end))
            at = end
        grown: list[int] = []
        for pos, i, a, b in reversed(places):
            run = runs[pos]
            run[i:i] = keys[a:b]
            if i + b - a == len(run):
                maxes[pos] = run[-1]
            if not grown or grown[-1] != pos:
                grown.append(pos)
        self.size += n
        for pos in grown:  # from the last run down: a split inserts above the runs still to check
            if len(runs[pos]) > 2 * LOAD:
                self._split(pos)

    def remove_sorted(self, keys: list[int]) -> None:
        """Remove ascending keys, all here: a slice for each stretch that lies side by side in
        one run. Raises KeyError, having removed nothing, when a key is missing."""
        n = len(keys)
        if n == 0:
            return
        runs, maxes = self.runs, self.maxes
        pos = bisect_left(maxes, keys[0])
        if pos < len(maxes):
            run = runs[pos]
            i = bisect_left(run, keys[0])
            if run[i:i + n] == keys:
                del run[i:i + n]
                self.size -= n
                if len(run) < LOAD // 2:
                    self._shrunk(pos)
                else:
                    maxes[pos] = run[-1]
                return
        self._remove_spread(keys)

    def _remove_spread(self, keys: list[int]) -> None:
        """`remove_sorted` of keys that lie in several stretches: a slice deleted for each
        stretch of keys side by side in one run. Every stretch is found (and every key checked)
        before anything is deleted; the slices go from the last, so each place found stays right,
        and the runs that shrank are then dropped or joined from the last down."""
        runs, maxes = self.runs, self.maxes
        cuts: list[tuple[int, int, int]] = []  # (run, from, to)
        n = len(keys)
        at = 0
        while at < n:
            k = keys[at]
            pos = bisect_left(maxes, k)
            if pos == len(maxes):
                raise KeyError(k)
            run = runs[pos]
            i = bisect_left(run, k)
            if run[i] != k:
                raise KeyError(k)
            j = i + 1
            at += 1
            end = len(run)
            while at < n and j < end and run[j] == keys[at]:
                j += 1
                at += 1
            cuts.append((pos, i, j))
        shrunk: list[int] = []
        for pos, i, j in reversed(cuts):
            del runs[pos][i:j]
            if not shrunk or shrunk[-1] != pos:
                shrunk.append(pos)
        self.size -= n
        for pos in shrunk:  # from the last run down: a run dropped or joined moves only those above it
            if pos < len(runs):
                self._shrunk(pos)

    def has(self, k: int) -> bool:
        pos = bisect_left(self.maxes, k)
        if pos == len(self.maxes):
            return False
        run = self.runs[pos]
        i = bisect_left(run, k)
        return run[i] == k

    # ---------------------------------------------------------------- keeping runs in shape

    def _split(self, pos: int) -> None:
        run = self.runs[pos]
        while len(run) > 2 * LOAD:
            tail = run[LOAD:]
            del run[LOAD:]
            self.maxes[pos] = run[-1]
            self.runs.insert(pos + 1, tail)
            self.maxes.insert(pos + 1, tail[-1])
            pos += 1
            run = tail

    def _shrunk(self, pos: int) -> None:
        """After deletes in run `pos`: drop it if empty, join it to a neighbour if small."""
        runs, maxes = self.runs, self.maxes
        run = runs[pos]
        if not run:
            del runs[pos]
            del maxes[pos]
            return
        maxes[pos] = run[-1]
        if len(run) < LOAD // 2 and len(runs) > 1:
            at = pos if pos + 1 < len(runs) else pos - 1
            runs[at].extend(runs[at + 1])
            maxes[at] = maxes[at + 1]
            del runs[at + 1]
            del maxes[at + 1]
            self._split(at)

    # ---------------------------------------------------------------- reading

    def _locate(self, k: int | None) -> tuple[int, int]:
        """(run, place) of the first key >= k; k None is the start."""
        if k is None:
            return 0, 0
        pos = bisect_left(self.maxes, k)
        if pos == len(self.maxes):
            return pos, 0
        return pos, bisect_left(self.runs[pos], k)

    def count(self, lo: int | None, hi: int | None) -> int:
        """How many keys are >= lo and < hi (None: no bound)."""
        p, a = self._locate(lo)
        q, b = (len(self.runs), 0) if hi is None else self._locate(hi)
        if (p, a) >= (q, b):
            return 0
        if p == q:
            return b - a
        runs = self.runs
        return len(runs[p]) - a + sum(map(len, runs[p + 1:q])) + b

    def page(self, lo: int | None, hi: int | None, n: int) -> list[int]:
        """The first n keys >= lo and < hi, ascending."""
        runs = self.runs
        p, a = self._locate(lo)
        out: list[int] = []
        while p < len(runs):
            run = runs[p]
            out += run[a:a + n - len(out)]
            if hi is not None and out and out[-1] >= hi:
                del out[bisect_left(out, hi):]
                return out
            if len(out) >= n:
                return out
            p += 1
            a = 0
        return out

    def iterate(self, lo: int | None, hi: int | None, reverse: bool) -> Iterator[int]:
        """The keys >= lo and < hi, ascending (or descending), copied a growing slice at a time:
        a walk that stops after ten keys copies sixteen, not a whole run."""
        runs = self.runs
        p, a = self._locate(lo)
        q, b = (len(runs), 0) if hi is None else self._locate(hi)
        if (p, a) >= (q, b):
            return
        step = 16
        if not reverse:
            while (p, a) < (q, b):
                run = runs[p]
                end = len(run) if p < q else b
                while a < end:
                    c = min(end, a + step)
                    yield from run[a:c]
                    a = c
                    step = min(step * 2, 2 * LOAD)
                p += 1
                a = 0
        else:
            if b == 0:
                q -= 1
                b = len(runs[q])
            while (q, b) > (p, a):
                run = runs[q]
                start = a if q == p else 0
                while b > start:
                    c = max(start, b - step)
                    yield from reversed(run[c:b])
                    b = c
                    step = min(step * 2, 2 * LOAD)
                q -= 1
                if q < 0:
                    return
                b = len(runs[q])
