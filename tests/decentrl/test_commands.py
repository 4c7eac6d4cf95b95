"""DCTRL-0004 §7-9 over POST /: every DIRECT_AUTHENTICATED command and TWO_WAY_PRIVATE, with the
whole reply body and the exact rows stored (docs/protocol-readings.md §4-5)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid

import pytest

from apps.messaging.models import Contract, ContractRequest, EventTag, PendingEvent, StoredEvent
from apps.tenants.models import Tenant
from apps.wire import contract as wc
from apps.wire.canonical import canonical_bytes
from apps.wire.crypto import X25519KeyPair, aes_gcm_encrypt, ed25519_verify, sign_json_object, x25519
from apps.wire.did import parse_decentrl
from tests.support.commands import data_counts, err, row_counts
from tests.support.registration import contract_both_ways, register, signed_contract

SUCCESS = {"type": "SUCCESS"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def da(poster, who, tenant, payload):
    """A DIRECT_AUTHENTICATED command addressed to the tenant itself."""
    return poster.command(who, payload, recipient_did=tenant.did)


def registration_payload(req: wc.ContractRequest) -> dict:
    return {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }


def build_registration(who, tenant, *, lifetime_s: int = 3600, expires_at: int | None = None) -> wc.ContractRequest:
    return wc.build_request(
        requestor_did=who.did,
        recipient_did=tenant.did,
        recipient_prekey=bytes(tenant.prekey_public),
        signing=who.signing,
        expires_at=expires_at if expires_at is not None else int(time.time()) + lifetime_s,
    )


def set_policy(tenant, **fields) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(**fields)


# --- REQUEST_COMMUNICATION_CONTRACT: registration (§8.1, docs/protocol-readings.md §4) -----------------


def test_registration_returns_the_contract_countersigned_with_the_tenant_key(post_a, tenant_a, alice):
    before = row_counts()
    expires = int(time.time()) + 3600
    req = build_registration(alice, tenant_a, expires_at=expires)

    status, body = da(post_a, alice, tenant_a, registration_payload(req))

    assert status == 200
    signed = body["payload"]["signed_communication_contract"]
    terms = signed["communication_contract"]
    assert body == {
        "type": "SUCCESS",
        "code": "MEDIATOR_REGISTRATION_SUCCESS",
        "payload": {
            "signed_communication_contract": {
                "communication_contract": {
                    "requestor_did": alice.did,
                    "recipient_did": tenant_a.did,
                    "requestor_ephemeral_public_key": req.ephemeral_public_b64,
                    "recipient_ephemeral_public_key": terms["recipient_ephemeral_public_key"],
                    "expires_at": expires,
                },
                "requestor_signature": req.request["requestor_signature"],
                "recipient_signature": signed["recipient_signature"],
            }
        },
    }
    assert len(base64.b64decode(terms["recipient_ephemeral_public_key"])) == 32
    # The recipient signature covers the whole communication_contract and verifies with the key
    # the tenant publishes in its DID document.
    assert ed25519_verify(
        bytes(tenant_a.signing_public), canonical_bytes(terms), base64.b64decode(signed["recipient_signature"])
    )
    assert wc.verify_signed_contract(
        signed, lambda d: tenant_a.resolved() if d == tenant_a.did else parse_decentrl(d), now_s=int(time.time())
    )
    stored = Contract.objects.get()
    assert (stored.tenant_id, stored.owner_did, stored.requestor_did, stored.recipient_did, stored.expires_at) == (
        tenant_a.pk,
        alice.did,
        alice.did,
        tenant_a.did,
        expires,
    )
    assert stored.contract_hash == hashlib.sha256(canonical_bytes(terms)).hexdigest()
    assert json.loads(stored.signed_contract) == signed
    assert row_counts() == {**before, "Contract": 1, "Nonce": 1}


def test_registering_again_before_expiry_creates_a_second_contract(post_a, tenant_a, alice):
    first = register(post_a, alice, tenant_a)
    second = register(post_a, alice, tenant_a)
    assert first != second
    assert Contract.objects.filter(owner_did=alice.did, recipient_did=tenant_a.did).count() == 2


def test_registration_beyond_the_tenant_lifetime_cap_is_invalid(post_a, tenant_a, alice):
    set_policy(tenant_a, max_registration_days=1)
    status, body = da(
        post_a, alice, tenant_a, registration_payload(build_registration(alice, tenant_a, lifetime_s=86_400 + 120))
    )
    assert (status, body) == (400, err("INVALID_COMMAND"))
    assert Contract.objects.count() == 0
    # Just inside the cap is accepted.
    status, body = da(
        post_a, alice, tenant_a, registration_payload(build_registration(alice, tenant_a, lifetime_s=86_400 - 120))
    )
    assert status == 200 and body["code"] == "MEDIATOR_REGISTRATION_SUCCESS"


def test_registration_is_refused_while_registration_is_closed(post_a, tenant_a, alice):
    set_policy(tenant_a, registration_open=False)
    status, body = da(post_a, alice, tenant_a, registration_payload(build_registration(alice, tenant_a)))
    assert (status, body) == (401, err("UNAUTHORIZED_COMMAND"))
    assert Contract.objects.count() == 0


def test_registration_is_refused_when_the_identity_quota_is_full(post_a, tenant_a, alice, bob):
    set_policy(tenant_a, max_identities=1)
    register(post_a, alice, tenant_a)
    before = data_counts()
    status, body = da(post_a, bob, tenant_a, registration_payload(build_registration(bob, tenant_a)))
    assert (status, body) == (401, err("UNAUTHORIZED_COMMAND"))
    assert data_counts() == before
    # An identity already counted may renew.
    register(post_a, alice, tenant_a)
    assert Contract.objects.filter(owner_did=alice.did).count() == 2


def test_registration_for_someone_else_is_invalid(post_a, tenant_a, alice, bob):
    # A well-formed request signed by bob, sent by alice: the parties do not match the command.
    req = build_registration(bob, tenant_a)
    status, body = da(post_a, alice, tenant_a, registration_payload(req))
    assert (status, body) == (400, err("INVALID_COMMAND"))
    # Terms naming another mediator are refused too.
    other = wc.build_request(
        requestor_did=alice.did,
        recipient_did="did:web:elsewhere.test",
        recipient_prekey=bytes(tenant_a.prekey_public),
        signing=alice.signing,
        expires_at=int(time.time()) + 3600,
    )
    assert da(post_a, alice, tenant_a, registration_payload(other)) == (400, err("INVALID_COMMAND"))
    assert Contract.objects.count() == 0


def test_registration_with_a_bad_requestor_signature_is_invalid_signatures(post_a, tenant_a, alice, bob):
    eph = X25519KeyPair.generate()
    terms = {
        "requestor_did": alice.did,
        "recipient_did": tenant_a.did,
        "requestor_ephemeral_public_key": b64(eph.public),
        "expires_at": int(time.time()) + 3600,
    }
    wrong = sign_json_object(terms, bob.signing)  # signed by the wrong key
    plaintext = json.dumps({"communication_contract": terms, "requestor_signature": wrong}).encode()
    payload = {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": aes_gcm_encrypt(x25519(eph.private, bytes(tenant_a.prekey_public)), plaintext),
        "requestor_ephemeral_public_key": b64(eph.public),
    }
    status, body = da(post_a, alice, tenant_a, payload)
    assert (status, body) == (401, err("INVALID_SIGNATURES"))
    assert Contract.objects.count() == 0


def test_registration_that_does_not_decrypt_or_is_expired_is_invalid(post_a, tenant_a, alice):
    req = build_registration(alice, tenant_a)
    tampered = dict(registration_payload(req), requestor_ephemeral_public_key=b64(X25519KeyPair.generate().public))
    assert da(post_a, alice, tenant_a, tampered) == (400, err("INVALID_COMMAND"))
    expired = build_registration(alice, tenant_a, expires_at=int(time.time()) - 1)
    assert da(post_a, alice, tenant_a, registration_payload(expired)) == (400, err("INVALID_COMMAND"))
    garbage = dict(registration_payload(req), encrypted_contract_request="bm90IGNpcGhlcnRleHQ=")
    assert da(post_a, alice, tenant_a, garbage) == (400, err("INVALID_COMMAND"))
    assert Contract.objects.count() == 0


# --- REQUEST_COMMUNICATION_CONTRACT: forwarded, and the request queue (§8.1, §8.3, §8.4) ---------


def forward_request(poster, sender, recipient):
    req = wc.build_request(
        requestor_did=sender.did,
        recipient_did=recipient.did,
        recipient_prekey=parse_decentrl(recipient.did).pre_key,
        signing=sender.signing,
        expires_at=int(time.time()) + 3600,
    )
    status, body = poster.command(sender, registration_payload(req), recipient_did=recipient.did)
    return status, body, req


def test_a_forwarded_request_is_queued_for_the_recipient_and_the_sender_need_not_be_registered(
    post_a, tenant_a, alice, bob
):
    register(post_a, bob, tenant_a)  # alice is not registered here
    before = row_counts()

    status, body, req = forward_request(post_a, alice, bob)

    assert (status, body) == (200, {"type": "SUCCESS", "code": "REQUESTED"})
    stored = ContractRequest.objects.get()
    assert (stored.tenant_id, stored.recipient_did, stored.sender_did, stored.acknowledged_at) == (
        tenant_a.pk,
        bob.did,
        alice.did,
        None,
    )
    assert (stored.encrypted_contract_request, stored.requestor_ephemeral_public_key) == (
        req.encrypted,
        req.ephemeral_public_b64,
    )
    assert row_counts() == {**before, "ContractRequest": 1, "Nonce": before["Nonce"] + 1}

    status, body = da(post_a, bob, tenant_a, {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"})
    assert (status, body) == (
        200,
        {
            "type": "SUCCESS",
            "payload": {
                "pending_communication_contract_requests": [
                    {
                        "id": str(stored.public_id),
                        "sender_did": alice.did,
                        "encrypted_contract_request": req.encrypted,
                        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
                    }
                ],
                "pagination": {"page": 0, "page_size": 10, "total": 1},
            },
        },
    )
    # bob can decrypt what he got
    request = wc.decrypt_request(req.encrypted, req.ephemeral_public_b64, bob.prekey.private)
    assert request["communication_contract"]["requestor_did"] == alice.did


def test_a_forwarded_request_to_an_unregistered_recipient_is_refused(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    before = data_counts()
    status, body, _ = forward_request(post_a, alice, bob)
    assert (status, body) == (404, err("RECIPIENT_NOT_REGISTERED"))
    assert data_counts() == before


def test_acknowledging_contract_requests_ignores_others_ids_and_repeats(post_a, tenant_a, registered, alice, bob, dave):
    register(post_a, dave, tenant_a)
    forward_request(post_a, alice, bob)
    forward_request(post_a, bob, dave)
    for_bob = ContractRequest.objects.get(recipient_did=bob.did)
    for_dave = ContractRequest.objects.get(recipient_did=dave.did)
    ack = "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS"

    ids = [str(for_bob.public_id), str(for_dave.public_id), str(uuid.uuid4()), "not-an-id"]
    assert da(post_a, bob, tenant_a, {"type": ack, "communication_contract_ids": ids}) == (200, SUCCESS)

    for_bob.refresh_from_db()
    for_dave.refresh_from_db()
    assert for_bob.acknowledged_at is not None
    assert for_dave.acknowledged_at is None  # dave's request is not bob's to acknowledge
    acked_at = for_bob.acknowledged_at
    assert da(post_a, bob, tenant_a, {"type": ack, "communication_contract_ids": ids}) == (200, SUCCESS)
    for_bob.refresh_from_db()
    assert for_bob.acknowledged_at == acked_at
    assert da(post_a, bob, tenant_a, {"type": ack, "communication_contract_ids": []}) == (200, SUCCESS)

    status, body = da(post_a, bob, tenant_a, {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"})
    assert body == {
        "type": "SUCCESS",
        "payload": {
            "pending_communication_contract_requests": [],
            "pagination": {"page": 0, "page_size": 10, "total": 0},
        },
    }
    status, body = da(post_a, dave, tenant_a, {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"})
    assert [i["id"] for i in body["payload"]["pending_communication_contract_requests"]] == [str(for_dave.public_id)]


# --- COMMUNICATION_CONTRACT_RESPONSE (§8.2) -----------------------------------------------------


def response_payload(signed):
    return {"type": "COMMUNICATION_CONTRACT_RESPONSE", "signed_communication_contract": signed}


def test_a_contract_response_is_stored_for_the_other_party_and_the_sender_need_not_be_registered(
    post_a, tenant_a, alice, bob
):
    register(post_a, alice, tenant_a)  # bob is not registered here
    signed, _, _ = signed_contract(alice, bob)
    before = data_counts()

    status, body = post_a.command(bob, response_payload(signed), recipient_did=alice.did)

    assert (status, body) == (200, SUCCESS)
    stored = Contract.objects.get(owner_did=alice.did, requestor_did=alice.did, recipient_did=bob.did)
    assert json.loads(stored.signed_contract) == signed
    assert stored.contract_hash == wc.contract_hash(signed["communication_contract"])
    assert stored.expires_at == signed["communication_contract"]["expires_at"]
    assert data_counts() == {**before, "Contract": before["Contract"] + 1}
    assert not Contract.objects.filter(owner_did=bob.did).exists()


def test_a_contract_response_must_name_the_other_party_as_recipient(post_a, tenant_a, registered, alice, bob, dave):
    register(post_a, dave, tenant_a)
    signed, _, _ = signed_contract(alice, bob)
    before = data_counts()
    assert post_a.command(bob, response_payload(signed), recipient_did=dave.did) == (400, err("INVALID_COMMAND"))
    assert post_a.command(bob, response_payload(signed), recipient_did=tenant_a.did) == (400, err("INVALID_COMMAND"))
    assert data_counts() == before


def test_a_contract_response_from_a_non_party_is_invalid(post_a, tenant_a, registered, alice, bob, dave):
    signed, _, _ = signed_contract(alice, bob)
    before = data_counts()
    assert post_a.command(dave, response_payload(signed), recipient_did=alice.did) == (400, err("INVALID_COMMAND"))
    assert data_counts() == before


def test_a_contract_response_for_an_unregistered_party_is_refused(post_a, tenant_a, alice, bob):
    register(post_a, bob, tenant_a)
    signed, _, _ = signed_contract(alice, bob)
    before = data_counts()
    assert post_a.command(bob, response_payload(signed), recipient_did=alice.did) == (
        404,
        err("RECIPIENT_NOT_REGISTERED"),
    )
    assert data_counts() == before


def test_a_contract_response_with_a_forged_signature_is_invalid_signatures(
    post_a, tenant_a, registered, alice, bob, dave
):
    signed, _, _ = signed_contract(alice, bob)
    forged = dict(signed, recipient_signature=sign_json_object(signed["communication_contract"], dave.signing))
    before = data_counts()
    assert post_a.command(bob, response_payload(forged), recipient_did=alice.did) == (401, err("INVALID_SIGNATURES"))
    assert data_counts() == before


# --- SAVE_COMMUNICATION_CONTRACT and QUERY_COMMUNICATION_CONTRACTS (§8.5, §8.6) ----------------


def contract_with_extensions(a, b, expires_at: int) -> dict:
    """A valid contract carrying unknown members, which must come back verbatim."""
    eph_a, eph_b = X25519KeyPair.generate(), X25519KeyPair.generate()
    terms = {
        "x_extension": {"z": [1, "ü", None, 2.5], "a": {"nested": True}},
        "requestor_did": a.did,
        "recipient_did": b.did,
        "requestor_ephemeral_public_key": b64(eph_a.public),
        "expires_at": expires_at,
    }
    requestor_signature = sign_json_object(wc.requestor_signable(terms), a.signing)
    terms["recipient_ephemeral_public_key"] = b64(eph_b.public)
    return {
        "recipient_signature": sign_json_object(terms, b.signing),
        "communication_contract": terms,
        "requestor_signature": requestor_signature,
        "x_note": "kept as received",
    }


def test_saving_the_same_contract_twice_is_idempotent(post_a, tenant_a, registered, alice, bob):
    signed, _, _ = signed_contract(alice, bob)
    payload = {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}
    assert da(post_a, bob, tenant_a, payload) == (200, SUCCESS)
    assert da(post_a, bob, tenant_a, payload) == (200, SUCCESS)
    assert Contract.objects.filter(owner_did=bob.did, requestor_did=alice.did).count() == 1
    # The same contract is a separate row for another owner.
    assert da(post_a, alice, tenant_a, payload) == (200, SUCCESS)
    assert Contract.objects.filter(requestor_did=alice.did, recipient_did=bob.did).count() == 2


def test_saving_an_invalid_contract_stores_nothing(post_a, tenant_a, registered, alice, bob):
    signed, _, _ = signed_contract(alice, bob)
    before = data_counts()
    bad_sig = dict(signed, requestor_signature=signed["recipient_signature"])
    same_parties = json.loads(json.dumps(signed))
    same_parties["communication_contract"]["recipient_did"] = alice.did
    short_key = json.loads(json.dumps(signed))
    short_key["communication_contract"]["recipient_ephemeral_public_key"] = b64(b"x" * 31)
    unresolvable = json.loads(json.dumps(signed))
    unresolvable["communication_contract"]["recipient_did"] = "did:example:nobody"
    cases = [
        (bad_sig, 401, "INVALID_SIGNATURES"),
        (same_parties, 400, "INVALID_COMMAND"),
        (short_key, 400, "INVALID_COMMAND"),
        (unresolvable, 400, "INVALID_COMMAND"),
        ({"communication_contract": "nope"}, 400, "INVALID_COMMAND"),
        ({}, 400, "INVALID_COMMAND"),
    ]
    for contract, status, code in cases:
        payload = {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": contract}
        assert da(post_a, bob, tenant_a, payload) == (status, err(code)), contract
    assert data_counts() == before


def test_query_contracts_returns_the_stored_contracts_verbatim_with_strict_filters(
    post_a, tenant_a, registered, alice, bob
):
    reg = registered["alice"]
    reg_exp = reg["communication_contract"]["expires_at"]
    ext_exp = int(time.time()) + 2 * 86_400
    ext = contract_with_extensions(alice, bob, ext_exp)
    assert da(
        post_a, alice, tenant_a, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": ext}
    ) == (200, SUCCESS)
    reg_row = Contract.objects.get(owner_did=alice.did, recipient_did=tenant_a.did)
    ext_row = Contract.objects.get(owner_did=alice.did, recipient_did=bob.did)
    item_reg = {"id": str(reg_row.public_id), "signed_communication_contract": reg}
    item_ext = {"id": str(ext_row.public_id), "signed_communication_contract": ext}

    def query(flt=None, pagination=None):
        payload = {"type": "QUERY_COMMUNICATION_CONTRACTS"}
        if flt is not None:
            payload["filter"] = flt
        if pagination is not None:
            payload["pagination"] = pagination
        status, body = da(post_a, alice, tenant_a, payload)
        assert status == 200, body
        return body

    assert query() == {
        "type": "SUCCESS",
        "payload": {
            "communication_contracts": [item_reg, item_ext],
            "pagination": {"page": 0, "page_size": 10, "total": 2},
        },
    }
    # The unknown members and their values survive byte-for-byte in canonical form.
    assert canonical_bytes(
        query()["payload"]["communication_contracts"][1]["signed_communication_contract"]
    ) == canonical_bytes(ext)

    def items(flt):
        return query(flt)["payload"]["communication_contracts"]

    assert items({"did": bob.did}) == [item_ext]
    assert items({"did": tenant_a.did}) == [item_reg]
    assert items({"did": alice.did}) == [item_reg, item_ext]
    assert items({"did": "did:example:nobody"}) == []
    assert items({"expires_at_before": reg_exp}) == []
    assert items({"expires_at_before": reg_exp + 1}) == [item_reg]
    assert items({"expires_at_after": ext_exp}) == []
    assert items({"expires_at_after": ext_exp - 1}) == [item_ext]
    assert items({"expires_at_after": reg_exp - 1, "expires_at_before": ext_exp + 1}) == [item_reg, item_ext]
    assert items({"did": bob.did, "expires_at_before": ext_exp}) == []
    assert items({"did": None, "expires_at_before": None}) == [item_reg, item_ext]
    assert query(pagination={"page": 1, "page_size": 1})["payload"] == {
        "communication_contracts": [item_ext],
        "pagination": {"page": 1, "page_size": 1, "total": 2},
    }
    # bob owns only his registration
    status, body = da(post_a, bob, tenant_a, {"type": "QUERY_COMMUNICATION_CONTRACTS"})
    assert [i["signed_communication_contract"] for i in body["payload"]["communication_contracts"]] == [
        registered["bob"]
    ]


def test_query_contracts_lists_expired_contracts_unless_a_filter_excludes_them(
    post_a, tenant_a, registered, alice, bob
):
    expired = Contract.objects.create(
        tenant=tenant_a,
        owner_did=alice.did,
        requestor_did=alice.did,
        recipient_did=bob.did,
        expires_at=int(time.time()) - 10,
        contract_hash="0" * 64,
        signed_contract='{"communication_contract":{"expires_at":1}}',
    )
    status, body = da(post_a, alice, tenant_a, {"type": "QUERY_COMMUNICATION_CONTRACTS", "filter": {"did": bob.did}})
    assert body["payload"]["communication_contracts"] == [
        {"id": str(expired.public_id), "signed_communication_contract": {"communication_contract": {"expires_at": 1}}}
    ]
    flt = {"did": bob.did, "expires_at_after": int(time.time())}
    status, body = da(post_a, alice, tenant_a, {"type": "QUERY_COMMUNICATION_CONTRACTS", "filter": flt})
    assert body["payload"]["communication_contracts"] == []


@pytest.mark.parametrize(
    "flt",
    [
        [],
        "x",
        {"did": 5},
        {"did": ""},
        {"expires_at_before": "1"},
        {"expires_at_after": 1.5},
        {"expires_at_after": True},
    ],
)
def test_query_contracts_rejects_malformed_filters(post_a, tenant_a, registered, alice, flt):
    assert da(post_a, alice, tenant_a, {"type": "QUERY_COMMUNICATION_CONTRACTS", "filter": flt}) == (
        400,
        err("INVALID_COMMAND"),
    )


# --- TWO_WAY_PRIVATE (§7) and the pending queue (§8.7, §8.8) ------------------------------------
def test_two_way_private_stores_a_pending_event_and_replies_with_its_id(post_a, tenant_a, alice, bob):
    register(post_a, bob, tenant_a)  # the sender need not be registered here
    contract_both_ways(post_a, alice, bob, tenant_a)
    before = data_counts()

    status, body = post_a.command(alice, "opaque-ciphertext-ü", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")

    event = PendingEvent.objects.get()
    assert (status, body) == (200, {"type": "SUCCESS", "pendingEventId": str(event.public_id)})
    assert (event.tenant_id, event.recipient_did, event.sender_did, event.payload, event.acknowledged_at) == (
        tenant_a.pk,
        bob.did,
        alice.did,
        "opaque-ciphertext-ü",
        None,
    )
    assert event.payload_bytes == len("opaque-ciphertext-ü".encode())
    assert data_counts() == {**before, "PendingEvent": 1}


def test_two_way_private_accepts_a_contract_in_either_role(post_a, tenant_a, registered, alice, bob):
    # bob requested, alice accepted; bob saved it: alice (as recipient of the contract) may send.
    signed, _, _ = signed_contract(bob, alice)
    assert da(
        post_a, bob, tenant_a, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}
    ) == (200, SUCCESS)
    status, body = post_a.command(alice, "x", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert status == 200 and set(body) == {"type", "pendingEventId"}


def send(poster, sender, recipient, blob):
    status, body = poster.command(sender, blob, recipient_did=recipient.did, channel="TWO_WAY_PRIVATE")
    assert status == 200, body
    return body["pendingEventId"]


def test_pending_events_are_listed_in_arrival_order_filtered_by_sender_and_acked(
    post_a, tenant_a, registered, alice, bob, dave
):
    contract_both_ways(post_a, alice, bob, tenant_a)
    contract_both_ways(post_a, dave, bob, tenant_a)
    e1 = send(post_a, alice, bob, "one")
    e2 = send(post_a, dave, bob, "two")
    e3 = send(post_a, alice, bob, "three")
    foreign = PendingEvent.objects.create(
        tenant=tenant_a, recipient_did=dave.did, sender_did=alice.did, payload="dave's"
    )

    def query(payload_extra=None):
        status, body = da(post_a, bob, tenant_a, {"type": "QUERY_PENDING_EVENTS", **(payload_extra or {})})
        assert status == 200, body
        return body

    assert query() == {
        "type": "SUCCESS",
        "payload": {
            "pending_events": [
                {"id": e1, "payload": "one", "sender_did": alice.did},
                {"id": e2, "payload": "two", "sender_did": dave.did},
                {"id": e3, "payload": "three", "sender_did": alice.did},
            ],
            "pagination": {"page": 0, "page_size": 10, "total": 3},
        },
    }
    assert query({"filter": {"sender_did": alice.did}})["payload"] == {
        "pending_events": [
            {"id": e1, "payload": "one", "sender_did": alice.did},
            {"id": e3, "payload": "three", "sender_did": alice.did},
        ],
        "pagination": {"page": 0, "page_size": 10, "total": 2},
    }
    assert query({"filter": {"sender_did": "did:example:nobody"}})["payload"]["pagination"]["total"] == 0
    assert query({"filter": {}})["payload"]["pagination"]["total"] == 3

    ack = {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": [e1, str(foreign.public_id), str(uuid.uuid4()), "junk"]}
    assert da(post_a, bob, tenant_a, ack) == (200, SUCCESS)
    acked = PendingEvent.objects.get(public_id=e1)
    assert acked.acknowledged_at is not None
    assert acked.payload == ""  # the mediator keeps no ciphertext after acknowledgement
    foreign.refresh_from_db()
    assert (foreign.acknowledged_at, foreign.payload) == (None, "dave's")
    assert [i["id"] for i in query()["payload"]["pending_events"]] == [e2, e3]

    at = acked.acknowledged_at
    assert da(post_a, bob, tenant_a, ack) == (200, SUCCESS)  # a repeated ACK is a no-op
    acked.refresh_from_db()
    assert acked.acknowledged_at == at
    assert query()["payload"]["pagination"]["total"] == 2


# --- SAVE_EVENTS, QUERY_EVENTS, UPDATE_EVENT_TAGS (§8.9-§8.11) ---------------------------------


def stored_event(sender, recipient, ts, payload, tags):
    return {
        "sender_did": sender.did,
        "recipient_did": recipient.did,
        "timestamp": ts,
        "payload": payload,
        "encrypted_tags": tags,
    }


def test_save_events_stores_every_event_with_its_tags_and_processed_flag(post_a, tenant_a, registered, alice, bob):
    events = [
        stored_event(alice, bob, 100, "mine", ["t2", "t1", "t2"]),
        {**stored_event(bob, alice, 200, "theirs", []), "contract_id": "c-1"},
        {"sender_did": bob.did, "recipient_did": alice.did, "timestamp": 300.0, "payload": "no tags"},
    ]
    before = data_counts()
    assert da(post_a, alice, tenant_a, {"type": "SAVE_EVENTS", "events": events}) == (200, SUCCESS)
    rows = list(
        StoredEvent.objects.order_by("id").values_list(
            "tenant_id",
            "owner_did",
            "sender_did",
            "recipient_did",
            "contract_id",
            "timestamp",
            "payload",
            "encrypted_tags",
            "processed",
        )
    )
    assert rows == [
        (tenant_a.pk, alice.did, alice.did, bob.did, None, 100, "mine", ["t2", "t1", "t2"], True),
        (tenant_a.pk, alice.did, bob.did, alice.did, "c-1", 200, "theirs", [], False),
        (tenant_a.pk, alice.did, bob.did, alice.did, None, 300, "no tags", [], False),
    ]
    first = StoredEvent.objects.order_by("id").first()
    assert sorted(EventTag.objects.filter(event=first).values_list("tag", flat=True)) == ["t1", "t2"]
    assert set(EventTag.objects.values_list("owner_did", "tenant_id")) == {(alice.did, tenant_a.pk)}
    assert data_counts() == {**before, "StoredEvent": 3, "EventTag": 2}


@pytest.mark.parametrize(
    ("policy", "events"),
    [
        ({"max_events_per_save": 2}, [("a", []), ("b", []), ("c", [])]),
        ({"max_tags_per_event": 2}, [("a", ["1"]), ("b", ["1", "2", "3"])]),
        ({"max_tag_length": 8}, [("a", ["short"]), ("b", ["x" * 9])]),
    ],
    ids=["too-many-events", "too-many-tags", "tag-too-long"],
)
def test_save_events_is_all_or_nothing_within_the_tenant_caps(post_a, tenant_a, registered, alice, bob, policy, events):
    set_policy(tenant_a, **policy)
    before = data_counts()
    payload = {"type": "SAVE_EVENTS", "events": [stored_event(alice, bob, 1, p, tags) for p, tags in events]}
    assert da(post_a, alice, tenant_a, payload) == (400, err("INVALID_COMMAND"))
    assert data_counts() == before


def test_save_events_with_one_malformed_event_stores_nothing(post_a, tenant_a, registered, alice, bob):
    good = stored_event(alice, bob, 1, "ok", ["t"])
    before = data_counts()
    for bad in (
        {**good, "payload": 5},
        {**good, "timestamp": "1"},
        {**good, "timestamp": 1.5},
        {**good, "encrypted_tags": [1]},
        {k: v for k, v in good.items() if k != "sender_did"},
        "event",
        {**good, "contract_id": 7},
    ):
        assert da(post_a, alice, tenant_a, {"type": "SAVE_EVENTS", "events": [good, bad]}) == (
            400,
            err("INVALID_COMMAND"),
        ), bad
    assert da(post_a, alice, tenant_a, {"type": "SAVE_EVENTS", "events": "nope"}) == (400, err("INVALID_COMMAND"))
    assert data_counts() == before


@pytest.fixture
def archive(post_a, tenant_a, registered, alice, bob, dave):
    """alice's archive: E4 (ts 50) saved last; E2 and E3 share a timestamp and keep arrival order."""
    first = [
        stored_event(alice, bob, 100, "E1", ["t-z", "t-a"]),
        stored_event(bob, alice, 200, "E2", ["t-a"]),
        stored_event(dave, alice, 200, "E3", ["t-m", "t-z", "t-b"]),
    ]
    assert da(post_a, alice, tenant_a, {"type": "SAVE_EVENTS", "events": first}) == (200, SUCCESS)
    assert da(
        post_a, alice, tenant_a, {"type": "SAVE_EVENTS", "events": [stored_event(alice, dave, 50, "E4", [])]}
    ) == (200, SUCCESS)
    # bob's own archive, which alice must never see
    assert da(
        post_a, bob, tenant_a, {"type": "SAVE_EVENTS", "events": [stored_event(alice, bob, 100, "B1", ["t-a"])]}
    ) == (200, SUCCESS)
    ids = {e.payload: str(e.public_id) for e in StoredEvent.objects.all()}
    items = {
        "E1": {"id": ids["E1"], "payload": "E1", "encrypted_tags": ["t-z", "t-a"], "timestamp": 100},
        "E2": {"id": ids["E2"], "payload": "E2", "encrypted_tags": ["t-a"], "timestamp": 200},
        "E3": {"id": ids["E3"], "payload": "E3", "encrypted_tags": ["t-m", "t-z", "t-b"], "timestamp": 200},
        "E4": {"id": ids["E4"], "payload": "E4", "encrypted_tags": [], "timestamp": 50},
    }
    return ids, items


