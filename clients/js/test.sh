#!/usr/bin/env bash
# The JS SDK's own tests, run by `make test` from this folder: `npm ci` from the committed
# lockfile when node_modules is missing or stale, the TypeScript build, then Node's test runner
# on test/*.test.mjs. The live tests start their own fenec-server from the repository's venv on a
# free loopback port; without that server they are skipped, and this script says so.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"

if [ ! -d node_modules/typescript ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npx --no-install tsc -p tsconfig.json

if [ ! -x "$root/.venv/bin/fenec-server" ]; then
  echo "SKIP js live tests: no fenec-server at .venv/bin/fenec-server (run make venv); the tests without a server still run"
fi
if [ ! -f "$root/conformance/builder.json" ] && [ -z "${FENEC_VECTORS:-}" ]; then
  echo "SKIP js project vectors: conformance/builder.json is not there yet"
fi

# One file at a time: the machine is small and the live files each start a server.
exec node --test --test-concurrency=1 test/*.test.mjs
