# Two commands do everything on a fresh machine:  make drill  and  make test.
# Both set the project up on first use (virtualenv in .venv, pinned dependencies, Java check).
# make test-fast sets up only what its in-process tests import: the virtualenv (see setup-fast).

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup setup-fast test test-fast drill drill-matrix lint bench bench-offload clean \
        java node spark-classes localstack-setup localstack localstack-stop

# Everything the whole suite and the drill use: Java for Spark, the project's virtualenv, LocalStack's own
# virtualenv (the slow lane's --target localstack tests), node for the CDK comparison test.
setup: java $(STAMP) spark-classes node localstack-setup

# The fast lane's tests run in this process (tests/conftest.py fails one that starts Spark, the agent,
# workers or LocalStack), so they need the project's virtualenv only: no Java, LocalStack or node.
setup-fast: $(STAMP)

# The CDK app synthesises through jsii, which runs on node (tests/infra/test_cdk_matches_template.py).
node:
	@if ! command -v node >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: installing node (the CDK app needs it) with apt-get ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null; \
	  else \
	    echo "setup: warning: node is missing, so the CDK comparison test is skipped (install nodejs 18+)" >&2; \
	  fi; \
	fi

java:
	@if ! command -v java >/dev/null 2>&1 || ! java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])'; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: installing Java 17 (Spark needs it) with apt-get ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else \
	    echo "error: Spark needs Java 17 or newer; install a JDK (Debian: sudo apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2; \
	    exit 1; \
	  fi; \
	fi

# Spark's classes, recorded once into archives every Spark JVM maps at start (docs/adr/0057): about a
# minute the first time, then nothing while pyspark and Java stay the same.
spark-classes: java $(STAMP)
	@$(BIN)/python -m core.spark.class_training

# The project's virtualenv: pinned dependencies with the dev extras, and the generated gRPC code.
$(STAMP): pyproject.toml constraints.txt core/wire/agent.proto
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "error: Python 3.11+ is needed (found $$($(PYTHON) --version)); set PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/python -m core.wire.build_proto
	@touch $(STAMP)
	@echo "setup: done; the CLI is $(BIN)/sponge"

# Three lanes, each always run; any failing fails the target. The fast lane runs two tests at a time
# (pytest-xdist), one per core. The Spark and process lane runs four (a file's tests stay on one
# worker, so its module fixtures start once): its tests wait on processes and epochs often enough that
# two left the cores idle a good part of the time and three took half the time; three kept both cores
# busy, and four still cut the lane from 18.5 to 16.4 min by ending its long files closer together.
# The solo lane, whose tests run drills or clusters or assert on timing, runs one at a time after them.
test: setup
	@$(BIN)/python -m pytest -m "not spark and not slow" -n 2; fast=$$?; \
	$(BIN)/python -m pytest -m "(spark or slow) and not solo" -n 4 --dist loadfile; slow=$$?; \
	$(BIN)/python -m pytest -m "(spark or slow) and solo"; solo=$$?; \
	exit $$(( (fast != 0 && fast != 5) || (slow != 0 && slow != 5) || (solo != 0 && solo != 5) ))  # 5: empty lane

test-fast: setup-fast
	$(BIN)/python -m pytest -m "not spark and not slow"

drill: setup
	$(BIN)/sponge drill --query q5 --compare sponge,noscaling,over --pattern sudden:3x:15s --duration 40 --lead 20

# Every query under every burst pattern (3x, as make drill) against sponge, noscaling, vmbase and over: hours.
# Resumable: run it again after a Ctrl-C and the cells already done are kept (runs/drill-matrix/matrix.md).
drill-matrix: setup
	$(BIN)/sponge drill-matrix --duration 60 --lead 20 --patterns sudden:3x:15s,sine:3x:20s,gradual:3x:20s

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python -m bench.throughput

bench-offload: setup
	$(BIN)/python -m bench.offload

# Plants five deliberate bugs, one at a time, in a copy of the tree and checks that tests catch each
# (tests/mutation_check.py; takes a while: it runs Spark end-to-end tests per bug).
.PHONY: mutation-check
mutation-check: setup
	$(BIN)/python -m tests.mutation_check

# LocalStack in host mode (no Docker) from its own virtualenv; docs/localstack.md.
localstack-setup:
	@infra/localstack/setup.sh

localstack: setup
	$(BIN)/python -m infra.localstack.launcher start

localstack-stop:
	@$(BIN)/python -m infra.localstack.launcher stop

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
