"""Loaded before Django's settings (pyproject's addopts `-p`): under pytest-xdist each worker is a suite
of its own, as two `make test` runs on one machine are. Its MEDIATOR_TEST_DB_NAME gets the worker's id, so
its test database, its channel-layer prefix (settings_test.py) and the servers it starts (they inherit the
variable) are its own."""

from __future__ import annotations

import os

if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["MEDIATOR_TEST_DB_NAME"] = f"{os.environ.get('MEDIATOR_TEST_DB_NAME') or 'test_mediator'}_{worker}"
