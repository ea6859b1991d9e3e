#!/usr/bin/env bash
# The Go SDK's tests, as `make test` runs them from clients/go: go vet, then go test -race on the package:
# unit tests and the builder vectors (no server), client tests on a fake server, and the live tests and
# README examples against a fenec-server this script starts on 127.0.0.1:0 and stops with SIGTERM.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
server="$root/.venv/bin/fenec-server"
cd "$here"

echo "go vet ./..."
go vet ./...

log="$(mktemp)"
pid=""
stop_server() {
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		pid=""
	fi
	rm -f "$log"
}
trap stop_server EXIT

unset FENEC_TEST_URL FENECDB_URL
if [ -x "$server" ]; then
	"$server" --http 127.0.0.1:0 >/dev/null 2>"$log" &
	pid=$!
	addr=""
	for _ in $(seq 1 600); do  # up to 60 s: a loaded machine starts a Python server slowly
		addr="$(sed -n 's/.*listening on: \(http:\/\/[^ ]*\).*/\1/p' "$log" | head -n 1)"
		if [ -n "$addr" ] || ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	if [ -z "$addr" ]; then
		echo "FAILED: fenec-server did not say where it listens:" >&2
		cat "$log" >&2
		exit 1
	fi
	echo "live tests against $addr"
	export FENEC_TEST_URL="$addr" FENECDB_URL="$addr"  # the live tests; the README examples
else
	echo "SKIP go live tests and examples: no fenec-server at .venv/bin (make venv installs it)"
fi

# the shared suite's scenarios run under `make conformance` (conformance.sh); here the vectors only
env -u FENEC_URL -u FENEC_REQUIRE_SERVER go test -race -count=1 ./...
