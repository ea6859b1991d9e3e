"""`storage/footprint.py`: a record's rows move each collection's mean row size toward the
record's share per row, one row at a time, weighted by the rows seen and at most the documents.
The updates are made one collection at a time (a bulk put's ten thousand rows cost one lookup of
the collection, not ten thousand); random records of interleaved collections, some past their
cap, give exactly the means and weights of the row-at-a-time rule."""

from __future__ import annotations

import random

import pytest
from fenecdb_server.storage.footprint import _P_OP_EXTRA, _RECORD_ENVELOPE, Footprint


def by_rows(fp_mean: dict, fp_weight: dict, size: int, seq: int, ops: list, documents) -> None:
    """The rule as stated, a row at a time, for `p` ops only."""
    rest = size - _RECORD_ENVELOPE - len(str(seq))
    rows = [op[1] for op in ops]
    for name in rows:
        rest -= _P_OP_EXTRA + len(name)
    share = max(rest, 0) / len(rows)
    for name in rows:
        w = min(fp_weight.get(name, 0) + 1, max(documents(name), 1))
        fp_weight[name] = w
        m = fp_mean.get(name, share)
        fp_mean[name] = m + (share - m) / w


@pytest.mark.parametrize("seed", range(5))
def test_a_collection_at_a_time_is_the_row_at_a_time_rule(seed: int) -> None:
    rng = random.Random(seed)
    docs = {"jobs": rng.randint(0, 50), "mail": rng.randint(0, 5000), "x": 1}
    fp = Footprint()
    mean: dict[str, float] = {}
    weight: dict[str, int] = {}
    for seq in range(1, 200):
        rows = 1 if rng.random() < 0.5 else rng.randint(2, 120)  # one row: `record`'s own case of a put
        ops = [["p", rng.choice(list(docs)), i, {}] for i in range(rows)]
        size = rng.randint(50, 40_000)
        fp.record(size, seq, ops, docs.__getitem__)
        by_rows(mean, weight, size, seq, ops, docs.__getitem__)
        assert fp._mean == mean and fp._weight == weight
        for name in docs:
            docs[name] += rng.randint(0, 30)
