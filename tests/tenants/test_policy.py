"""Policy set by an operator (through the API) is what the command path enforces on that tenant only."""

from __future__ import annotations

import time

from apps.wire import contract as wc
from tests.support.registration import contract_both_ways, register

UNAUTHORIZED = (401, {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"})
INVALID = (400, {"type": "ERROR", "code": "INVALID_COMMAND"})


def _policy(api, slug: str, **policy) -> None:
    resp = api.patch(f"/api/v1/tenants/{slug}/", {"policy": policy}, format="json")
    assert resp.status_code == 200, resp.json()


def _request(who, tenant, lifetime_s: int) -> dict:
    req = wc.build_request(
        requestor_did=who.did,
        recipient_did=tenant.did,
        recipient_prekey=bytes(tenant.prekey_public),
        signing=who.signing,
        expires_at=int(time.time()) + lifetime_s,
    )
    return {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }


def test_closed_registration_and_the_identity_quota(api, post_a, post_b, tenant_a, tenant_b, alice, bob, carol):
    _policy(api, "tenant-a", registration_open=False)
    assert post_a.command(alice, _request(alice, tenant_a, 3600), recipient_did=tenant_a.did) == UNAUTHORIZED
    register(post_b, carol, tenant_b)  # tenant B is not affected

    _policy(api, "tenant-a", registration_open=True, max_identities=1)
    register(post_a, alice, tenant_a)
    register(post_a, alice, tenant_a)  # re-registering an identity does not count twice
    assert post_a.command(bob, _request(bob, tenant_a, 3600), recipient_did=tenant_a.did) == UNAUTHORIZED


def test_registration_lifetime_cap(api, post_a, tenant_a, alice):
    _policy(api, "tenant-a", max_registration_days=1)
    assert post_a.command(alice, _request(alice, tenant_a, 2 * 86_400), recipient_did=tenant_a.did) == INVALID
    status, body = post_a.command(alice, _request(alice, tenant_a, 86_000), recipient_did=tenant_a.did)
    assert (status, body["code"]) == (200, "MEDIATOR_REGISTRATION_SUCCESS")


def test_queue_cap_page_size_and_save_events_caps(api, post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, bob, alice, tenant_a)
    _policy(
        api,
        "tenant-a",
        pending_queue_cap=1,
        max_page_size=5,
        max_events_per_save=1,
        max_tags_per_event=1,
        max_tag_length=8,
    )

    assert post_a.command(bob, "one", recipient_did=alice.did, channel="TWO_WAY_PRIVATE")[0] == 200
    status, body = post_a.command(bob, "two", recipient_did=alice.did, channel="TWO_WAY_PRIVATE")
    assert (status, body) == (507, {"type": "ERROR", "code": "RECIPIENT_QUEUE_FULL"})

    query = {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 0, "page_size": 6}}
    assert post_a.command(alice, query, recipient_did=tenant_a.did) == INVALID
    query["pagination"]["page_size"] = 5
    assert post_a.command(alice, query, recipient_did=tenant_a.did)[0] == 200

    def event(tags):
        return {
            "sender_did": alice.did,
            "recipient_did": bob.did,
            "timestamp": 1,
            "payload": "p",
            "encrypted_tags": tags,
        }

    save = {"type": "SAVE_EVENTS", "events": [event([]), event([])]}
    assert post_a.command(alice, save, recipient_did=tenant_a.did) == INVALID
    for tags in (["a", "b"], ["123456789"]):
        assert (
            post_a.command(alice, {"type": "SAVE_EVENTS", "events": [event(tags)]}, recipient_did=tenant_a.did)
            == INVALID
        )
    assert (
        post_a.command(alice, {"type": "SAVE_EVENTS", "events": [event(["12345678"])]}, recipient_did=tenant_a.did)[0]
        == 200
    )


def test_body_cap(api, post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    _policy(api, "tenant-a", max_body_bytes=2048)
    big = {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["x" * 100] * 30}}
    status, body = post_a.command(alice, big, recipient_did=tenant_a.did)
    assert (status, body) == (413, {"type": "ERROR", "code": "PAYLOAD_TOO_LARGE"})
