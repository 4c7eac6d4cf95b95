"""The files on the path of one request, entry to write (tests/support/request_path.py;
scripts/request_path.py prints them). TARGETS are the goal (8 for a Decentrl TWO_WAY_PRIVATE
`POST /`, 10 for a DIDComm v2 or v1 forward); LIMITS what the path is now, so that a longer one
fails here: lower a limit when the path gets shorter, down to its target. TWO_WAY_PRIVATE's counts
apps/messaging/replay.py, the one replay rule of every front door (its window, and its claim consumed
whatever happens)."""

from __future__ import annotations

import pytest

from tests.conftest import HOST_A
from tests.support.request_path import FORWARD_V1, FORWARD_V2, TWO_WAY_PRIVATE, measure

TARGETS = {TWO_WAY_PRIVATE: 8, FORWARD_V2: 10, FORWARD_V1: 10}
LIMITS = {TWO_WAY_PRIVATE: 15, FORWARD_V2: 19, FORWARD_V1: 18}


@pytest.fixture
def paths(transactional_db, settings):
    from apps.tenants.services import tenant_create
    from mediator_project.wsgi import application

    settings.MEDIATOR_TENANT_CACHE_SECONDS = 5  # production's default: the caches are on the path
    tenant = tenant_create(slug="tenant-a", domain=HOST_A, name="Tenant A")
    return measure(application, tenant, HOST_A)


def test_each_request_passes_few_files_from_the_entry_to_its_write(paths):
    for kind, files in paths.items():
        print(f"{kind}: {len(files)} files (target {TARGETS[kind]})")
        for name, functions in files.items():
            print(f"  {name}: {', '.join(functions)}")
    assert {kind: len(files) for kind, files in paths.items() if len(files) > LIMITS[kind]} == {}
    assert all(TARGETS[kind] <= LIMITS[kind] for kind in paths)
