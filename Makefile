# riverbed — the two commands a newcomer needs are `make demo` and `make test`.
# Both install what is missing first (as root, non-interactively), like `make install`.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test demo lint typecheck bench clean

install: $(STAMP)

# Debian packages the tests use (kcat is librdkafka's command-line client; PostgreSQL for the
# CDC tests, which start private clusters of their own; Java 17 for Spark; redis-server for the
# cache sink, whose tests start private servers).
# The venv is rebuilt only when pyproject.toml changes.
$(STAMP): pyproject.toml
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }
	@java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])' || { \
	  echo "installing Java 17 for Spark (Debian's openjdk-17-jre-headless)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	@command -v pg_ctl >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  echo "installing PostgreSQL for the CDC tests (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server for the cache sink's tests and demo (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

lint: install
	$(BIN)/ruff check riverbed tests benchmarks
	$(BIN)/ruff format --check riverbed tests benchmarks

typecheck: install
	$(BIN)/mypy

test: install lint typecheck
	$(BIN)/pytest

demo: install
	$(BIN)/python -m riverbed.demo

bench: install
	$(BIN)/python benchmarks/broker_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
