# The two commands of the README: `make run` (a broker on 127.0.0.1:5672, data in ./data) and
# `make test` (the whole suite). Both install what they need on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test lint unit interop bench clean cluster

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m amqp_broker $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

test: $(STAMP)
	bash interop_tests/setup.sh
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(PY) -m pytest amqp_broker routing queues $(PYTEST_ARGS)

cluster: $(STAMP)
	$(PY) -m amqp_broker.clustering.local $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.run $(ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache
