# The two commands of the README: `make run` (a broker on 127.0.0.1:5672, data in ./data) and
# `make test` (the whole suite). Both install what they need on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

# The unit tests of the packages whose hot-path modules are compiled (amqp_broker_native): `make
# test` runs them a second time from the Python source (AMQP_BROKER_PURE=1).
PURE_TESTS := amqp_broker/protocol amqp_broker/core queues routing amqp_broker_native \
	cluster/tests/test_raft_codec.py cluster/tests/test_raft_node.py cluster/tests/test_raft_fifo.py \
	cluster/tests/test_raft_sim.py cluster/tests/test_quorum_group.py cluster/tests/test_quorum_remote.py \
	cluster/tests/test_driver.py cluster/tests/test_codec.py cluster/tests/test_links.py
# pytest-xdist: `make test` runs its tests in two worker processes (this machine's two cores; most
# tests wait on brokers more than they compute). loadgroup: a test file stays on one worker, the
# Spark tests together, the fault harness's runs one by one (conftest.py, xdist_group).
# `make test XDIST=` runs them in one process.
XDIST ?= -n 2 --dist loadgroup

.PHONY: run test lint unit interop bench clean cluster native

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Rebuild the compiled hot path when a compiled module's source changed since the install built it
# (`python -m amqp_broker_native` exits 2 then); without a build (no C compiler) nothing happens.
native: $(STAMP)
	@$(PY) -m amqp_broker_native; test $$? -ne 2 || $(PY) -m pip install -q --no-deps -e .

run: $(STAMP) native
	$(PY) -m amqp_broker $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	@# the docs site must build without a warning (broken links, a setting without a description);
	@# into a temporary directory, removed afterwards. NO_MKDOCS_2_WARNING: Material's banner.
	d=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet \
		--site-dir "$$d"; rc=$$?; rm -rf "$$d"; exit $$rc

test: $(STAMP) native
	bash interop_tests/setup.sh
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)
	AMQP_BROKER_PURE=1 $(PY) -m pytest $(XDIST) $(PURE_TESTS) $(PYTEST_ARGS)

unit: $(STAMP)
	$(PY) -m pytest amqp_broker routing queues $(PYTEST_ARGS)

cluster: $(STAMP) native
	$(PY) -m amqp_broker.clustering.local $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.run $(ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache build amqp_broker_native/_lib
