"""The statistics and the table writer, with no server: `python -m pytest bench/compare -q`."""

from __future__ import annotations

import io
import json

import pytest

from . import report
from .progress import Progress
from .stats import Row, pct, ratios, speed_ratio, summary


def test_pct_is_the_nearest_rank() -> None:
    xs = list(range(1, 101))  # 1..100, shuffled order must not matter
    assert pct(list(reversed(xs)), 0.5) == 50
    assert pct(xs, 0.99) == 99
    assert pct(xs, 1.0) == 100
    assert pct([7.0], 0.99) == 7.0
    assert pct([3, 1, 2], 0.5) == 2
    with pytest.raises(ValueError):
        pct([], 0.5)


def test_summary_is_median_and_spread() -> None:
    assert summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "rounds": 3}
    assert summary([1.0, 4.0])["median"] == 2.5


def test_ratio_reads_as_fenecdb_ahead_above_one() -> None:
    assert speed_ratio(fenec=2.0, peer=4.0, better="lower") == 2.0     # half the latency: twice as fast
    assert speed_ratio(fenec=1000.0, peer=4000.0, better="higher") == 0.25
    assert speed_ratio(fenec=1.0, peer=1.0, better="") is None
    assert speed_ratio(fenec=0.0, peer=1.0, better="lower") is None


def test_ratios_pair_only_rounds_both_ran() -> None:
    fenec = {0: 1.0, 1: 2.0, 2: 4.0}
    peer = {0: 2.0, 2: 2.0}  # round 1 of the peer failed
    assert ratios(fenec, peer, "lower") == [2.0, 0.5]


def sample() -> dict:
    rows = [Row("claim_p50", "claim 10, p50", "ms", "lower"), Row("tput_1", "claim + ack", "jobs/s", "higher"),
            Row("poll_claims", "claims a job", "claims", "")]
    return {
        "machine": {"cpu": "Test CPU", "cores": 2, "platform": "Linux", "python": "3.11"},
        "settings": {"jobs": 1000, "rounds": 3},
        "systems": {
            "fenecdb": {"name": "FenecDB", "version": "0.1", "everyday": "--sync 250", "durable": "--sync always"},
            "redis": {"name": "Redis", "version": "7.0", "everyday": "everysec", "durable": "always"},
            "beanstalkd": {"name": "beanstalkd", "skipped": "beanstalkd not found; install it with: apt-get install -y beanstalkd"},
        },
        "rows": [r.__dict__ for r in rows],
        "values": {
            "claim_p50": {"fenecdb": {"0": 1.0, "1": 2.0, "2": 3.0}, "redis": {"0": 0.5, "1": 0.5, "2": 1.5}},
            "tput_1": {"fenecdb": {"0": 1000.0, "1": 3000.0, "2": 2000.0}, "redis": {"0": 10000.0, "2": 4000.0}},
            "poll_claims": {"fenecdb": {"0": 2.0, "1": 2.0, "2": 2.0}, "redis": {"0": 2.0, "1": 2.0, "2": 2.0}},
        },
        "errors": ["round 2 Redis: RuntimeError('x')"],
        "notes": [],
    }


def test_summarize_gives_each_system_and_the_same_round_ratios() -> None:
    s = report.summarize(sample())
    assert s["claim_p50"]["systems"]["fenecdb"]["median"] == 2.0
    # per round 0.5/1, 0.5/2, 1.5/3 -> 0.5, 0.25, 0.5
    assert s["claim_p50"]["ratios"]["redis"] == {"median": 0.5, "min": 0.25, "max": 0.5, "rounds": 3}
    # round 1 has no Redis value: ratios of rounds 0 and 2 only (1000/10000, 2000/4000)
    assert s["tput_1"]["ratios"]["redis"]["rounds"] == 2
    assert s["tput_1"]["ratios"]["redis"]["median"] == pytest.approx(0.3)
    assert s["poll_claims"]["ratios"] == {}
    assert "beanstalkd" not in s["claim_p50"]["systems"]


