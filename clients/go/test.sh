#!/usr/bin/env bash
# The Go SDK's tests, as `make test` runs them from clients/go: go vet, then go test -race on the package:
# unit tests and the builder vectors (no server), client tests on a fake server, and the live tests and
# README examples against a fenec-server this script starts on 127.0.0.1:0 and stops with SIGTERM, and the
# replica tests and example against a primary and its replica it starts the same way (files in a temporary
# directory).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
server="$root/.venv/bin/fenec-server"
cd "$here"

echo "go vet ./..."
go vet ./...

tmp="$(mktemp -d)"
pids=()
stop_servers() {
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap stop_servers EXIT

# start_server LOG ARGS...: starts fenec-server, waits until it says where it listens, and sets addr to it.
start_server() {
	local log="$1"
	shift
	"$server" --http 127.0.0.1:0 "$@" >/dev/null 2>"$log" &
	local pid=$!
	pids+=("$pid")
	addr=""
	for _ in $(seq 1 600); do  # up to 60 s: a loaded machine starts a Python server slowly
		addr="$(sed -n 's/.*listening on: \(http:\/\/[^ ]*\).*/\1/p' "$log" | head -n 1)"
		if [ -n "$addr" ] || ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	if [ -z "$addr" ]; then
		echo "FAILED: fenec-server $* did not say where it listens:" >&2
		cat "$log" >&2
		exit 1
	fi
}

unset FENEC_TEST_URL FENECDB_URL FENEC_TEST_PRIMARY_URL FENEC_TEST_REPLICA_URL FENECDB_PRIMARY_URL FENECDB_REPLICA_URL
if [ -x "$server" ]; then
	start_server "$tmp/server.log"
	echo "live tests against $addr"
	export FENEC_TEST_URL="$addr" FENECDB_URL="$addr"  # the live tests; the README examples
	token="go-test-$$-$RANDOM"  # a flag, not the environment: the live tests' own servers have no file
	start_server "$tmp/primary.log" --file "$tmp/primary.fenec" --sync always --replication-token "$token"
	primary="$addr"
	start_server "$tmp/replica.log" --file "$tmp/replica.fenec" --sync always --replication-token "$token" \
		--replica-of "$primary"
	echo "replica tests against $primary and its replica $addr"
	export FENEC_TEST_PRIMARY_URL="$primary" FENEC_TEST_REPLICA_URL="$addr"  # the live replica cases
	export FENECDB_PRIMARY_URL="$primary" FENECDB_REPLICA_URL="$addr"        # the README's replica example
else
	echo "SKIP go live tests and examples: no fenec-server at .venv/bin (make venv installs it)"
fi

# the shared suite's scenarios run under `make conformance` (conformance.sh); here the vectors only
env -u FENEC_URL -u FENEC_REQUIRE_SERVER -u FENEC_REPLICA_SCENARIOS go test -race -count=1 ./...
