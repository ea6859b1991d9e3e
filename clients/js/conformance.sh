#!/usr/bin/env bash
# The JS SDK's conformance run (conformance.md Part C), started by conformance/run.py from this
# folder: builds the client if needed, runs the builder vectors, then the worker scenarios, and
# prints exactly one line `js: N passed, M failed` on stdout. Exit 0 exactly when M is 0.
set -u
cd "$(dirname "$0")"
if [ ! -d node_modules/typescript ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2 || { echo "js: 0 passed, 1 failed"; exit 1; }
fi
if ! npx --no-install tsc -p tsconfig.json >&2; then
  echo "js: 0 passed, 1 failed"
  exit 1
fi
exec node test/conformance/main.mjs
