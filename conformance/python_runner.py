"""The Python SDK's conformance run: the vectors, then the scenarios, then the one summary line
`python: N passed, M failed` (conformance.md C.1). `conformance/run.py` runs it for Python;
without FENEC_URL every scenario is reported skipped, so only the vectors count; the replica cases
are played when FENEC_PRIMARY_URL, FENEC_REPLICA_URL and FENEC_REPLICA_SCENARIOS are set."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import python_policy  # noqa: E402
import python_replicas  # noqa: E402
import python_scenarios  # noqa: E402
import python_vectors  # noqa: E402


def main(argv: list[str]) -> int:
    only = os.environ.get("FENEC_ONLY") or None
    passed, failed = python_vectors.run_file(python_vectors.vectors_path(), only)
    p, f = python_scenarios.run_file(python_scenarios.scenarios_path(), only)
    passed, failed = passed + p, failed + f
    if only is None or only in "worker under the docs' policy":
        p, f = python_policy.run_file(python_policy.policy_path())
        passed, failed = passed + p, failed + f
    p, f = python_replicas.run_file(python_replicas.replicas_path(), only)  # with FENEC_REPLICA_* only
    passed, failed = passed + p, failed + f
    print(f"python: {passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
