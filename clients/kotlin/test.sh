#!/usr/bin/env bash
# The Kotlin SDK's own tests, as `make test` runs them from this folder: a Maven build and its JUnit 5 suite.
# Unit tests need no server; the live tests start <repo root>/.venv/bin/fenec-server on 127.0.0.1:0 themselves
# and stop it with SIGTERM. Without that command they are skipped, and this script says so.
set -u
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"

if [ ! -x "$root/.venv/bin/fenec-server" ]; then
  echo "SKIP kotlin live-server tests: no $root/.venv/bin/fenec-server (run 'make venv' first)"
fi
started=$(date +%s)
mvn -B -ntp -Dstyle.color=never test
code=$?
echo "kotlin: mvn test finished in $(( $(date +%s) - started )) s (exit $code)"
exit $code
