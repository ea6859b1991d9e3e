"""worker-policy.json runs the workers under the docs' own policy: its `policy` must be the server
README's `jobs.policy`, line for line, and the contract's events the ones docs/workers.md lists."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_scenarios_policy_is_the_readmes() -> None:
    readme = (ROOT / "server" / "README.md").read_text()
    match = re.search(r"cat > jobs.policy <<'RULES'\n(.*?)RULES\n", readme, re.S)
    assert match is not None
    spec = json.loads((ROOT / "conformance" / "worker-policy.json").read_text())
    assert spec["policy"] == match.group(1).splitlines()


def test_the_contracts_events_are_the_docs() -> None:
    contract = json.loads((ROOT / "conformance" / "worker-contract.json").read_text())
    page = (ROOT / "docs" / "workers.md").read_text()
    table = page[page.index("## Events"):page.index("## Stopping")]
    assert re.findall(r"^\| `(\w+)` \|", table, re.M) == list(contract["events"]["types"])
