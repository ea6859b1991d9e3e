"""The README's `python` blocks run, in order and in one namespace, against the live server, and
what they print is what the `# ...` line under each `print(...)` says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def printed_as_documented(block: str) -> list[str]:
    lines = block.splitlines()
    return [lines[i + 1][2:] for i, line in enumerate(lines[:-1])
            if line.startswith("print(") and lines[i + 1].startswith("# ")]


def test_the_readme_examples_run(server_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = BLOCK.findall(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "readme"}
    for number, block in enumerate(blocks, 1):
        code = block.replace("http://127.0.0.1:8080", server_url)
        exec(compile(code, f"README.md python block {number}", "exec"), namespace)  # noqa: S102
        assert capsys.readouterr().out.splitlines() == printed_as_documented(block), f"block {number}"