def query_events(poster, who, tenant, flt=None, pagination=None):
    payload = {"type": "QUERY_EVENTS"}
    if flt is not None:
        payload["filter"] = flt
    if pagination is not None:
        payload["pagination"] = pagination
    status, body = da(poster, who, tenant, payload)
    assert status == 200, body
    return body


def test_query_events_returns_exact_items_in_timestamp_then_arrival_order(post_a, tenant_a, alice, archive):
    _, items = archive
    assert query_events(post_a, alice, tenant_a) == {
        "type": "SUCCESS",
        "payload": {
            "events": [items["E4"], items["E1"], items["E2"], items["E3"]],
            "pagination": {"page": 0, "page_size": 10, "total": 4},
        },
    }


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"after_timestamp": 100}, ["E2", "E3"]),
        ({"after_timestamp": 99}, ["E1", "E2", "E3"]),
        ({"before_timestamp": 200}, ["E4", "E1"]),
        ({"after_timestamp": 50, "before_timestamp": 200}, ["E1"]),
        ({"after_timestamp": 100.0, "before_timestamp": 100}, []),
        ({"participant_did": "bob"}, ["E1", "E2"]),
        ({"participant_did": "dave"}, ["E4", "E3"]),
        ({"participant_did": "alice"}, ["E4", "E1", "E2", "E3"]),
        ({"participant_did": "did:example:nobody"}, []),
        ({"encrypted_tags": ["t-z"]}, ["E1", "E3"]),
        ({"encrypted_tags": ["t-a", "t-b"]}, ["E1", "E2", "E3"]),
        ({"encrypted_tags": ["T-A"]}, []),
        ({"encrypted_tags": []}, ["E4", "E1", "E2", "E3"]),
        ({"unprocessed_only": True}, ["E2", "E3"]),
        ({"unprocessed_only": False}, ["E4", "E1", "E2", "E3"]),
        ({"participant_did": "bob", "unprocessed_only": True}, ["E2"]),
        ({"encrypted_tags": ["t-z"], "after_timestamp": 150}, ["E3"]),
        ({}, ["E4", "E1", "E2", "E3"]),
    ],
)
def test_query_events_filters(post_a, tenant_a, alice, bob, dave, archive, flt, expected):
    _, items = archive
    names = {"alice": alice.did, "bob": bob.did, "dave": dave.did}
    if "participant_did" in flt:
        flt = {**flt, "participant_did": names.get(flt["participant_did"], flt["participant_did"])}
    body = query_events(post_a, alice, tenant_a, flt)
    assert body["payload"] == {
        "events": [items[n] for n in expected],
        "pagination": {"page": 0, "page_size": 10, "total": len(expected)},
    }


