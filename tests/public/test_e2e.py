"""Public channels end to end over a real Daphne process (issue 7): a publisher registers,
publishes and deletes through the client library; an anonymous reader fetches `GET /public/<did>`
over a socket with CORS, ETag and 304, and a row tampered in the database fails verification."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from apps.wire.client import Identity, MediatorClient
from apps.wire.public import PublicEventInvalid
from tests.support.servers import free_port, start_daphne

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def served(transactional_db, tmp_path):
    """Tenant A at 127.0.0.1:<port>, tenant B at localhost:<port>, one Daphne process."""
    from apps.tenants.services import tenant_create

    port = free_port()
    policy = {"rate_limit_per_did": 0, "rate_limit_per_ip": 0, "public_publish_per_minute": 100}
    tenant_create(slug="pub-a", domain=f"127.0.0.1:{port}", public_url=f"http://127.0.0.1:{port}", **policy)
    tenant_create(slug="pub-b", domain=f"localhost:{port}", public_url=f"http://localhost:{port}", **policy)
    server = start_daphne(tmp_path, port=port)
    a = MediatorClient(f"http://127.0.0.1:{port}")
    b = MediatorClient(f"http://localhost:{port}")
    try:
        yield server, a, b
    finally:
        a.close()
        b.close()
        server.stop()


def test_publish_read_verify_cache_and_delete_over_daphne(served):
    from apps.messaging.models import PublicEvent

    server, a, b = served
    alice = Identity.create("alice", a.did)
    a.register(alice)

    post = a.publish_public(alice, "blog", {"type": "blog.post", "data": {"title": "Hello, world 👋"}}, ["blog.post"])
    card = a.publish_public(alice, "profile", {"name": "Alice"}, ["profile"])

    # Anonymous reader, DID percent-encoded, CORS and caching headers on the wire.
    reader = httpx.Client(timeout=10)
    url = f"{server.url}/public/{quote(alice.did, safe='')}"
    r = reader.get(url, headers={"Origin": "https://feeds.example"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert [e["id"] for e in body["payload"]["public_events"]] == [card, post]
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 10, "total": 2}
    assert reader.get(url, headers={"If-None-Match": r.headers["etag"]}).status_code == 304
    # The DID unencoded gives the same bytes.
    assert reader.get(f"{server.url}/public/{alice.did}").content == r.content

    page = a.public_events(alice.did, channel_id="blog")
    assert [e["id"] for e in page.events] == [post] and page.verified == [True]
    assert page.events[0]["event"] == '{"type":"blog.post","data":{"title":"Hello, world 👋"}}'

    # Another tenant on the same process does not serve alice's feed.
    assert b.public_events(alice.did).events == []

    # The mediator (or its database) alters a stored event: the client refuses it.
    PublicEvent.objects.filter(public_id=post).update(event='{"type":"blog.post","data":{"title":"Buy now"}}')
    with pytest.raises(PublicEventInvalid):
        a.public_events(alice.did)
    assert a.public_events(alice.did, on_invalid="flag").verified == [True, False]

    assert a.delete_public_event(alice, post) == {"type": "SUCCESS"}
    assert [e["id"] for e in a.public_events(alice.did).events] == [card]
    assert reader.get(url, headers={"If-None-Match": r.headers["etag"]}).status_code == 200
    reader.close()
    assert "Traceback" not in server.log()
