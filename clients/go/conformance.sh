#!/usr/bin/env bash
# The shared suite for the Go SDK (conformance.md Part C), run by conformance/run.py from clients/go:
# the builder vectors of FENEC_VECTORS, then the worker scenarios of FENEC_SCENARIOS against FENEC_URL,
# then exactly one line `go: N passed, M failed`. It exits 0 exactly when M is 0.
# `go test` with no package argument streams the test's standard output unchanged.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec go test -count=1 -run '^TestConformance$'
