"""Shared fixtures: named tenants (tenant A and B), identities (alice and bob on A, carol on B),
a signed-command poster for the Django test client, and real Daphne servers."""

from __future__ import annotations

import json

import pytest

from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity

HOST_A = "a.mediator.test"
HOST_B = "b.mediator.test"


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


class Poster:
    """POST / through the Django test client with a tenant's Host header."""

    def __init__(self, client, host: str):
        self.client = client
        self.host = host

    def raw(self, body: bytes | str, **extra):
        data = body.encode("utf-8") if isinstance(body, str) else body
        resp = self.client.post("/", data=data, content_type="application/json", HTTP_HOST=self.host, **extra)
        return resp.status_code, json.loads(resp.content)

    def send(self, envelope: dict):
        return self.raw(canonical_bytes(envelope))

    def command(self, who: Identity, payload, *, recipient_did: str, **kw):
        return self.send(who.sign_command(recipient_did=recipient_did, payload=payload, **kw))


@pytest.fixture
def post_a(client, tenant_a) -> Poster:
    return Poster(client, HOST_A)


@pytest.fixture
def post_b(client, tenant_b) -> Poster:
    return Poster(client, HOST_B)
