# Two entry points: `make run` starts a broker, `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Most tests wait on brokers, ZooKeeper and clients rather than compute, so two pytest-xdist
# workers halve the wall time even on two cores (three on two cores made the cluster tests'
# short timeouts flaky); PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= 2

.PHONY: run test lint bench clean

# `make run` needs only the broker and the manager; the test and benchmark extras (the Java
# client tests' wheel alone is 200 MB) are installed by the targets that use them.
RUN_STAMP := $(VENV)/.installed-run

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[manager]'
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install -q -e '.[test,bench,manager]'
	touch $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/kaflet broker $(ARGS)

test: $(STAMP)
	scripts/system-packages --ensure
	scripts/connect-jars --ensure
	$(BIN)/ruff check kaflet tests benchmarks
	$(BIN)/mypy kaflet
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check kaflet tests benchmarks
	$(BIN)/mypy kaflet

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py $(ARGS)

clean:
	rm -rf $(VENV) data .cache
