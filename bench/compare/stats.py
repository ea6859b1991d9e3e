"""Percentiles, the median and spread over rounds, and FenecDB's ratio to a peer measured in the same round."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    unit: str  # "ms", "jobs/s", "writes/s", "claims/job"
    better: str  # "lower", "higher" or "" (shown, never ranked)


def pct(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile: the smallest value with at least p of the values at or below it."""
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    rank = math.ceil(p * len(xs) - 1e-9)  # the tolerance keeps 0.99 * 100 at rank 99
    return xs[min(len(xs), max(1, rank)) - 1]


def summary(per_round: list[float]) -> dict:
    """The median of the rounds' values and their min and max."""
    return {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round),
            "rounds": len(per_round)}


def speed_ratio(fenec: float, peer: float, better: str) -> float | None:
    """How many times FenecDB is ahead of the peer (above 1: ahead, below 1: behind) for one round's values:
    the peer's time over FenecDB's for a latency, FenecDB's rate over the peer's for a rate."""
    if better == "lower":
        return peer / fenec if fenec > 0 else None
    if better == "higher":
        return fenec / peer if peer > 0 else None
    return None


def ratios(fenec: dict[int, float], peer: dict[int, float], better: str) -> list[float]:
    """Per-round ratios, only for the rounds in which both were measured."""
    out = []
    for rnd in sorted(set(fenec) & set(peer)):
        r = speed_ratio(fenec[rnd], peer[rnd], better)
        if r is not None:
            out.append(r)
    return out
