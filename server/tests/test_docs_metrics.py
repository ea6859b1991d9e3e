"""docs/metrics.md names exactly what `/_metrics` exports: a real `fenec-server` on a file, with a
queue of each kind (with and without a `queue` field, named `run_at` and not), is scraped, and the
metric names of its `# TYPE` lines are compared with the names in the page's tables. The page's
Prometheus blocks parse as YAML and name only exported metrics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from test_http_e2e import Server, q

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
NAME = re.compile(r"\b(?:fenec|process)_[a-z_]+\b")


def documented() -> set[str]:
    return {m[1] for m in re.finditer(r"^\| `([a-z_]+)` \|", DOC.read_text(encoding="utf-8"), flags=re.M)}


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("metrics") / "m.fenec"
    s = Server("--file", str(path), "--slow-ms", "100000")
    try:
        with s.client() as c:
            for text in ("create collection mail (payload json, run_at timestamp @sorted, owner text, attempts int)",
                         "create collection jobs (queue text, payload json, run_at timestamp @sorted, owner text, "
                         "attempts int, error text, done_at timestamp)",
                         "create collection tasks (due timestamp @sorted, owner text, attempts int)",
                         "put mail {run_at: now(), attempts: 0}",
                         "put jobs {queue: 'img', run_at: now(), attempts: 0}",
                         "put tasks {due: now() + 5000, attempts: 0}"):
                assert q(c, text).status_code == 200, text
            r = c.get("/_metrics")
            assert r.status_code == 200
            return r.text
    finally:
        assert s.stop() == 0


def exported(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_every_exported_metric_is_documented_and_nothing_else(scrape: str) -> None:
    names = exported(scrape)
    assert names == documented(), (sorted(names - documented()), sorted(documented() - names))


def test_queues_are_found_by_shape_and_split_by_queue_value(scrape: str) -> None:
    assert 'fenec_queue_ready{collection="mail"} 1' in scrape
    assert 'fenec_queue_ready{collection="jobs",queue="img"} 1' in scrape
    assert 'fenec_queue_delayed{collection="tasks"} 1' in scrape  # its ready time is `due`
    assert 'fenec_queue_oldest_ready_seconds{collection="tasks"} 0.000' in scrape  # none ready: 0, not absent
    assert 'fenec_queue_enqueued_total{collection="jobs",queue="img"} 1' in scrape
    assert 'fenec_queue_claimed_total{collection="tasks"} 0' in scrape


def test_the_prometheus_blocks_parse_and_name_exported_metrics(scrape: str) -> None:
    scrape_config, rules = (yaml.safe_load(b) for b in yaml_blocks())
    job = scrape_config["scrape_configs"][0]
    assert job["metrics_path"] == "/_metrics" and job["authorization"]["type"] == "Bearer"
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    assert len(exprs) == 3
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used and used <= exported(scrape), used - exported(scrape)
