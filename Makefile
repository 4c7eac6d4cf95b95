# The README's commands. `make run` serves the embedded default (its PostgreSQL included, scripts/with_postgres.py);
# `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
BIND ?= 127.0.0.1
export PYTHONPATH := $(CURDIR)

.PHONY: install run operator test lint format bench report clean

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
# name and a password. `make operator OPERATOR=olivia` skips the name prompt.
operator: install
	$(PY) scripts/with_postgres.py -- sh -c '$(PY) manage.py migrate --noinput -v0 && exec $(PY) manage.py createsuperuser $(if $(OPERATOR),--username $(OPERATOR))'

test: install
	scripts/ensure_services.sh
	$(PY) -m pytest $(PYTEST_ARGS)

# Lint, format, types and migrations: what .ci/run checks before `make test`. mypy covers the packages in
# MYPY_PATHS (strict where pyproject.toml says so); a package joins once it passes.
MYPY_PATHS := apps/wire apps/didcomm/core

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
