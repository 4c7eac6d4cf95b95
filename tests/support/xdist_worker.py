"""Loaded before Django's settings (pyproject's addopts `-p`): every pytest run gets a test database of
its own. Without MEDIATOR_TEST_DB_NAME, a checkout's runs use `test_mediator_<hash of its path>`, so two
checkouts on one machine (a CI clone beside a developer's tree) never share one; under pytest-xdist each
worker adds its id. The name also sets the channel-layer prefix (settings_test.py), and the servers a
test starts inherit the variable."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]
os.environ.setdefault("MEDIATOR_TEST_DB_NAME", f"test_mediator_{hashlib.sha1(str(_CHECKOUT).encode()).hexdigest()[:8]}")
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["MEDIATOR_TEST_DB_NAME"] = f"{os.environ['MEDIATOR_TEST_DB_NAME']}_{worker}"