def test_markdown_table_has_a_row_each_and_names_what_was_skipped(tmp_path) -> None:
    md, js, text = report.write(sample(), tmp_path)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| Workload"))
    assert header == "| Workload | FenecDB | Redis | FenecDB vs Redis |"
    table = lines[lines.index(header):]
    table = table[:table.index("")]
    body = table[2:]
    assert len(body) == 3
    assert body[0] == "| claim 10, p50 (ms) | 2.00 (1.00–3.00) | 0.500 (0.500–1.50) | 0.50× (0.25–0.50) |"
    assert body[1].startswith("| claim + ack (jobs/s) | 2 000 (1 000–3 000) | 7 000 (4 000–10 000) | 0.30×")
    assert body[2] == "| claims a job (claims) | 2.00 (2.00–2.00) | 2.00 (2.00–2.00) |  |"  # shown, never ranked
    assert "Test CPU, 2 cores" in text
    assert "1 000 jobs, 3 rounds" in text
    assert "apt-get install -y beanstalkd" in text
    assert "round 2 Redis" in text
    saved = json.loads(js.read_text())
    assert saved["summary"]["claim_p50"]["ratios"]["redis"]["median"] == 0.5
    assert md.read_text() == text


def test_progress_bar_redraws_one_line() -> None:
    out = io.StringIO()
    p = Progress(4, out=out, width=8)
    p.step("a")
    p.step("b")
    p.finish()
    text = out.getvalue()
    assert text.count("\r") == 2 and "\n" not in text[:-1]
    assert "[####....] 2/4" in text


def test_a_peer_with_no_value_in_a_row_shows_a_dash_and_no_ratio(tmp_path) -> None:
    results = sample()
    del results["values"]["claim_p50"]["redis"]
    s = report.summarize(results)
    assert "redis" not in s["claim_p50"]["ratios"]
    _, _, text = report.write(results, tmp_path)
    row = next(line for line in text.splitlines() if line.startswith("| claim 10, p50"))
    assert row == "| claim 10, p50 (ms) | 2.00 (1.00–3.00) | – | – |"


def test_the_json_keeps_every_rounds_value(tmp_path) -> None:
    _, js, _ = report.write(sample(), tmp_path)
    saved = json.loads(js.read_text())
    assert saved["values"]["tput_1"]["redis"] == {"0": 10000.0, "2": 4000.0}
    assert saved["machine"]["cores"] == 2


def test_the_harness_rows_are_the_issues_workloads() -> None:
    from .harness import rows

    keys = [r.key for r in rows(1_000_000)]
    for key in ("load", "claim_p50", "claim_p99", "tput_1", "tput_4", "tput_8", "wake_block_p50",
                "wake_poll_p50", "few_p50", "few_p99", "durable_1", "durable_8"):
        assert key in keys
    labels = " / ".join(r.label for r in rows(1_000_000))
    assert "claim 10 of 1 000 000 ready" in labels and "1 000 000 leased/delayed and 3 ready" in labels


def test_the_targets_say_which_are_met_and_which_could_not_be_measured(tmp_path) -> None:
    results = sample()
    results["rows"].append(Row("claim_p99", "claim 10, p99", "ms", "lower").__dict__)
    results["values"]["claim_p99"] = {"fenecdb": {"0": 0.9, "1": 1.2, "2": 1.5}}  # median 1.2: over 1 ms
    results["values"]["claim_p50"]["redis"] = {"0": 1.5, "1": 2.0, "2": 3.0}  # ratios 1.5, 1, 1: median 1
    _, js, text = report.write(results, tmp_path)
    by = {(c["row"], c["asks"]): c for c in json.loads(js.read_text())["targets"]}
    assert by[("claim_p50", "≥ 1× Redis")]["met"] is True  # exactly at the bound is met
    assert by[("claim_p99", "≤ 1 ms")]["met"] is False
    assert by[("claim_p50", "≥ 2× PostgreSQL")]["met"] is None  # PostgreSQL not in this run
    assert by[("tput_1", "≥ 0.9× Redis")]["met"] is False  # 0.3×
    assert "tput_4" not in {c["row"] for c in by.values()}  # a row this run has not: no target shown
    assert "FenecDB's own targets: 1 of 3 met in this run (2 not measured)." in text
    assert "| claim 10, p99 | ≤ 1 ms | 1.2 ms | **no** |" in text
    assert "| claim 10, p50 | ≥ 1× Redis | 1.00× | yes |" in text


