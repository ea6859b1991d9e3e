"""Regenerate the low-level transport `fenecdb._transport` from the server's OpenAPI document.

    python clients/python/scripts/generate_transport.py          # rewrite src/fenecdb/_transport
    python clients/python/scripts/generate_transport.py --check  # exit 1 when regenerating would change it

The document is the one the repository commits (server/openapi.json, served as
/_openapi.json). Two things stand between it and the generator, both written down here:

* openapi-python-client refuses an array schema without `items` (the server's `Statement.params`
  is one); JSON Schema reads a missing `items` as "any item", so `items: {}` is filled in, which
  says the same thing.
* it does not generate bodies of type application/x-ndjson, so POST /batch has no generated
  function; `fenecdb._wire` frames the NDJSON body itself.

No formatter runs after generation (post_hooks is empty), so the output depends only on the
document and the pinned generator version (the `test` extra), and the check is exact.
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "src" / "fenecdb"
TARGET = PACKAGE / "_transport"
DOCUMENT = HERE.parents[2] / "server" / "openapi.json"
CONFIG = "project_name_override: fenecdb-transport\npackage_name_override: _transport\npost_hooks: []\n"


def _fill_items(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "array" and "items" not in node:
            node["items"] = {}
        for value in node.values():
            _fill_items(value)
    elif isinstance(node, list):
        for value in node:
            _fill_items(value)


def generate(into: Path) -> Path:
    """Generates the package under `into`; answers its folder."""
    document = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    _fill_items(document)
    (into / "openapi.json").write_text(json.dumps(document, indent=1, sort_keys=True), encoding="utf-8")
    (into / "config.yaml").write_text(CONFIG, encoding="utf-8")
    tool = Path(sys.executable).with_name("openapi-python-client")
    subprocess.run([str(tool), "generate", "--path", "openapi.json", "--config", "config.yaml", "--meta", "none"],
                   cwd=into, check=True, capture_output=True, text=True)
    return into / "_transport"


def _differences(a: Path, b: Path) -> list[str]:
    found: list[str] = []
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    found += [f"only in the committed package: {n}" for n in cmp.left_only]
    found += [f"only in a fresh generation: {n}" for n in cmp.right_only]
    for name in cmp.common_files:
        if (a / name).read_bytes() != (b / name).read_bytes():
            found.append(f"differs: {(a / name).relative_to(TARGET.parent)}")
    for sub in cmp.common_dirs:
        found += _differences(a / sub, b / sub)
    return found


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        if "--check" in argv:
            diffs = _differences(TARGET, fresh) if TARGET.exists() else ["the package is missing"]
            for line in diffs:
                print(line)
            return 1 if diffs else 0
        if TARGET.exists():
            shutil.rmtree(TARGET)
        shutil.copytree(fresh, TARGET, ignore=shutil.ignore_patterns("__pycache__"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