@pytest.mark.parametrize(
    "flt",
    [
        {"after_timestamp": "1"},
        {"before_timestamp": 1.5},
        {"participant_did": 3},
        {"encrypted_tags": "t-a"},
        {"encrypted_tags": [1]},
        {"unprocessed_only": "yes"},
        {"unprocessed_only": 1},
        [],
    ],
)
def test_query_events_rejects_malformed_filters(post_a, tenant_a, registered, alice, flt):
    assert da(post_a, alice, tenant_a, {"type": "QUERY_EVENTS", "filter": flt}) == (400, err("INVALID_COMMAND"))


def test_update_event_tags_replaces_tags_marks_processed_and_skips_others_events(post_a, tenant_a, alice, bob, archive):
    ids, items = archive
    b1 = StoredEvent.objects.get(payload="B1")
    updates = [
        {"event_id": ids["E2"], "encrypted_tags": ["n2", "n1"]},
        {"event_id": str(b1.public_id), "encrypted_tags": ["stolen"]},
        {"event_id": str(uuid.uuid4()), "encrypted_tags": []},
        {"event_id": "junk", "encrypted_tags": []},
    ]
    assert da(post_a, alice, tenant_a, {"type": "UPDATE_EVENT_TAGS", "events": updates}) == (200, SUCCESS)

    e2 = StoredEvent.objects.get(payload="E2")
    assert (e2.encrypted_tags, e2.processed) == (["n2", "n1"], True)
    assert sorted(EventTag.objects.filter(event=e2).values_list("tag", flat=True)) == ["n1", "n2"]
    b1_after = StoredEvent.objects.get(pk=b1.pk)
    assert (b1_after.encrypted_tags, b1_after.processed) == (["t-a"], b1.processed)
    assert list(EventTag.objects.filter(event=b1).values_list("tag", flat=True)) == ["t-a"]

    e2_item = {**items["E2"], "encrypted_tags": ["n2", "n1"]}
    assert query_events(post_a, alice, tenant_a, {"encrypted_tags": ["t-a"]})["payload"]["events"] == [items["E1"]]
    assert query_events(post_a, alice, tenant_a, {"encrypted_tags": ["n1"]})["payload"]["events"] == [e2_item]
    assert query_events(post_a, alice, tenant_a, {"unprocessed_only": True})["payload"]["events"] == [items["E3"]]
    # An empty tag list clears the tags.
    clear = {"type": "UPDATE_EVENT_TAGS", "events": [{"event_id": ids["E3"], "encrypted_tags": []}]}
    assert da(post_a, alice, tenant_a, clear) == (200, SUCCESS)
    assert not EventTag.objects.filter(event__payload="E3").exists()
    assert query_events(post_a, alice, tenant_a, {"unprocessed_only": True})["payload"]["events"] == []