def test_the_targets_cover_the_rows_they_name() -> None:
    from .harness import rows
    from .targets import TARGETS

    keys = {r.key for r in rows(1_000_000)}
    assert {t.row for t in TARGETS} <= keys
    assert {t.of for t in TARGETS if t.of is not None} <= keys
    # claim 3, claim + ack 6, wake 2, durable 2, load 1, durable with a sync replica 2, with an async one 3
    assert len(TARGETS) == 19


def test_a_target_against_fenecdbs_own_row_is_the_median_of_the_rounds_ratios(tmp_path) -> None:
    results = sample()
    results["rows"].append(Row("tput_async_1", "claim 10 + ack, 1 worker, one async replica", "jobs/s",
                               "higher").__dict__)
    # tput_1 is 1000, 3000, 2000 over the rounds: ratios 0.95, 0.85, 0.9 (round 3 has no base: left out)
    results["values"]["tput_async_1"] = {"fenecdb": {"0": 950.0, "1": 2550.0, "2": 1800.0, "3": 5.0}}
    _, js, text = report.write(results, tmp_path)
    got = next(c for c in json.loads(js.read_text())["targets"] if c["row"] == "tput_async_1")
    assert got["asks"] == "≥ 0.9× claim + ack" and got["shown"] == "0.90×" and got["met"] is True


def test_a_before_build_gets_its_ratio_column_and_its_own_targets_from_the_same_rounds(tmp_path) -> None:
    results = sample()
    results["systems"]["before"] = {"name": "FenecDB before", "version": "1d67ace", "everyday": "--sync 250",
                                    "durable": "--sync always"}
    results["values"]["claim_p50"]["before"] = {"0": 2.0, "1": 2.0, "2": 6.0}  # FenecDB 2×, 1×, 2× as fast
    results["values"]["claim_p50"]["redis"] = {"0": 2.0, "1": 2.0, "2": 6.0}
    results["values"]["tput_1"]["before"] = {"0": 500.0, "1": 3000.0, "2": 4000.0}  # FenecDB 2×, 1×, 0.5×
    _, _, text = report.write(results, tmp_path)
    lines = text.splitlines()
    assert lines[4] == "| Workload | FenecDB | Redis | FenecDB before | FenecDB vs Redis | FenecDB vs FenecDB before |"
    assert "| claim + ack (jobs/s) | 2 000 (1 000–3 000) | 7 000 (4 000–10 000) | 3 000 (500–4 000) | 0.30× (0.10–0.50) " \
        "| 1.00× (0.50–2.00) |" in lines
    at = lines.index("FenecDB before's own targets: 1 of 2 met in this run (2 not measured).")
    assert lines[at - 2].startswith("The same targets for FenecDB before (1d67ace), from the same rounds")
    # its ratios are to the peers in the rounds it ran, as FenecDB's are: Redis's 500 and 4 000 against 10 000 and 4 000
    assert "| claim 10, p50 | ≥ 1× Redis | 1.00× | yes |" in lines[at:]
    assert "| claim + ack | ≥ 0.9× Redis | 0.53× | **no** |" in lines[at:]
    assert "| claim + ack | ≥ 0.9× Redis | 0.30× | **no** |" in lines[:at]  # FenecDB's own, unchanged
