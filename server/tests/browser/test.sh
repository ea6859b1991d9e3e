#!/usr/bin/env bash
# The dashboard's browser test, run by `make test` (scripts/test_all.py): `npm ci` from the
# committed lockfile when node_modules is missing or stale, then Node's test runner on
# dashboard.test.mjs, which drives the system Chromium (/usr/bin/chromium, from Debian's
# `chromium` package; FENEC_CHROMIUM overrides) with playwright-core against a real
# fenec-server from the repository's venv. Screenshots land in artifacts/ (gitignored).
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../../.. && pwd)"
chromium="${FENEC_CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$chromium" ]; then
  echo "SKIP dashboard: no chromium (apt-get install chromium)"
  exit 0
fi
if [ ! -x "$root/.venv/bin/fenec-server" ]; then
  echo "SKIP dashboard: no fenec-server at .venv/bin/fenec-server (run make venv)"
  exit 0
fi
if [ ! -d node_modules/playwright-core ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
exec node --test --test-concurrency=1 dashboard.test.mjs
