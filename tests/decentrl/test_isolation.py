"""Cross-tenant isolation: two mediators hosted by one deployment share nothing but the database.
alice and bob live on tenant A, carol on tenant B."""

from __future__ import annotations

import json
import time

from apps.decentrl import storage
from apps.decentrl.models import Nonce
from apps.decentrl.storage import NonceClaim
from apps.messaging.models import Contract, ContractRequest, PendingEvent, StoredEvent
from apps.wire import contract as wc
from apps.wire.did import parse_decentrl
from tests.conftest import HOST_A, HOST_B
from tests.support.commands import data_counts, envelope, err
from tests.support.registration import contract_both_ways, register, signed_contract

EMPTY_PAGE = {"page": 0, "page_size": 10, "total": 0}


def reg_payload(req):
    return {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }


def test_an_identity_registered_on_a_is_not_registered_on_b(post_a, post_b, tenant_a, tenant_b, alice, carol):
    register(post_a, alice, tenant_a)
    before = data_counts()
    for payload in (
        {"type": "QUERY_EVENTS"},
        {"type": "QUERY_PENDING_EVENTS"},
        {"type": "QUERY_COMMUNICATION_CONTRACTS"},
        {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"},
        {
            "type": "SAVE_EVENTS",
            "events": [{"sender_did": alice.did, "recipient_did": carol.did, "timestamp": 1, "payload": "p"}],
        },
    ):
        assert post_b.command(alice, payload, recipient_did=tenant_b.did) == (401, err("UNAUTHORIZED_COMMAND")), payload
    # Addressed to tenant A's DID but sent to B: B is not that mediator.
    assert post_b.command(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_a.did) == (
        401,
        err("UNAUTHORIZED_COMMAND"),
    )
    # As a recipient alice is not registered on B either.
    assert post_b.command(carol, "blob", recipient_did=alice.did, channel="TWO_WAY_PRIVATE") == (
        404,
        err("RECIPIENT_NOT_REGISTERED"),
    )
    assert data_counts() == before


def test_nothing_of_b_is_visible_from_a(post_a, post_b, tenant_a, tenant_b, alice, bob, carol):
    """The same DID registered on both tenants sees two separate stores."""
    register(post_a, alice, tenant_a)
    register(post_b, alice, tenant_b)
    register(post_b, carol, tenant_b)
    # On B: alice gets a contract request, a pending event and stored events.
    req = wc.build_request(
        requestor_did=carol.did,
        recipient_did=alice.did,
        recipient_prekey=parse_decentrl(alice.did).pre_key,
        signing=carol.signing,
        expires_at=int(time.time()) + 3600,
    )
    assert post_b.command(carol, reg_payload(req), recipient_did=alice.did) == (
        200,
        {"type": "SUCCESS", "code": "REQUESTED"},
    )
    contract_both_ways(post_b, carol, alice, tenant_b)
    assert post_b.command(carol, "for alice on B", recipient_did=alice.did, channel="TWO_WAY_PRIVATE")[0] == 200
    events = [
        {
            "sender_did": carol.did,
            "recipient_did": alice.did,
            "timestamp": 5,
            "payload": "on B",
            "encrypted_tags": ["t"],
        }
    ]
    assert post_b.command(alice, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_b.did) == (
        200,
        {"type": "SUCCESS"},
    )
    assert post_b.command(carol, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_b.did) == (
        200,
        {"type": "SUCCESS"},
    )

    def q(poster, tenant, payload):
        status, body = poster.command(alice, payload, recipient_did=tenant.did)
        assert status == 200, body
        return body["payload"]

    assert q(post_a, tenant_a, {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"}) == {
        "pending_communication_contract_requests": [],
        "pagination": EMPTY_PAGE,
    }
    assert q(post_a, tenant_a, {"type": "QUERY_PENDING_EVENTS"}) == {"pending_events": [], "pagination": EMPTY_PAGE}
    assert q(post_a, tenant_a, {"type": "QUERY_EVENTS"}) == {"events": [], "pagination": EMPTY_PAGE}
    assert q(post_a, tenant_a, {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["t"]}}) == {
        "events": [],
        "pagination": EMPTY_PAGE,
    }
    contracts_a = q(post_a, tenant_a, {"type": "QUERY_COMMUNICATION_CONTRACTS"})["communication_contracts"]
    assert [c["signed_communication_contract"]["communication_contract"]["recipient_did"] for c in contracts_a] == [
        tenant_a.did
    ]
    assert (
        q(post_a, tenant_a, {"type": "QUERY_COMMUNICATION_CONTRACTS", "filter": {"did": carol.did}})[
            "communication_contracts"
        ]
        == []
    )

    # ... while B shows it all
    assert q(post_b, tenant_b, {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"})["pagination"]["total"] == 1
    assert q(post_b, tenant_b, {"type": "QUERY_PENDING_EVENTS"})["pagination"]["total"] == 1
    assert q(post_b, tenant_b, {"type": "QUERY_EVENTS"})["pagination"]["total"] == 1

    # Acknowledging and updating B's ids through A changes nothing on B.
    pe = PendingEvent.objects.get(tenant=tenant_b)
    cr = ContractRequest.objects.get(tenant=tenant_b)
    se = StoredEvent.objects.get(tenant=tenant_b, owner_did=alice.did)
    for payload in (
        {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": [str(pe.public_id)]},
        {
            "type": "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS",
            "communication_contract_ids": [str(cr.public_id)],
        },
        {"type": "UPDATE_EVENT_TAGS", "events": [{"event_id": str(se.public_id), "encrypted_tags": ["x"]}]},
    ):
        assert post_a.command(alice, payload, recipient_did=tenant_a.did) == (200, {"type": "SUCCESS"})
    pe.refresh_from_db()
    cr.refresh_from_db()
    se.refresh_from_db()
    assert (pe.acknowledged_at, pe.payload) == (None, "for alice on B")
    assert cr.acknowledged_at is None
    assert (se.encrypted_tags, se.processed) == (["t"], False)


def test_a_contract_saved_on_b_does_not_authorize_delivery_on_a(post_a, post_b, tenant_a, tenant_b, alice, bob, carol):
    register(post_a, bob, tenant_a)
    register(post_b, bob, tenant_b)
    contract_both_ways(post_b, alice, bob, tenant_b)  # bob owns the contract on B only
    assert post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        404,
        err("COMMUNICATION_CONTRACT_NOT_FOUND"),
    )
    assert post_b.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    assert PendingEvent.objects.get().tenant_id == tenant_b.pk


def test_a_contract_response_on_b_is_stored_on_b_only(post_a, post_b, tenant_a, tenant_b, alice, carol):
    register(post_b, carol, tenant_b)
    register(post_a, alice, tenant_a)
    signed, _, _ = signed_contract(carol, alice)
    payload = {"type": "COMMUNICATION_CONTRACT_RESPONSE", "signed_communication_contract": signed}
    # alice is not registered on B: B refuses to hold it for her
    assert post_b.command(carol, payload, recipient_did=alice.did) == (404, err("RECIPIENT_NOT_REGISTERED"))
    assert post_a.command(alice, payload, recipient_did=carol.did) == (404, err("RECIPIENT_NOT_REGISTERED"))
    assert post_b.command(alice, payload, recipient_did=carol.did) == (200, {"type": "SUCCESS"})
    assert list(
        Contract.objects.filter(requestor_did=carol.did, recipient_did=alice.did).values_list("tenant_id", "owner_did")
    ) == [(tenant_b.pk, carol.did)]


def test_the_did_documents_of_a_and_b_differ_by_host_and_keys(client, tenant_a, tenant_b):
    doc_a = json.loads(client.get("/", HTTP_HOST=HOST_A).content)
    doc_b = json.loads(client.get("/", HTTP_HOST=HOST_B).content)
    assert (doc_a["id"], doc_b["id"]) == ("did:web:a.mediator.test", "did:web:b.mediator.test")
    assert doc_a["service"][0]["serviceEndpoint"] == {"uri": "http://a.mediator.test"}
    assert doc_b["service"][0]["serviceEndpoint"] == {"uri": "http://b.mediator.test"}
    assert doc_a["verificationMethod"][0]["publicKeyMultibase"] != doc_b["verificationMethod"][0]["publicKeyMultibase"]
    assert doc_a["keyAgreement"][0]["publicKeyMultibase"] != doc_b["keyAgreement"][0]["publicKeyMultibase"]
    assert json.loads(client.get("/.well-known/did.json", HTTP_HOST=HOST_B).content) == doc_b


def test_a_registration_encrypted_to_a_prekey_sent_to_b_is_invalid(post_b, tenant_a, tenant_b, carol):
    for recipient in (tenant_a.did, tenant_b.did):
        req = wc.build_request(
            requestor_did=carol.did,
            recipient_did=recipient,
            recipient_prekey=bytes(tenant_a.prekey_public),
            signing=carol.signing,
            expires_at=int(time.time()) + 3600,
        )
        before = data_counts()
        assert post_b.command(carol, reg_payload(req), recipient_did=tenant_b.did) == (400, err("INVALID_COMMAND"))
        assert data_counts() == before


def test_a_registration_on_a_names_a_and_is_signed_with_a_key(post_a, tenant_a, tenant_b, alice):
    signed = register(post_a, alice, tenant_a)
    assert signed["communication_contract"]["recipient_did"] == tenant_a.did
    b_resolver = lambda d: tenant_b.resolved() if d == tenant_a.did else parse_decentrl(d)  # noqa: E731
    try:
        wc.verify_signed_contract(signed, b_resolver, now_s=int(time.time()))
    except wc.ContractSignaturesInvalid:
        pass
    else:
        raise AssertionError("tenant B's key verified tenant A's signature")


def test_a_nonce_used_on_one_tenant_is_used_on_every_tenant(post_a, post_b, tenant_a, tenant_b, alice):
    """One nonce store for the deployment: no envelope names its mediator, so A's command must not be
    accepted again by B (docs/protocol-notes.md, "Nonces")."""
    register(post_a, alice, tenant_a)
    register(post_b, alice, tenant_b)
    env_a = envelope(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_a.did)
    env_b = envelope(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_b.did, nonce=env_a["header"]["nonce"])
    assert post_a.send(env_a)[0] == 200
    assert post_b.send(env_b) == (401, err("DUPLICATE_NONCE"))
    assert post_b.send(env_a) == (401, err("DUPLICATE_NONCE"))
    assert post_a.send(env_a) == (401, err("DUPLICATE_NONCE"))
    nonce = env_a["header"]["nonce"]
    assert list(Nonce.objects.filter(sender_did=alice.did, nonce=nonce).values_list("tenant_id", flat=True)) == [
        tenant_a.pk
    ]


def test_a_private_message_accepted_by_a_is_refused_by_b_when_the_recipient_is_on_both(
    post_a, post_b, tenant_a, tenant_b, alice, bob
):
    """The field finding: a TWO_WAY_PRIVATE command names sender and recipient but no mediator, so
    with bob registered at both tenants A's accepted command was delivered once more by B."""
    for poster, tenant in ((post_a, tenant_a), (post_b, tenant_b)):
        register(poster, alice, tenant)
        register(poster, bob, tenant)
        contract_both_ways(poster, alice, bob, tenant)
    command = alice.sign_command(recipient_did=bob.did, payload="blob", channel="TWO_WAY_PRIVATE")
    assert post_a.send(command)[0] == 200
    assert post_b.send(command) == (401, err("DUPLICATE_NONCE"))
    assert PendingEvent.objects.filter(tenant=tenant_b, recipient_did=bob.did).count() == 0
    assert PendingEvent.objects.filter(tenant=tenant_a, recipient_did=bob.did).count() == 1


def test_a_past_record_of_one_tenant_is_taken_over_by_another(tenant_a, tenant_b):
    """Past its window a pair is free again on any tenant, and the record moves to the claimant."""
    args = {"sender_did": "did:example:x", "nonce": "n", "expires_at_ms": 1_000}
    assert storage.claim(NonceClaim(tenant_id=tenant_a.pk, **args, now_ms=500)) is True
    assert storage.claim(NonceClaim(tenant_id=tenant_b.pk, **args, now_ms=1_000)) is False
    assert storage.claim(NonceClaim(tenant_id=tenant_b.pk, **{**args, "expires_at_ms": 9_000}, now_ms=1_001)) is True
    assert list(Nonce.objects.values_list("tenant_id", "expires_at")) == [(tenant_b.pk, 9_000)]
