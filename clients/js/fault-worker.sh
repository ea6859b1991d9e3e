#!/usr/bin/env bash
# The JS SDK's program for the fault harness (conformance/faults.py; docs/workers.md):
#   bash fault-worker.sh --build   npm ci when node_modules is missing or stale, then the build (dist/)
#   bash fault-worker.sh           execs node on scripts/fault-worker.mjs: the Worker over the built
#                                  dist, configured from FENEC_*; JSON lines on stdout; SIGTERM
#                                  stops it gracefully, SIGINT hard.
set -euo pipefail
cd "$(dirname "$0")"
if [ "${1:-}" = "--build" ]; then
  if [ ! -d node_modules/typescript ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2
  fi
  npx --no-install tsc -p tsconfig.json >&2
  exit 0
fi
if [ ! -f dist/client.js ]; then
  echo "fault-worker.sh: no dist/ here: run 'bash fault-worker.sh --build' first" >&2
  exit 1
fi
exec node scripts/fault-worker.mjs