def test_update_event_tags_over_the_tag_cap_changes_nothing(post_a, tenant_a, alice, archive):
    ids, _ = archive
    Tenant.objects.filter(pk=tenant_a.pk).update(max_tags_per_event=2)
    before = list(StoredEvent.objects.order_by("id").values_list("encrypted_tags", "processed"))
    updates = [
        {"event_id": ids["E2"], "encrypted_tags": ["a"]},
        {"event_id": ids["E3"], "encrypted_tags": ["a", "b", "c"]},
    ]
    assert da(post_a, alice, tenant_a, {"type": "UPDATE_EVENT_TAGS", "events": updates}) == (
        400,
        err("INVALID_COMMAND"),
    )
    assert list(StoredEvent.objects.order_by("id").values_list("encrypted_tags", "processed")) == before


# --- Pagination (§9, docs/protocol-readings.md §5) -----------------------------------------------------


@pytest.fixture
def many_events(post_a, tenant_a, registered, alice, bob):
    """25 events with one timestamp, so that order is by arrival alone."""
    events = [stored_event(bob, alice, 1000, f"p{i:02d}", []) for i in range(25)]
    assert da(post_a, alice, tenant_a, {"type": "SAVE_EVENTS", "events": events}) == (200, SUCCESS)
    return [f"p{i:02d}" for i in range(25)]


