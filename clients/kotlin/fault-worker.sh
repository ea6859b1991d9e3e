#!/usr/bin/env bash
# The Kotlin SDK's fault worker, as conformance/faults.py runs it from any folder: `--build` compiles the SDK and its
# test sources once (Maven) and writes their classpath to target/; without it, this script becomes (exec) one JVM
# running the SDK's Worker, configured from the FENEC_* variables, one JSON event a line on standard output.
# SIGTERM stops it gracefully, SIGINT hard. The program is com.fenecdb.faults (test sources: not the public API).
set -eu
cd "$(dirname "$0")"

if [ "${1:-}" = "--build" ]; then
  exec mvn -B -q -ntp -Dstyle.color=never test-compile dependency:build-classpath \
    -Dmdep.outputFile=target/classpath.txt -Dmdep.includeScope=test 1>&2
fi
if [ ! -f target/classpath.txt ] || [ ! -d target/test-classes/com/fenecdb/faults ]; then
  echo "kotlin fault worker: not built; run 'bash fault-worker.sh --build' first" >&2
  exit 2
fi
# C1 only and the serial collector: a short-lived worker starts faster and takes less of a shared machine
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
  -cp "target/classes:target/test-classes:$(cat target/classpath.txt)" com.fenecdb.faults.FaultWorkerKt
