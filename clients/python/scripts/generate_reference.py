"""Generate the reference client of the server's OpenAPI document, to hold the hand-written wire to it.

    python clients/python/scripts/generate_reference.py OUT   # writes OUT/_reference, to read

The client does not ship or call generated code: `fenecdb._wire` writes the requests and reads
the answers by hand (a few lines, and a fraction of the CPU). openapi-python-client's output is
generated from the committed document (server/openapi.json, served as /_openapi.json) into a
temporary folder by `tests/test_wire_matches_openapi.py`, which checks that the requests
`fenecdb._wire` makes agree with it: route, method, headers and body. Two things stand between
the document and the generator, both written down here:

* openapi-python-client refuses an array schema without `items` (the server's `Statement.params`
  is one); JSON Schema reads a missing `items` as "any item", so `items: {}` is filled in, which
  says the same thing.
* it does not generate bodies of type application/x-ndjson, so POST /batch has no generated
  function; the test reads that route's parameters and body type from the document itself, and
  checks each NDJSON line against the generated `Statement`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DOCUMENT = HERE.parents[2] / "server" / "openapi.json"
PACKAGE = "_reference"
CONFIG = f"project_name_override: fenecdb-reference\npackage_name_override: {PACKAGE}\npost_hooks: []\n"


def _fill_items(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "array" and "items" not in node:
            node["items"] = {}
        for value in node.values():
            _fill_items(value)
    elif isinstance(node, list):
        for value in node:
            _fill_items(value)


def document() -> dict[str, Any]:
    """The committed OpenAPI document, as the generator is given it."""
    doc: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    _fill_items(doc)
    return doc


def generate(into: Path) -> Path:
    """Generates the reference package under `into`; answers its folder (`into/_reference`)."""
    (into / "openapi.json").write_text(json.dumps(document(), indent=1, sort_keys=True), encoding="utf-8")
    (into / "config.yaml").write_text(CONFIG, encoding="utf-8")
    tool = Path(sys.executable).with_name("openapi-python-client")
    subprocess.run([str(tool), "generate", "--path", "openapi.json", "--config", "config.yaml", "--meta", "none"],
                   cwd=into, check=True, capture_output=True, text=True)
    return into / PACKAGE


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip())
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    print(generate(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