@pytest.mark.parametrize(
    ("pagination", "echo", "expected"),
    [
        (None, {"page": 0, "page_size": 10}, range(0, 10)),
        ({}, {"page": 0, "page_size": 10}, range(0, 10)),
        ({"page": 2}, {"page": 2, "page_size": 10}, range(20, 25)),
        ({"page_size": 7}, {"page": 0, "page_size": 7}, range(0, 7)),
        ({"page": 1, "page_size": 7}, {"page": 1, "page_size": 7}, range(7, 14)),
        ({"page": 5}, {"page": 5, "page_size": 10}, range(0)),
        ({"page": 0, "page_size": 100}, {"page": 0, "page_size": 100}, range(0, 25)),
        ({"page": 1.0, "page_size": 1}, {"page": 1, "page_size": 1}, range(1, 2)),
        ({"page": None, "page_size": None}, {"page": 0, "page_size": 10}, range(0, 10)),
    ],
)
def test_pagination_defaults_echo_and_total(post_a, tenant_a, alice, many_events, pagination, echo, expected):
    payload = {"type": "QUERY_EVENTS"} if pagination is None else {"type": "QUERY_EVENTS", "pagination": pagination}
    status, body = da(post_a, alice, tenant_a, payload)
    assert status == 200
    assert [e["payload"] for e in body["payload"]["events"]] == [many_events[i] for i in expected]
    assert body["payload"]["pagination"] == {**echo, "total": 25}


