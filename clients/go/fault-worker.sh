#!/usr/bin/env bash
# The Go SDK's worker for the shared fault harness (conformance/faults.py): `bash fault-worker.sh --build`
# builds it once into build/ (ignored by git); `bash fault-worker.sh` execs it, so signals reach it.
# It reads its configuration from FENEC_* (internal/faultworker/main.go lists them) and prints one JSON
# line per event; SIGTERM stops it gracefully, SIGINT at once.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/build/fenec-fault-worker"
if [ "${1:-}" = "--build" ] || [ ! -x "$bin" ]; then
	(cd "$here" && go build -o "$bin" ./internal/faultworker)
	if [ "${1:-}" = "--build" ]; then
		exit 0
	fi
fi
exec "$bin"
