"""FenecDB's own speed targets, and whether one run meets them: each either a bound on FenecDB's ratio to a
peer (the median of the same-round ratios the table shows) or a bound on FenecDB's own median."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    row: str
    peer: str | None  # None: a bound on FenecDB's own median, at most `bound` (a latency in ms)
    bound: float      # with a peer: the ratio at least `bound` (above 1: FenecDB ahead)
    # with no peer: FenecDB's row over its own row `of` in the same round (the median of those ratios), at
    # least `bound`
    of: str | None = None


NAMES = {"postgres": "PostgreSQL", "redis": "Redis", "beanstalkd": "beanstalkd"}
TARGETS = (
    Target("claim_p50", "postgres", 2.0), Target("claim_p50", "redis", 1.0), Target("claim_p99", None, 1.0),
    *(Target(f"tput_{w}", peer, bound) for w in (1, 4, 8) for peer, bound in (("postgres", 1.5), ("redis", 0.9))),
    Target("wake_block_p50", "redis", 1.0), Target("wake_block_p99", None, 2.0),
    Target("durable_1", "postgres", 1.0), Target("durable_8", "postgres", 2.0),
    Target("load", "beanstalkd", 1.0),
    Target("durable_sync_1", "postgres", 1.0), Target("durable_sync_8", "postgres", 2.0),
    *(Target(f"tput_async_{w}", None, 0.9, of=f"tput_{w}") for w in (1, 4, 8)),
)


def own_ratio(results: dict[str, Any], row: str, of: str, lead: str = "fenecdb") -> float | None:
    """The median over the rounds of FenecDB's `row` over its `of` in the same round (None: no round had both);
    `lead`: which FenecDB's (a `--before` build's is "before")."""
    mine = results["values"].get(row, {}).get(lead, {})
    base = results["values"].get(of, {}).get(lead, {})
    got = [mine[r] / base[r] for r in mine if r in base and base[r] > 0]
    return statistics.median(got) if got else None


def check(results: dict[str, Any], summed: dict[str, Any], lead: str = "fenecdb") -> list[dict[str, Any]]:
    """One entry a target: its row's label, what it asks, this run's value, and met (None: not measured,
    the peer skipped or a row without a value); `lead` as for `own_ratio`, `summed` summarized with it."""
    labels = {r["key"]: r["label"] for r in results["rows"]}
    out = []
    for t in TARGETS:
        if t.row not in labels:
            continue
        entry = summed.get(t.row, {})
        if t.of is not None:
            value = own_ratio(results, t.row, t.of, lead)
            asks = f"≥ {t.bound:g}× {labels.get(t.of, t.of)}"
            met = None if value is None else value >= t.bound
            shown = "–" if value is None else f"{value:.2f}×"
        elif t.peer is None:
            s = entry.get("systems", {}).get(lead)
            asks = f"≤ {t.bound:g} ms"
            value = s["median"] if s else None
            met = None if value is None else value <= t.bound
            shown = "–" if value is None else f"{value:.3g} ms"
        else:
            s = entry.get("ratios", {}).get(t.peer)
            asks = f"≥ {t.bound:g}× {NAMES[t.peer]}"
            value = s["median"] if s else None
            met = None if value is None else value >= t.bound
            shown = "–" if value is None else f"{value:.2f}×"
        out.append({"row": t.row, "label": labels[t.row], "asks": asks, "value": value, "shown": shown,
                    "met": met})
    return out


def markdown(checked: list[dict[str, Any]], who: str = "FenecDB") -> list[str]:
    """The targets as a table, with how many this run met, of those it could measure."""
    measured = [c for c in checked if c["met"] is not None]
    met = sum(1 for c in measured if c["met"])
    lines = [f"{who}'s own targets: {met} of {len(measured)} met in this run"
             + (f" ({len(checked) - len(measured)} not measured)." if len(measured) < len(checked)
                else "."), "", "| Workload | target | this run | met |", "|---|---|---|---|"]
    for c in checked:
        mark = {True: "yes", False: "**no**", None: "not measured"}[c["met"]]
        lines.append(f"| {c['label']} | {c['asks']} | {c['shown']} | {mark} |")
    return lines
