#!/usr/bin/env bash
# The Kotlin SDK's conformance run (conformance.md Part C), as conformance/run.py calls it from this folder:
# the builder vectors of $FENEC_VECTORS (default: the project's conformance/builder.json), then the worker
# scenarios of $FENEC_SCENARIOS against $FENEC_URL (unset: each is reported skipped), filtered by $FENEC_ONLY.
# Maven's own output goes to stderr, so standard output carries the runners' lines and then exactly one
# `kotlin: N passed, M failed`; the exit status is 0 exactly when M is 0.
set -u
cd "$(dirname "$0")"

if ! mvn -B -q -ntp -Dstyle.color=never test-compile dependency:build-classpath \
      -Dmdep.outputFile=target/classpath.txt -Dmdep.includeScope=test 1>&2; then
  echo "FAIL kotlin build: mvn test-compile failed (its output is above, on stderr)"
  echo "kotlin: 0 passed, 1 failed"
  exit 1
fi
exec java -cp "target/classes:target/test-classes:$(cat target/classpath.txt)" com.fenecdb.conformance.Conformance
