"""geo_index: nearest-first walks agree with brute force; radius and box reads cover every match."""

from __future__ import annotations

import random

import pytest
from fenecdb_server.engine.geo_index import GeoIndex, GiveUp
from fenecdb_server.plan.operators import haversine, within


def scatter(seed, n, lon0=13.0, lat0=37.8, span=0.6):
    rnd = random.Random(seed)
    return {i: (lon0 + rnd.random() * span, lat0 + rnd.random() * span) for i in range(1, n + 1)}


def index_of(points, nulls=()):
    idx = GeoIndex()
    for rid, p in points.items():
        idx.add(rid, p)
    for rid in nulls:
        idx.add(rid, None)
    return idx


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_nearest_order_matches_brute_force(seed):
    pts = scatter(seed, 600)
    idx = index_of(pts, nulls=[1001, 1000])
    rnd = random.Random(seed + 100)
    q = (13.0 + rnd.random() * 0.6, 37.8 + rnd.random() * 0.6)
    got = list(idx.nearest(q[0], q[1], pts.__getitem__, max_cells=10**7))
    assert got[:2] == [(-1.0, 1001), (-1.0, 1000)] or [r for _, r in got[:2]] == [1001, 1000]
    rest = got[2:]
    want = sorted((haversine(q[0], q[1], *p), rid) for rid, p in pts.items())
    assert [r for _, r in rest] == [r for _, r in want]
    ds = [d for d, _ in rest]
    assert ds == sorted(ds)


def test_nearest_gives_up_at_the_antimeridian_and_on_budget():
    idx = index_of({1: (179.995, 0.0), 2: (-179.995, 0.0)})
    with pytest.raises(GiveUp):
        list(idx.nearest(179.999, 0.0, {1: (179.995, 0.0), 2: (-179.995, 0.0)}.__getitem__, max_cells=10**6))
    far = {1: (0.0, 0.0), 2: (5.0, 5.0)}
    idx = index_of(far)
    with pytest.raises(GiveUp):
        list(idx.nearest(0.0, 0.0, far.__getitem__, max_cells=50))


def test_remove_keeps_counts():
    pts = scatter(5, 50)
    idx = index_of(pts, nulls=[99])
    for rid in list(pts)[:25]:
        idx.remove(rid, pts.pop(rid))
    idx.remove(99, None)
    idx.remove(12345, (1.0, 1.0))  # not there: harmless
    assert idx.points == 25 and not idx.nulls
    got = [r for _, r in idx.nearest(13.3, 38.1, pts.__getitem__, max_cells=10**7)]
    assert sorted(got) == sorted(pts)


@pytest.mark.parametrize("seed", [11, 12])
def test_radius_reads_a_superset_of_the_matches(seed):
    pts = scatter(seed, 800)
    idx = index_of(pts)
    rnd = random.Random(seed)
    for _ in range(20):
        q = (13.0 + rnd.random() * 0.6, 37.8 + rnd.random() * 0.6)
        r = rnd.choice([10.0, 500.0, 3000.0, 20000.0])
        got = idx.radius_ids(q[0], q[1], r, budget=10**7)
        assert got is not None
        inside = {rid for rid, p in pts.items() if haversine(q[0], q[1], *p) <= r}
        assert inside <= set(got)


def test_box_reads_a_superset_including_antimeridian_boxes():
    rnd = random.Random(3)
    pts = {}
    for i in range(1, 3000):
        lon = rnd.choice([rnd.uniform(-0.5, 0.5), rnd.uniform(179.6, 180), rnd.uniform(-180, -179.6)])
        pts[i] = (lon, rnd.uniform(-0.4, 0.4))
    idx = index_of(pts)
    for box in ([-0.3, -0.3, 0.3, 0.3], [179.8, -0.2, -179.8, 0.2], [179.95, -0.4, -179.7, 0.1], [0, 0, 0.01, 0.01]):
        got = idx.box_ids(*box, budget=10**8)
        assert got is not None
        inside = {rid for rid, p in pts.items() if within(p, box)}
        assert inside <= set(got)
    assert idx.box_ids(-180, -90, 180, 90, budget=10) is None  # too many cells: says so


def test_radius_past_a_pole_says_so():
    idx = index_of({1: (0.0, 89.99)})
    assert idx.radius_ids(0.0, 89.99, 5000.0, budget=10**6) is None
