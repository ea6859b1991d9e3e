"""A point index (`@geo`): a grid of cells 0.01° on a side (about 1.1 km north-south).

A radius or a box reads only the cells covering it; `order distance(f, p) limit N` walks rings
of cells outward from p and stops once N rows are found that no unread cell could beat: a ring
r cells out is at least `(r - 1) * cell` degrees away in latitude, and in longitude that much
times the cosine of the highest latitude the ring reaches. Rows whose point is null rank first
(null is the lowest value, fenecql.md §10), so the walk yields them before any cell. A walk that
would reach past a pole or the antimeridian, or read too many cells, says so and the caller
falls back to reading every candidate and sorting (same answer, more cost).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from ..plan.operators import EARTH_R, haversine

CELL = 0.01
_M_PER_DEG = EARTH_R * math.pi / 180


def _cell(lon: float, lat: float) -> tuple[int, int]:
    return (math.floor(lon / CELL), math.floor(lat / CELL))


class GiveUp(Exception):
    """The walk cannot stay exact or cheap here: read the candidates another way."""


class GeoIndex:
    __slots__ = ("cells", "nulls", "points")

    def __init__(self) -> None:
        self.cells: dict[tuple[int, int], dict[int, None]] = {}
        self.nulls: dict[int, None] = {}
        self.points = 0

    def add(self, rid: int, v: Any) -> None:
        if v is None:
            self.nulls[rid] = None
            return
        c = _cell(v[0], v[1])
        ids = self.cells.get(c)
        if ids is None:
            self.cells[c] = {rid: None}
        else:
            ids[rid] = None
        self.points += 1

    def remove(self, rid: int, v: Any) -> None:
        if v is None:
            self.nulls.pop(rid, None)
            return
        c = _cell(v[0], v[1])
        ids = self.cells.get(c)
        if ids is not None and rid in ids:
            del ids[rid]
            self.points -= 1
            if not ids:
                del self.cells[c]

    def box_ids(self, w: float, s: float, e: float, n: float, budget: int) -> list[int] | None:
        """Ids in the cells covering the box, or None when that is more cells than `budget`."""
        cs, cn = math.floor(s / CELL), math.floor(n / CELL)
        spans = [(w, e)] if w <= e else [(w, 180.0), (-180.0, e)]
        total = 0
        for a, b in spans:
            total += (math.floor(b / CELL) - math.floor(a / CELL) + 1) * (cn - cs + 1)
        if total > budget or total > 4 * (len(self.cells) + 1) and total > 10_000:
            return None
        out: list[int] = []
        if total > len(self.cells):
            for (cx, cy), ids in self.cells.items():
                if cs <= cy <= cn and any(math.floor(a / CELL) <= cx <= math.floor(b / CELL) for a, b in spans):
                    out.extend(ids)
            return out
        for a, b in spans:
            for cx in range(math.floor(a / CELL), math.floor(b / CELL) + 1):
                for cy in range(cs, cn + 1):
                    cell = self.cells.get((cx, cy))
                    if cell:
                        out.extend(cell)
        return out

    def radius_ids(self, lon: float, lat: float, r: float, budget: int) -> list[int] | None:
        dlat = r / _M_PER_DEG
        s, n = lat - dlat, lat + dlat
        if s <= -90 or n >= 90:
            return None
        c = math.cos(math.radians(max(abs(s), abs(n))))
        if c <= 1e-9:
            return None
        dlon = dlat / c
        if dlon >= 180:
            return None
        w, e = lon - dlon, lon + dlon
        if w < -180:
            w += 360
        if e > 180:
            e -= 360
        return self.box_ids(w, s, e, n, budget)

    def nearest(self, lon: float, lat: float, points_of: Any, max_cells: int) -> Iterator[tuple[float, int]]:
        """(distance, id) nearest first, ties by id, nulls first as (-1, id). Raises GiveUp when
        the walk would cross a pole or the antimeridian or read more than max_cells cells."""
        for rid in list(self.nulls):
            yield (-1.0, rid)
        if not self.cells:
            return
        cx, cy = _cell(lon, lat)
        pending: list[tuple[float, int]] = []
        import heapq
        seen_points = 0
        read = 0
        r = 0
        while True:
            # Lower bound on the distance of any point in ring r or beyond.
            if r == 0:
                bound = 0.0
            else:
                dlat = (r - 1) * CELL
                top = min(90.0, abs(lat) + r * CELL)
                bound_lat = dlat * _M_PER_DEG
                bound_lon = dlat * _M_PER_DEG * math.cos(math.radians(top))
                bound = min(bound_lat, bound_lon)
            while pending and pending[0][0] < bound * 0.999999:
                yield heapq.heappop(pending)
            if seen_points >= self.points and not pending:
                return
            if seen_points >= self.points:
                while pending:
                    yield heapq.heappop(pending)
                return
            lo_lon = (cx - r) * CELL
            hi_lon = (cx + r + 1) * CELL
            lo_lat = (cy - r) * CELL
            hi_lat = (cy + r + 1) * CELL
            if lo_lon < -180 or hi_lon > 180 or lo_lat < -90 or hi_lat > 90:
                raise GiveUp()
            ring = _ring(cx, cy, r)
            read += len(ring)
            if read > max_cells:
                raise GiveUp()
            for c in ring:
                ids = self.cells.get(c)
                if not ids:
                    continue
                for rid in ids:
                    p = points_of(rid)
                    heapq.heappush(pending, (haversine(lon, lat, p[0], p[1]), rid))
                    seen_points += 1
            r += 1


def _ring(cx: int, cy: int, r: int) -> list[tuple[int, int]]:
    if r == 0:
        return [(cx, cy)]
    out = []
    for x in range(cx - r, cx + r + 1):
        out.append((x, cy - r))
        out.append((x, cy + r))
    for y in range(cy - r + 1, cy + r):
        out.append((cx - r, y))
        out.append((cx + r, y))
    return out
