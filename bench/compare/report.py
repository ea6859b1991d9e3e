"""The table: each system's median over the rounds with the spread (min–max), and FenecDB's ratio to each peer
from the rounds in which both ran, written as Markdown and as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import targets
from .stats import Row, ratios, summary

FENEC = "fenecdb"
BEFORE = "before"  # another build's FenecDB (`--before`)


def number(v: float, unit: str) -> str:
    if unit in ("jobs/s", "writes/s"):
        return f"{v:,.0f}".replace(",", " ")
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(s: dict | None, unit: str) -> str:
    if not s:
        return "–"
    if s["rounds"] == 1:
        return number(s["median"], unit)
    return f"{number(s['median'], unit)} ({number(s['min'], unit)}–{number(s['max'], unit)})"


def ratio_cell(s: dict | None) -> str:
    if not s:
        return "–"
    if s["rounds"] == 1:
        return f"{s['median']:.2f}×"
    return f"{s['median']:.2f}× ({s['min']:.2f}–{s['max']:.2f})"


def summarize(results: dict[str, Any], lead: str = FENEC) -> dict[str, Any]:
    """Per row: each system's summary, and each peer's ratio summary against FenecDB (`lead`: which build's,
    "before" for a `--before` build's)."""
    out: dict[str, Any] = {}
    order = [k for k in results["systems"] if "skipped" not in results["systems"][k]]
    for row in results["rows"]:
        r = Row(**row)
        by_system = results["values"].get(r.key, {})
        entry: dict[str, Any] = {"systems": {}, "ratios": {}}
        for key in order:
            vals = by_system.get(key, {})
            if vals:
                entry["systems"][key] = summary(list(vals.values()))
        fenec = {int(k): v for k, v in by_system.get(lead, {}).items()}
        for key in order:
            if key == lead or r.better not in ("lower", "higher"):
                continue
            peer = {int(k): v for k, v in by_system.get(key, {}).items()}
            rs = ratios(fenec, peer, r.better)
            if rs:
                entry["ratios"][key] = summary(rs)
        out[r.key] = entry
    return out


def markdown(results: dict[str, Any], summed: dict[str, Any], checked: list[dict[str, Any]]) -> str:
    systems = results["systems"]
    present = [k for k in systems if "skipped" not in systems[k]]
    peers = [k for k in present if k != FENEC]
    m = results["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}. "
        f"{number(results['settings']['jobs'], 'jobs/s')} jobs, {results['settings']['rounds']} rounds, "
        "systems alternated per round; each cell is the median of the rounds (min–max).",
        "",
        "Versions and settings: " + "; ".join(
            f"{systems[k]['name']} {systems[k]['version']} ({systems[k]['everyday']}; durable row: "
            f"{systems[k]['durable']})" for k in present) + ".",
        "",
    ]
    head = ["Workload"] + [systems[k]["name"] for k in present] + [f"FenecDB vs {systems[k]['name']}" for k in peers]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for row in results["rows"]:
        r = Row(**row)
        entry = summed[r.key]
        cells = [f"{r.label} ({r.unit})"]
        cells += [cell(entry["systems"].get(k), r.unit) for k in present]
        cells += [ratio_cell(entry["ratios"].get(k)) if r.better else "" for k in peers]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Ratios are FenecDB's speed over the peer's in the same round (above 1: FenecDB ahead; below 1: "
              "behind): the peer's time over FenecDB's for a latency, FenecDB's rate over the peer's for a rate."]
    if FENEC in present:
        lines += [""] + targets.markdown(checked)
    if BEFORE in present:  # the other build's, from the same rounds: before and after side by side
        before = targets.check(results, summarize(results, BEFORE), BEFORE)
        lines += ["", f"The same targets for {systems[BEFORE]['name']} ({systems[BEFORE]['version']}), "
                  "from the same rounds; the column \"FenecDB vs FenecDB before\" above is their ratio, "
                  "round by round:", ""] + targets.markdown(before, systems[BEFORE]["name"])
    skipped = [f"{systems[k]['name']}: {systems[k]['skipped']}" for k in systems if "skipped" in systems[k]]
    if skipped:
        lines += ["", "Skipped: " + "; ".join(skipped) + "."]
    if results.get("notes"):
        lines += ["", "Notes: " + "; ".join(results["notes"]) + "."]
    if results.get("errors"):
        lines += ["", "Failed (left out of the table): " + "; ".join(results["errors"]) + "."]
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], outdir: Path, stem: str = "queue-compare") -> tuple[Path, Path, str]:
    summed = summarize(results)
    checked = targets.check(results, summed)
    text = markdown(results, summed, checked)
    outdir.mkdir(parents=True, exist_ok=True)
    md, js = outdir / f"{stem}.md", outdir / f"{stem}.json"
    md.write_text(text)
    js.write_text(json.dumps({**results, "summary": summed, "targets": checked}, indent=2))
    return md, js, text
