"""docs/access.md's policy examples are policy files the server loads: every `policy` block is read by the
server's own rule reader, rule by rule."""

from __future__ import annotations

import re
from pathlib import Path

from fenecdb_server.policy.rules import parse_rules

PAGE = Path(__file__).resolve().parents[2] / "docs" / "access.md"


def test_every_policy_block_loads() -> None:
    blocks = re.findall(r"```policy\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    rules, append_only = parse_rules(blocks[0])
    assert len(rules) == 10 and len(append_only) == 1
    assert {r.collection for r in rules} == {"jobs", "journal", "*"}
    # the `ops` rule alone may pause the queue: no worker's rule grants `control`
    assert [r.role for r in rules if "control" in r.grants] == ["ops"]
