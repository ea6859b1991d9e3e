# One command per intent. `make help` lists them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SERVE_STAMP := $(VENV)/.server-installed
PORT ?= 8080
FILE ?= ./data.fenec
PY_PARTS := server/pyproject.toml $(wildcard clients/python/pyproject.toml clients/python/requirements-test.txt)

.PHONY: help serve cluster failover test test-server test-dashboard check fuzz queue-bench conformance conformance-vectors queue-compare

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

# `make serve` installs the server alone; `make test` adds the test tools and the Python client.
# the sources too: the install compiles the engine's hot modules from them (server/setup.py)
$(SERVE_STAMP): server/pyproject.toml server/setup.py $(shell find server/src/fenecdb_server -name '*.py' -o -name '*.c')
	$(PYTHON) -m venv $(VENV)
	@echo "installing the server and compiling its engine with mypyc, profile-guided: two compiles with a training run between, about 9 minutes on a 2-core machine (server/README.md, Compiled modules), silent meanwhile"
	FENECDB_PROFILE=generate $(BIN)/pip install -q -e server
	$(BIN)/python server/profile_training.py || echo "WARNING: the profile training failed: the engine is compiled without a profile"
	FENECDB_PROFILE=use $(BIN)/pip install -q -e server
	@touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP) $(PY_PARTS) server/requirements-test.txt
	$(BIN)/pip install -q -r server/requirements-test.txt
	@if [ -f clients/python/pyproject.toml ]; then \
	  $(BIN)/pip install -q -e clients/python -r clients/python/requirements-test.txt; fi
	@touch $(STAMP)

venv: $(STAMP)

serve: $(SERVE_STAMP) ## install the server in .venv and serve on 127.0.0.1:$(PORT) with $(FILE) (PORT=8080, FILE=./data.fenec)
	$(BIN)/fenec-server --file $(FILE) --http 127.0.0.1:$(PORT)

cluster: $(SERVE_STAMP) ## etcd and three servers electing a primary on 127.0.0.1:8081-8083 (docs/operations.md, Failover; etcd on PATH)
	$(BIN)/python scripts/cluster.py

failover: $(STAMP) ## the failover tests against a real etcd, with 20 SIGKILL failovers (FAILOVERS=n; 2-4 minutes)
	FENEC_FAILOVERS=$(or $(FAILOVERS),20) $(BIN)/python -m pytest -s server/tests_cluster

test: $(STAMP) ## set up .venv and run every test of every part whose toolchain is present
	$(BIN)/python scripts/test_all.py

test-server: $(STAMP) ## the server's tests only (then those marked `sources` on the sources, as make test does)
	$(BIN)/python -m pytest -n 2 server/tests
	FENECDB_PURE_PYTHON=1 $(BIN)/python -m pytest -m sources server/tests

test-dashboard: $(STAMP) ## the dashboard clicked through in headless Chromium (/usr/bin/chromium; screenshots in server/tests/browser/artifacts)
	bash server/tests/browser/test.sh

check: $(STAMP) ## lint and types: ruff and mypy (every hand-written Python part), tsc --strict (JS), go vet (Go)
	$(BIN)/python scripts/test_all.py --check

fuzz: $(STAMP) ## schemathesis over /_openapi.json, long (EXAMPLES=20000 SEED=n); reports requests sent and 5xx seen
	$(BIN)/python server/tests/schema_fuzz.py --examples $(or $(EXAMPLES),20000) $(if $(SEED),--seed $(SEED))

queue-bench: $(STAMP) ## the job-queue benchmarks (bench/README.md has the measured table)
	$(BIN)/python bench/queue_bench.py

$(VENV)/.compare-installed: $(STAMP) bench/compare/requirements.txt
	$(BIN)/pip install -q -r bench/compare/requirements.txt
	@touch $@

queue-compare: $(VENV)/.compare-installed ## FenecDB beside PostgreSQL, Redis and beanstalkd (ARGS=--quick to try it)
	$(BIN)/python -m bench.compare $(ARGS)

conformance: $(STAMP) ## the shared suite: every present SDK's vectors and worker scenarios against a live server
	$(BIN)/python conformance/run.py

conformance-vectors: $(STAMP) ## only the builder vectors of every present SDK, on $$FENEC_VECTORS
	$(BIN)/python conformance/run.py --vectors-only
