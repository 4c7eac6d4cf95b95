"""Key rotation: a new DID document at once, old registrations valid until they expire, and a grace
period for requests encrypted to the previous pre-key."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from apps.tenants.models import AuditEntry, TenantKey
from apps.tenants.services import tenant_rotate_keys, tenant_update
from apps.wire import contract as wc
from apps.wire.client import Identity
from apps.wire.crypto import verify_json_object
from apps.wire.did import parse_mediator_document
from tests.conftest import HOST_A
from tests.support.registration import register


def _did_document(client, host=HOST_A) -> dict:
    resp = client.get("/", HTTP_HOST=host)
    assert resp.status_code == 200
    return resp.json()


def _register_with_prekey(poster, who: Identity, tenant, prekey: bytes):
    req = wc.build_request(
        requestor_did=who.did,
        recipient_did=tenant.did,
        recipient_prekey=prekey,
        signing=who.signing,
        expires_at=int(time.time()) + 86_400,
    )
    return poster.command(
        who,
        {
            "type": "REQUEST_COMMUNICATION_CONTRACT",
            "encrypted_contract_request": req.encrypted,
            "requestor_ephemeral_public_key": req.ephemeral_public_b64,
        },
        recipient_did=tenant.did,
    )


def test_rotation_publishes_a_new_did_document(client, tenant_a, actor):
    before = parse_mediator_document(_did_document(client))
    assert before.signing_key == bytes(tenant_a.signing_public)
    tenant_rotate_keys(tenant=tenant_a, actor=actor)
    after = parse_mediator_document(_did_document(client))
    tenant_a.refresh_from_db()
    assert after.did == before.did == tenant_a.did
    assert after.signing_key == bytes(tenant_a.signing_public) != before.signing_key
    assert after.pre_key == bytes(tenant_a.prekey_public) != before.pre_key
    assert list(TenantKey.objects.filter(tenant=tenant_a).order_by("purpose").values_list("purpose", flat=True)) == [
        "prekey",
        "signing",
    ]
    entry = AuditEntry.objects.get(action="tenant.rotate_keys")
    assert entry.before["signing_key"] != entry.after["signing_key"]
    assert entry.before["prekey"] != entry.after["prekey"]


def test_registrations_signed_with_the_old_key_stay_valid_until_they_expire(post_a, tenant_a, alice, bob, actor):
    old_signed = register(post_a, alice, tenant_a)
    old_key = bytes(tenant_a.signing_public)
    tenant_rotate_keys(tenant=tenant_a, actor=actor, signing=True, prekey=False)
    tenant_a.refresh_from_db()

    # Still registered: the check reads stored contracts and never re-verifies them.
    status, body = post_a.command(alice, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    assert (status, body["type"]) == (200, "SUCCESS")
    # Re-saving the old registration contract verifies against the retired signing key.
    status, body = post_a.command(
        alice,
        {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": old_signed},
        recipient_did=tenant_a.did,
    )
    assert (status, body) == (200, {"type": "SUCCESS"})
    # New registrations are countersigned with the new key only.
    new_signed = register(post_a, bob, tenant_a)
    terms = new_signed["communication_contract"]
    assert verify_json_object(terms, new_signed["recipient_signature"], bytes(tenant_a.signing_public))
    assert not verify_json_object(terms, new_signed["recipient_signature"], old_key)


def test_a_retired_signing_key_stops_verifying_once_no_contract_it_signed_can_be_alive(post_a, tenant_a, alice, actor):
    old_signed = register(post_a, alice, tenant_a)
    tenant_rotate_keys(tenant=tenant_a, actor=actor, signing=True, prekey=False)
    TenantKey.objects.filter(tenant=tenant_a).update(retired_at=timezone.now() - timedelta(days=366))
    status, body = post_a.command(
        alice,
        {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": old_signed},
        recipient_did=tenant_a.did,
    )
    assert (status, body) == (401, {"type": "ERROR", "code": "INVALID_SIGNATURES"})


def test_a_request_encrypted_to_the_previous_prekey_succeeds_during_the_grace_period(
    post_a, tenant_a, alice, bob, actor
):
    old_prekey = bytes(tenant_a.prekey_public)
    tenant_rotate_keys(tenant=tenant_a, actor=actor, signing=False, prekey=True)
    tenant_a.refresh_from_db()
    status, body = _register_with_prekey(post_a, alice, tenant_a, old_prekey)
    assert (status, body["code"]) == (200, "MEDIATOR_REGISTRATION_SUCCESS")

    # 72 hours (the default grace) later the retired pre-key is no longer tried.
    TenantKey.objects.filter(tenant=tenant_a).update(retired_at=timezone.now() - timedelta(hours=72, seconds=1))
    status, body = _register_with_prekey(post_a, bob, tenant_a, old_prekey)
    assert (status, body) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
    # The current pre-key works as ever.
    status, body = _register_with_prekey(post_a, bob, tenant_a, bytes(tenant_a.prekey_public))
    assert (status, body["code"]) == (200, "MEDIATOR_REGISTRATION_SUCCESS")


def test_a_zero_grace_period_refuses_the_previous_prekey_at_once(post_a, tenant_a, alice, actor):
    tenant_update(tenant=tenant_a, actor=actor, prekey_grace_hours=0)
    old_prekey = bytes(tenant_a.prekey_public)
    tenant_rotate_keys(tenant=tenant_a, actor=actor, signing=False, prekey=True)
    status, body = _register_with_prekey(post_a, alice, tenant_a, old_prekey)
    assert (status, body) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})


def test_two_rotations_keep_both_prekeys_inside_the_grace_period(tenant_a, actor):
    first = bytes(tenant_a.prekey_public)
    tenant_rotate_keys(tenant=tenant_a, actor=actor, signing=False, prekey=True)
    tenant_a.refresh_from_db()
    second = bytes(tenant_a.prekey_public)
    tenant_rotate_keys(tenant=tenant_a, actor=actor, signing=False, prekey=True)
    tenant_a.refresh_from_db()
    assert [k.public for k in tenant_a.previous_prekeys()] == [second, first]
