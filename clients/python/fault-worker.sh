#!/usr/bin/env bash
# The Python SDK's worker for the fault harness (conformance/faults.py): `--build` checks the
# repository's .venv (made by `make venv`); otherwise it execs the worker, so signals reach it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$here/../../.venv/bin/python"
if [[ ! -x "$python" ]]; then
    echo "fault-worker.sh: no $python; run make venv first" >&2
    exit 1
fi
if [[ "${1:-}" == "--build" ]]; then
    exec "$python" -c "import fenecdb"
fi
exec "$python" "$here/scripts/fault_worker.py"
