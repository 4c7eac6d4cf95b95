# The README's commands. `make run` serves the embedded default (its PostgreSQL included, scripts/with_postgres.py);
# `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
BIND ?= 127.0.0.1
export PYTHONPATH := $(CURDIR)

.PHONY: install run operator test clock-test lint format bench report clean spark-cluster-test

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	@touch $@

install: $(VENV)/.installed

run: install
	@$(PY) scripts/port_free.py $(BIND) $(PORT)
	@PORT=$(PORT) exec $(PY) scripts/with_postgres.py -- scripts/run_embedded.sh $(BIND) $(PORT)

# The first operator (a superuser) for the console at /admin/ and the operator API; asks for a
# name, an optional email and a password. `make operator OPERATOR=olivia` skips the name prompt.
# Without a terminal (a script, a pipe) it reads DJANGO_SUPERUSER_USERNAME and DJANGO_SUPERUSER_PASSWORD
# (DJANGO_SUPERUSER_EMAIL optional) and fails (non-zero) when they are missing.
operator: install
	$(PY) scripts/with_postgres.py -- sh -c '$(PY) manage.py migrate --noinput -v0 && exec $(PY) manage.py create_operator $(if $(OPERATOR),--username $(OPERATOR))'

# The whole suite: the simulated cluster's drills (short), the Spark standalone cluster test, then pytest
# (last, so its closing line ends the output). `make test PYTEST_ARGS=tests/x` narrows only the pytest run.
# pytest runs on PYTEST_WORKERS pytest-xdist workers, each a suite of its own
# (tests/support/xdist_worker.py: its test database and Redis prefix; a module is one unit of work, the
# Spark tests one more, handed out first: tests/conftest.py): ~12 instead of ~18 minutes on 2 cores.
# PYTEST_WORKERS=0 runs it in one process. It names its 15 slowest tests, where the suite's time goes.
PYTEST_WORKERS ?= 2
test: install
	scripts/ensure_services.sh
	$(MAKE) cluster-ci
	$(MAKE) clock-test
	MEDIATOR_SPARK_CLUSTER=1 $(PY) -m pytest tests/usage/test_spark_cluster.py
	$(PY) -m pytest --durations=15 --ignore=tests/usage/test_spark_cluster.py $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder) $(PYTEST_ARGS)

# The tests whose product logic reads the calendar ("today", "yesterday", a default range, retention),
# run with the clock a year ahead and a year back (tests/support/clock.py, docs/architecture.md "Tests
# and the clock"): a test that asserts what only holds on some days fails here on every day. One process
# each (two xdist workers cost more in start-up than they save here): ~1.5 min each on the shared 2-core box.
CLOCK_TESTS := tests/usage/test_empty_states.py tests/usage/test_pages_and_api.py tests/usage/test_services.py \
	tests/console/test_details.py tests/console/test_frame.py tests/tenants/test_time_format.py \
	tests/usage/test_browser_empty_states.py tests/console/test_browser_console.py
clock-test: install
	scripts/ensure_services.sh
	$(PY) -m pytest $(CLOCK_TESTS) -m "not spark" -p no:xdist --clock-shift=365
	$(PY) -m pytest $(CLOCK_TESTS) -m "not spark" -p no:xdist --clock-shift=-365

# Lint, format, types and migrations: what .ci/run checks before `make test`. mypy checks all product code,
# strict on apps/wire and apps/didcomm/core, the default level elsewhere (pyproject.toml [tool.mypy]).
MYPY_PATHS := apps mediator_project spark_reports

# A Spark standalone cluster (master + 2 workers, scripts/spark_cluster.py) runs a report with a
# worker killed mid-report and must publish exactly local mode's figures. Four more JVMs, so `make test`
# runs it on its own before the suite; this target runs only it.
spark-cluster-test: install
	scripts/ensure_services.sh
	MEDIATOR_SPARK_CLUSTER=1 $(PY) -m pytest tests/usage/test_spark_cluster.py $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(MYPY_PATHS)
	$(PY) scripts/with_postgres.py -- $(PY) manage.py makemigrations --check --dry-run

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The benchmark suite (docs/benchmarks.md): `make bench QUICK=1` runs one short round of each part.
# ACA-Py and Credo, the peers it compares with, are installed by their scripts (as for the e2e tests).
bench: install
	scripts/ensure_services.sh
	-scripts/ensure_extra_acapy.sh
	-scripts/ensure_extra_credo.sh
	$(PY) -m bench.run_standard $(if $(QUICK),--quick) $(BENCH_ARGS)

report: install
	$(PY) scripts/with_postgres.py -- $(PY) manage.py run_usage_report

clean:
	rm -rf var/ .pytest_cache .ruff_cache

# The application image (Containerfile, docs/containers.md) from wheels made here, tagged IMAGE
# (localhost/mediator:latest). BASE_IMAGE=… picks the base (default python:3.11-slim-bookworm);
# LOCAL_BASE=1 builds a Debian base with debootstrap instead, for a host that reaches no registry;
# SPARK=1 adds the reports' engine image (Containerfile.spark). `make image-test` runs the image's
# test (tests/containers/: compose, migrations, a story, a SIGKILL; the monitoring rules).
.PHONY: image image-test
image:
	$(if $(IMAGE),IMAGE=$(IMAGE)) $(if $(BASE_IMAGE),BASE_IMAGE=$(BASE_IMAGE)) scripts/build_image.sh

image-test: install
	scripts/ensure_services.sh
	$(PY) -m pytest tests/containers -p no:xdist $(PYTEST_ARGS)

# The product as a cluster on one machine (docs/serving.md, "Past one box"): network namespaces
# mci-* with HAProxy, two app nodes, Patroni/etcd/PostgreSQL ×3 and Redis. Root only.
# cluster-drill brings one up if none is, runs scripts/cluster/drill.py (DRILL_ARGS, e.g.
# "--only app --seconds 20") and leaves it up; cluster-down removes everything it made.
# cluster-ci (.ci/run): a fresh cluster, the four drills shortened, the cluster removed whatever
# their outcome; fails like cluster-drill.
.PHONY: cluster cluster-down cluster-drill cluster-ci
cluster: install
	scripts/cluster/up.sh

cluster-down:
	scripts/cluster/down.sh

cluster-drill: install
	@ip netns list | grep -q '^mci-client' || scripts/cluster/up.sh
	ip netns exec mci-client env PYTHONPATH=$(CURDIR) $(PY) scripts/cluster/drill.py $(DRILL_ARGS)

cluster-ci: install
	scripts/cluster/down.sh
	scripts/cluster/up.sh && ip netns exec mci-client env PYTHONPATH=$(CURDIR) $(PY) scripts/cluster/drill.py \
	  --warmup 2 --seconds 8 --after 3 --no-final-restore; rc=$$?; scripts/cluster/down.sh; exit $$rc
