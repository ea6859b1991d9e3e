#!/usr/bin/env bash
# The Kotlin SDK's own tests, as `make test` runs them from this folder: a Maven build, its JUnit 5 suite, and
# the packaging (`mvn verify`: the jar, sources jar and javadoc jar an `mvn install` installs), then the README's
# install from a fresh clone (install-test.sh).
# Unit tests need no server; the live tests start <repo root>/.venv/bin/fenec-server on 127.0.0.1:0 themselves
# and stop it with SIGTERM. Without that command they are skipped, and this script says so.
set -u
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"

if [ ! -x "$root/.venv/bin/fenec-server" ]; then
  echo "SKIP kotlin live-server tests: no $root/.venv/bin/fenec-server (run 'make venv' first)"
fi
started=$(date +%s)
# verify: the tests, then the jar, its sources jar and its javadoc jar, as `mvn install` makes them
mvn -B -ntp -Dstyle.color=never verify
code=$?
if [ $code -eq 0 ]; then
  for jar in fenecdb-0.1.0.jar fenecdb-0.1.0-sources.jar fenecdb-0.1.0-javadoc.jar; do
    [ -s "target/$jar" ] || { echo "FAILED: mvn verify made no target/$jar"; code=1; }
  done
fi
echo "kotlin: mvn verify finished in $(( $(date +%s) - started )) s (exit $code)"
# the README's install from a fresh clone, and a project depending on what it installed
if [ $code -eq 0 ]; then
  started=$(date +%s)
  bash install-test.sh || code=1
  echo "kotlin: install-test.sh finished in $(( $(date +%s) - started )) s (exit $code)"
fi
exit $code
