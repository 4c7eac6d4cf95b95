"""Fixtures for the public-channel suite (DCTRL-0007): registered publishers, a signed-publish
helper, a reader for `GET /public/<did>`, and the client library wired in-process over WSGI.

The shared tenants are tests/support/commands.py's, with the per-DID/per-IP command limits of another issue
switched off (0 = off), so that only the public publish cap under test can refuse a command.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest

from apps.wire.client import Identity, MediatorClient
from apps.wire.public import sign_public_event
from tests.conftest import HOST_A, HOST_B
from tests.support import commands
from tests.support.entry import keep_test_connection
from tests.support.registration import register

# The tenants, their limits off (fixtures).
tenant_a, tenant_b = commands.tenant_a, commands.tenant_b


@pytest.fixture
def alice_reg(post_a, tenant_a, alice) -> Identity:
    """alice, registered with tenant A."""
    register(post_a, alice, tenant_a)
    return alice


@pytest.fixture
def bob_reg(post_a, tenant_a, bob) -> Identity:
    register(post_a, bob, tenant_a)
    return bob


@pytest.fixture
def carol_reg(post_b, tenant_b, carol) -> Identity:
    register(post_b, carol, tenant_b)
    return carol


class Publisher:
    """Sign and send ONE_WAY_PUBLIC commands through the Django test client."""

    def __init__(self, poster, tenant):
        self.poster = poster
        self.tenant = tenant

    def command(self, who: Identity, payload: dict, *, recipient_did: str | None = None, **kw):
        return self.poster.command(
            who, payload, recipient_did=recipient_did or self.tenant.did, channel="ONE_WAY_PUBLIC", **kw
        )

    def publish_event(self, who: Identity, public_event: dict, **kw):
        return self.command(who, {"type": "PUBLISH_PUBLIC_EVENT", "public_event": public_event}, **kw)

    def publish(
        self, who: Identity, channel_id: str = "blog", event="hello", tags=("blog.post",), timestamp=1_699_123_456, **kw
    ):
        ev = sign_public_event(who.signing, channel_id=channel_id, event=event, tags=tags, timestamp=timestamp)
        return self.publish_event(who, ev, **kw)

    def publish_ok(self, who: Identity, **kw) -> str:
        status, body = self.publish(who, **kw)
        assert status == 200, body
        assert set(body) == {"type", "payload"} and set(body["payload"]) == {"public_event_id"}
        return body["payload"]["public_event_id"]

    def delete(self, who: Identity, public_event_id: str, **kw):
        return self.command(who, {"type": "DELETE_PUBLIC_EVENT", "public_event_id": public_event_id}, **kw)


@pytest.fixture
def pub_a(post_a, tenant_a) -> Publisher:
    return Publisher(post_a, tenant_a)


@pytest.fixture
def pub_b(post_b, tenant_b) -> Publisher:
    return Publisher(post_b, tenant_b)


class Reader:
    """GET /public/<did> through the Django test client with a tenant's Host header."""

    def __init__(self, client, host: str):
        self.client = client
        self.host = host

    def get(self, did: str, *, encode: bool = True, params: dict | None = None, method: str = "get", **headers):
        path = "/public/" + (quote(did, safe="") if encode else did)
        resp = getattr(self.client, method)(path, data=params or {}, HTTP_HOST=self.host, **headers)
        return resp

    def json(self, did: str, **kw):
        resp = self.get(did, **kw)
        return resp.status_code, json.loads(resp.content)


@pytest.fixture
def read_a(client, tenant_a) -> Reader:
    return Reader(client, HOST_A)


@pytest.fixture
def read_b(client, tenant_b) -> Reader:
    return Reader(client, HOST_B)


@pytest.fixture
def wsgi_mediator_a(tenant_a):
    """The client library against tenant A in-process: httpx over the production WSGI entry, in the
    test's transaction (tests/support/entry.py keep_test_connection)."""
    from mediator_project.entry import protocol_application  # the production entry (Django set up by now)

    with keep_test_connection():
        http = httpx.Client(transport=httpx.WSGITransport(app=protocol_application()))
        try:
            yield MediatorClient(f"http://{HOST_A}", http=http)
        finally:
            http.close()
