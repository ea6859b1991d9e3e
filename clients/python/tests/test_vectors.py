"""The shared builder vectors through the Python runner (conformance.md A.7): the file named by
FENEC_VECTORS, or the project's own; and the runner's own behaviour on broken files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "conformance"))

import python_vectors  # noqa: E402


def run(path: Path) -> tuple[int, int, list[str]]:
    lines: list[str] = []
    passed, failed = python_vectors.run_file(path, None, lines.append)
    return passed, failed, lines


def test_every_vector_passes() -> None:
    path = python_vectors.vectors_path()
    passed, failed, lines = run(path)
    print("\n".join(lines))
    assert failed == 0, [line for line in lines if line.startswith("FAIL")]
    if "FENEC_VECTORS" not in os.environ:
        assert passed >= python_vectors.MIN_PROJECT_CASES


def test_the_project_file_covers_every_rule_and_enough_refusals() -> None:
    cases = json.loads(python_vectors.DEFAULT_VECTORS.read_text(encoding="utf-8"))
    assert len(cases) >= 150
    assert sum(1 for c in cases if "error" in c) >= 40
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names)
    for rule in range(1, 23):
        assert any(n.startswith(f"R{rule}:") for n in names), f"no case for R{rule}"
    assert any("headers" in c for c in cases)


def write(tmp_path: Path, cases: Any) -> Path:
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(cases), encoding="utf-8")
    return path


GOOD = {"name": "a read", "steps": [{"op": "from", "args": ["t"]}, {"op": "toFenecQL"}], "text": "get t", "params": []}


@pytest.mark.parametrize(("case", "why"), [
    ({**GOOD, "text": "get u"}, "'get u' [] / 'get t' []"),
    ({**GOOD, "params": [1]}, "'get t' [1] / 'get t' []"),
    ({"name": "x", "steps": [{"op": "from", "args": ["t"]}, {"op": "toFenecQL"}], "error": "nope"}, "error 'nope' / 'get t' []"),
    ({"name": "x", "steps": [{"op": "from", "args": ["t"]}, {"op": "frobnicate"}, {"op": "toFenecQL"}],
      "text": "get t", "params": []}, "unsupported op frobnicate"),
    ({"name": "x", "steps": [{"op": "from", "args": ["t"]}, {"op": "toFenecQL"}, {"op": "limit", "args": [1]}],
      "text": "get t", "params": []}, "malformed case"),
    ({"name": "x", "steps": [{"op": "from", "args": ["t"]}, {"op": "limit", "args": [1]}], "text": "get t",
      "params": []}, "malformed case"),
    ({"name": "x", "steps": [{"op": "from", "args": ["t"]}, {"op": "where", "args": ["a", {"$nope": 1}]},
                             {"op": "toFenecQL"}], "text": "get t", "params": []}, "unknown encoding $nope"),
    ({"name": "x", "steps": [{"op": "from", "args": ["t"]}, {"op": "where", "args": ["a", 1.5]},
                             {"op": "toFenecQL"}], "text": "get t where a = $1", "params": [1]},
     "'get t where a = $1' [1] / 'get t where a = $1' [1.5]"),
    ({"name": "x", "steps": [{"op": "from", "args": ["t"]}, {"op": "where", "args": ["id", 1]},
                             {"op": "delete", "args": [{"wait": 10}]}], "text": "del t where id = $1", "params": [1],
      "headers": {"Fenec-Wait": "11"}}, "header Fenec-Wait: '11' / '10'"),
])
def test_a_wrong_case_fails_with_what_was_expected_and_got(tmp_path: Path, case: dict[str, Any], why: str) -> None:
    passed, failed, lines = run(write(tmp_path, [GOOD, case]))
    assert (passed, failed) == (1, 1)
    assert lines[1] == f"FAIL {case['name']}: {why}"
    assert lines[-1] == f"vectors {tmp_path / 'vectors.json'}: 1 ok, 1 FAIL, 0 checked-elsewhere"


@pytest.mark.parametrize("content", ["", "[]", "{\"not\": \"a list\"}", "[{"])
def test_an_empty_or_unreadable_file_is_a_failure(tmp_path: Path, content: str) -> None:
    path = tmp_path / "vectors.json"
    path.write_text(content, encoding="utf-8")
    assert run(path)[:2] == (0, 1)


def test_a_missing_file_is_a_failure(tmp_path: Path) -> None:
    assert run(tmp_path / "absent.json")[:2] == (0, 1)


def test_fenec_only_keeps_the_matching_cases() -> None:
    lines: list[str] = []
    passed, failed = python_vectors.run_file(python_vectors.DEFAULT_VECTORS, "R11:", lines.append)
    assert failed == 0 and passed == sum(1 for line in lines if line.startswith("ok R11:")) and passed >= 5
