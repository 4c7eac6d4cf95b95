"""Shared fixtures: named tenants (tenant A and B), identities (alice and bob on A, carol on B),
a signed-command poster through the production WSGI entry (tests/support/entry.py); the browser tests' Daphne and staff users
come from tests/support/browser.py."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from apps.wire.client import Identity
from tests.support.entry import HOST_A, HOST_B, Poster

pytest_plugins = ["tests.support.clock", "tests.support.browser", "tests.support.operators"]


@pytest.fixture
def tenant_a(db):
    from apps.tenants.services import tenant_create

    return tenant_create(slug="tenant-a", domain=HOST_A, name="Tenant A")


@pytest.fixture
def tenant_b(db):
    from apps.tenants.services import tenant_create

    return tenant_create(slug="tenant-b", domain=HOST_B, name="Tenant B")


@pytest.fixture
def alice(tenant_a) -> Identity:
    return Identity.create("alice", tenant_a.did)


@pytest.fixture
def bob(tenant_a) -> Identity:
    return Identity.create("bob", tenant_a.did)


@pytest.fixture
def carol(tenant_b) -> Identity:
    return Identity.create("carol", tenant_b.did)


@pytest.fixture
def post_a(tenant_a) -> Poster:
    return Poster(HOST_A)


@pytest.fixture
def post_b(tenant_b) -> Poster:
    return Poster(HOST_B)


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run `fn` in the test thread, then its on-commit callbacks (pushes, group messages), as a commit
    would; for async tests of consumers."""

    async def call(fn):
        def inner():
            with django_capture_on_commit_callbacks(execute=True):
                return fn()

        return await sync_to_async(inner)()

    return call


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix():
    """pytest-django's own xdist suffix, not added: tests/support/xdist_worker.py already named each
    worker's test database."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `pytest -n N --dist loadgroup` (`make test PYTEST_WORKERS=N`), in each worker: a module is
    one unit of work, so its module-scoped servers start once; every test on the warm Spark engine is
    one unit, so one worker starts one engine and never runs two Spark tests at once. That unit comes
    first, then the container modules (the longest modules): with --no-loadscope-reorder units are
    handed out in this order, so no long unit is the tail that one worker runs while the other idles."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        group = "spark" if "spark_engine" in item.fixturenames else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(
        key=lambda item: 0 if "spark_engine" in item.fixturenames else 1 if item.get_closest_marker("containers") else 2
    )
