"""Two tenants on one deployment see nothing of each other: registration, contracts, pending
events, stored events and DID documents (alice and bob on tenant A, carol on tenant B)."""

from __future__ import annotations

import pytest

from apps.messaging.models import Contract, PendingEvent, StoredEvent
from apps.wire.did import parse_mediator_document
from tests.conftest import HOST_A, HOST_B
from tests.support.registration import contract_both_ways, register

UNAUTHORIZED = (401, {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"})

ADMIN_COMMANDS = [
    {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"},
    {"type": "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", "communication_contract_ids": []},
    {"type": "QUERY_COMMUNICATION_CONTRACTS"},
    {"type": "QUERY_PENDING_EVENTS"},
    {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": []},
    {"type": "QUERY_EVENTS"},
    {
        "type": "SAVE_EVENTS",
        "events": [{"sender_did": "did:x", "recipient_did": "did:y", "timestamp": 1, "payload": "p"}],
    },
    {"type": "UPDATE_EVENT_TAGS", "events": []},
]


@pytest.mark.parametrize("payload", ADMIN_COMMANDS, ids=lambda p: p["type"])
def test_an_identity_registered_on_a_gets_unauthorized_command_on_b(post_a, post_b, tenant_a, tenant_b, alice, payload):
    register(post_a, alice, tenant_a)
    assert post_b.command(alice, payload, recipient_did=tenant_b.did) == UNAUTHORIZED
    # Addressing tenant A's DID through tenant B's host does not help either.
    assert post_b.command(alice, payload, recipient_did=tenant_a.did) == UNAUTHORIZED
    assert StoredEvent.objects.count() == 0


def test_registration_is_per_tenant(post_a, post_b, tenant_a, tenant_b, alice, carol):
    register(post_a, alice, tenant_a)
    register(post_b, carol, tenant_b)
    # A registration with A cannot be requested through B's host: A's DID is not registered on B.
    status, body = post_b.command(
        alice,
        {
            "type": "REQUEST_COMMUNICATION_CONTRACT",
            "encrypted_contract_request": "AAAA",
            "requestor_ephemeral_public_key": "A" * 43,
        },
        recipient_did=tenant_a.did,
    )
    assert (status, body) == (404, {"type": "ERROR", "code": "RECIPIENT_NOT_REGISTERED"})
    assert set(Contract.objects.filter(tenant=tenant_a).values_list("owner_did", flat=True)) == {alice.did}
    assert set(Contract.objects.filter(tenant=tenant_b).values_list("owner_did", flat=True)) == {carol.did}
    # Carol, registered on B only, is refused on A.
    assert post_a.command(carol, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did) == UNAUTHORIZED


def test_a_registration_request_encrypted_to_a_does_not_open_on_b(post_b, tenant_a, tenant_b, alice):
    import time

    from apps.wire import contract as wc

    req = wc.build_request(
        requestor_did=alice.did,
        recipient_did=tenant_b.did,
        recipient_prekey=bytes(tenant_a.prekey_public),
        signing=alice.signing,
        expires_at=int(time.time()) + 3600,
    )
    status, body = post_b.command(
        alice,
        {
            "type": "REQUEST_COMMUNICATION_CONTRACT",
            "encrypted_contract_request": req.encrypted,
            "requestor_ephemeral_public_key": req.ephemeral_public_b64,
        },
        recipient_did=tenant_b.did,
    )
    assert (status, body) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
    assert Contract.objects.count() == 0


def test_contracts_pending_and_stored_events_stay_on_their_tenant(post_a, post_b, tenant_a, tenant_b, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, bob, alice, tenant_a)
    assert post_a.command(bob, "blob-for-alice", recipient_did=alice.did, channel="TWO_WAY_PRIVATE")[0] == 200
    event = {
        "sender_did": alice.did,
        "recipient_did": bob.did,
        "timestamp": 1_700_000_000_000,
        "payload": "sealed",
        "encrypted_tags": ["t1"],
    }
    assert post_a.command(alice, {"type": "SAVE_EVENTS", "events": [event]}, recipient_did=tenant_a.did)[0] == 200
    a_event_id = str(StoredEvent.objects.get(tenant=tenant_a).public_id)
    a_pending_id = str(PendingEvent.objects.get(tenant=tenant_a).public_id)

    # Alice registers on B as well: B shows her only what she has on B.
    register(post_b, alice, tenant_b)
    status, body = post_b.command(alice, {"type": "QUERY_COMMUNICATION_CONTRACTS"}, recipient_did=tenant_b.did)
    contracts = body["payload"]["communication_contracts"]
    assert status == 200 and len(contracts) == 1
    assert contracts[0]["signed_communication_contract"]["communication_contract"]["recipient_did"] == tenant_b.did
    status, body = post_b.command(alice, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_b.did)
    assert (status, body["payload"]["pending_events"], body["payload"]["pagination"]["total"]) == (200, [], 0)
    status, body = post_b.command(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_b.did)
    assert (status, body["payload"]["events"]) == (200, [])
    status, body = post_b.command(
        alice, {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["t1"]}}, recipient_did=tenant_b.did
    )
    assert body["payload"]["events"] == []

    # Acknowledging or retagging A's ids through B touches nothing on A.
    post_b.command(
        alice, {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": [a_pending_id]}, recipient_did=tenant_b.did
    )
    post_b.command(
        alice,
        {"type": "UPDATE_EVENT_TAGS", "events": [{"event_id": a_event_id, "encrypted_tags": ["x"]}]},
        recipient_did=tenant_b.did,
    )
    assert PendingEvent.objects.get(public_id=a_pending_id).acknowledged_at is None
    assert StoredEvent.objects.get(public_id=a_event_id).encrypted_tags == ["t1"]

    # A private event for alice cannot be delivered through B (bob has no contract there).
    status, body = post_b.command(bob, "blob", recipient_did=alice.did, channel="TWO_WAY_PRIVATE")
    assert (status, body) == (404, {"type": "ERROR", "code": "COMMUNICATION_CONTRACT_NOT_FOUND"})
    assert PendingEvent.objects.filter(tenant=tenant_b).count() == 0

    # And on A, alice still sees exactly her A data.
    status, body = post_a.command(alice, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    assert [e["id"] for e in body["payload"]["pending_events"]] == [a_pending_id]


def test_private_events_to_an_identity_not_registered_on_this_tenant_are_refused(
    post_b, tenant_a, tenant_b, alice, bob, post_a
):
    register(post_a, alice, tenant_a)
    status, body = post_b.command(bob, "blob", recipient_did=alice.did, channel="TWO_WAY_PRIVATE")
    assert (status, body) == (404, {"type": "ERROR", "code": "RECIPIENT_NOT_REGISTERED"})


def test_each_host_serves_its_own_did_document(client, tenant_a, tenant_b):
    docs = {}
    for host, tenant in ((HOST_A, tenant_a), (HOST_B, tenant_b)):
        for path in ("/", "/.well-known/did.json"):
            resp = client.get(path, HTTP_HOST=host)
            assert resp.status_code == 200
            resolved = parse_mediator_document(resp.json())
            assert resolved.did == tenant.did
            assert resolved.signing_key == bytes(tenant.signing_public)
            docs[host] = resolved
    assert docs[HOST_A].signing_key != docs[HOST_B].signing_key
    assert docs[HOST_A].pre_key != docs[HOST_B].pre_key


def test_an_unknown_host_is_unknown_mediator(client, tenant_a):
    resp = client.get("/", HTTP_HOST="nobody.test")
    assert (resp.status_code, resp.json()) == (404, {"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})