@pytest.mark.parametrize(
    "pagination",
    [
        {"page_size": 0},
        {"page_size": 101},
        {"page_size": -1},
        {"page": -1},
        {"page": "1"},
        {"page_size": "10"},
        {"page": 1.5},
        {"page": True},
        {"page_size": [10]},
        {"page": 10**30},
        {"page": 1e300},
        [],
        "page=1",
        0,
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        "QUERY_EVENTS",
        "QUERY_PENDING_EVENTS",
        "QUERY_COMMUNICATION_CONTRACTS",
        "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS",
    ],
)
def test_pagination_out_of_bounds_is_invalid(post_a, tenant_a, registered, alice, command, pagination):
    before = data_counts()
    assert da(post_a, alice, tenant_a, {"type": command, "pagination": pagination}) == (400, err("INVALID_COMMAND"))
    assert data_counts() == before


def test_pages_are_stable_and_cover_the_whole_list(post_a, tenant_a, alice, many_events):
    seen = []
    for page in range(4):
        status, body = da(
            post_a, alice, tenant_a, {"type": "QUERY_EVENTS", "pagination": {"page": page, "page_size": 7}}
        )
        seen += [e["id"] for e in body["payload"]["events"]]
    status, body = da(post_a, alice, tenant_a, {"type": "QUERY_EVENTS", "pagination": {"page_size": 100}})
    assert seen == [e["id"] for e in body["payload"]["events"]]
    assert len(set(seen)) == 25
    # repeat: same order
    status, again = da(post_a, alice, tenant_a, {"type": "QUERY_EVENTS", "pagination": {"page_size": 100}})
    assert again == body


def test_pending_event_pages_keep_arrival_order(post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    sent = [send(post_a, alice, bob, f"m{i}") for i in range(12)]
    status, p0 = da(post_a, bob, tenant_a, {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 0, "page_size": 5}})
    status, p2 = da(post_a, bob, tenant_a, {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 2, "page_size": 5}})
    assert [e["id"] for e in p0["payload"]["pending_events"]] == sent[:5]
    assert [e["id"] for e in p2["payload"]["pending_events"]] == sent[10:]
    assert p2["payload"]["pagination"] == {"page": 2, "page_size": 5, "total": 12}
