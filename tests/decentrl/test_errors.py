"""Every error code of DCTRL-0004 §11.2 and our extensions (docs/protocol-readings.md §7): status, exact
body, and nothing stored. Plus the replay rules of §5 and signature verification over what was
received (docs/protocol-readings.md §2-3)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from apps.decentrl.models import Nonce
from apps.messaging.models import Contract, PendingEvent
from apps.tenants.models import Tenant
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity
from apps.wire.crypto import sign_json_object
from tests.conftest import HOST_A
from tests.support.commands import body_of, data_counts, envelope, err, now_ms, row_counts
from tests.support.entry import Poster
from tests.support.registration import contract_both_ways, register, signed_contract

QUERY = {"type": "QUERY_EVENTS"}


def test_an_unknown_command_type_is_invalid_command_and_consumes_no_nonce(post_a, tenant_a, registered, alice):
    before = row_counts()
    env = envelope(alice, {"type": "NO_SUCH_COMMAND"}, recipient_did=tenant_a.did)
    assert post_a.send(env) == (400, err("INVALID_COMMAND"))
    assert row_counts() == before  # refused before the nonce step


def test_a_tampered_or_malformed_signature_is_invalid_signature(post_a, tenant_a, registered, alice):
    env = envelope(alice, QUERY, recipient_did=tenant_a.did)
    env["payload"] = {"type": "QUERY_EVENTS", "filter": {"unprocessed_only": True}}
    before = data_counts()
    assert post_a.send(env) == (401, err("INVALID_SIGNATURE"))
    short = envelope(alice, QUERY, recipient_did=tenant_a.did)
    short["signature"] = "AAAA"
    assert post_a.send(short) == (401, err("INVALID_SIGNATURE"))
    not_b64 = envelope(alice, QUERY, recipient_did=tenant_a.did)
    not_b64["signature"] = "!!!not base64!!!"
    assert post_a.send(not_b64) == (401, err("INVALID_SIGNATURE"))
    assert data_counts() == before


def test_invalid_signature_for_two_way_private_stores_no_event(post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    env = envelope(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    env["payload"] = "other blob"
    assert post_a.send(env) == (401, err("INVALID_SIGNATURE"))
    assert PendingEvent.objects.count() == 0


def test_a_contract_with_a_forged_signature_is_invalid_signatures(post_a, tenant_a, registered, alice, bob):
    signed, _, _ = signed_contract(alice, bob)
    signed["recipient_signature"] = sign_json_object(signed["communication_contract"], alice.signing)
    before = data_counts()
    payload = {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}
    assert post_a.command(bob, payload, recipient_did=tenant_a.did) == (401, err("INVALID_SIGNATURES"))
    assert data_counts() == before


def test_unauthorized_command_for_an_unregistered_sender(post_a, tenant_a, alice):
    before = data_counts()
    for payload in (
        QUERY,
        {"type": "QUERY_PENDING_EVENTS"},
        {"type": "SAVE_EVENTS", "events": [{"sender_did": "a", "recipient_did": "b", "timestamp": 1, "payload": "p"}]},
        {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": []},
    ):
        assert post_a.command(alice, payload, recipient_did=tenant_a.did) == (401, err("UNAUTHORIZED_COMMAND"))
    assert data_counts() == before


def test_unauthorized_command_when_not_addressed_to_the_mediator(post_a, tenant_a, registered, alice, bob):
    before = data_counts()
    assert post_a.command(alice, QUERY, recipient_did=bob.did) == (401, err("UNAUTHORIZED_COMMAND"))
    save = {
        "type": "SAVE_EVENTS",
        "events": [{"sender_did": "a", "recipient_did": "b", "timestamp": 1, "payload": "p"}],
    }
    assert post_a.command(alice, save, recipient_did=bob.did) == (401, err("UNAUTHORIZED_COMMAND"))
    assert data_counts() == before


def test_unauthorized_command_once_the_registration_has_expired(post_a, tenant_a, registered, alice):
    Contract.objects.filter(owner_did=alice.did).update(expires_at=int(time.time()) - 1)
    assert post_a.command(alice, QUERY, recipient_did=tenant_a.did) == (401, err("UNAUTHORIZED_COMMAND"))


@pytest.mark.parametrize("skew_ms", [-300_001 - 2000, 300_001 + 2000, -(10**12)])
def test_it_rejects_a_timestamp_outside_the_window(post_a, tenant_a, registered, alice, skew_ms):
    before = row_counts()
    env = envelope(alice, QUERY, recipient_did=tenant_a.did, timestamp=now_ms() + skew_ms)
    assert post_a.send(env) == (401, err("TIMESTAMP_OUT_OF_RANGE"))
    assert row_counts() == before  # the nonce is not consumed by a refused timestamp


def test_it_rejects_a_replayed_nonce(post_a, tenant_a, registered, alice):
    env = envelope(alice, QUERY, recipient_did=tenant_a.did)
    assert post_a.send(env)[0] == 200
    before = row_counts()
    assert post_a.send(env) == (401, err("DUPLICATE_NONCE"))
    # The pair is (nonce, sender): the same nonce with a different payload is still a replay,
    # and the uppercase spelling of the UUID is the same nonce.
    again = envelope(
        alice, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did, nonce=env["header"]["nonce"].upper()
    )
    assert post_a.send(again) == (401, err("DUPLICATE_NONCE"))
    assert row_counts() == before


def test_a_nonce_is_per_sender(post_a, tenant_a, registered, alice, bob):
    nonce = str(uuid.uuid4())
    assert post_a.send(envelope(alice, QUERY, recipient_did=tenant_a.did, nonce=nonce))[0] == 200
    assert post_a.send(envelope(bob, QUERY, recipient_did=tenant_a.did, nonce=nonce))[0] == 200


def test_a_nonce_stays_consumed_after_a_later_error(post_a, tenant_a, registered, alice, bob):
    nonce = str(uuid.uuid4())
    bad = envelope(alice, QUERY, recipient_did=tenant_a.did, nonce=nonce)
    bad["payload"] = {"type": "QUERY_PENDING_EVENTS"}
    assert post_a.send(bad) == (401, err("INVALID_SIGNATURE"))
    good = envelope(alice, QUERY, recipient_did=tenant_a.did, nonce=nonce)
    assert post_a.send(good) == (401, err("DUPLICATE_NONCE"))
    # ... and after an authorization error or a handler error.
    nonce2 = str(uuid.uuid4())
    assert post_a.send(envelope(alice, "x", recipient_did=bob.did, channel="TWO_WAY_PRIVATE", nonce=nonce2)) == (
        404,
        err("COMMUNICATION_CONTRACT_NOT_FOUND"),
    )
    contract_both_ways(post_a, alice, bob, tenant_a)
    assert post_a.send(envelope(alice, "x", recipient_did=bob.did, channel="TWO_WAY_PRIVATE", nonce=nonce2)) == (
        401,
        err("DUPLICATE_NONCE"),
    )
    nonce3 = str(uuid.uuid4())
    bad_page = {
        "type": "SAVE_EVENTS",
        "events": [{"sender_did": "a", "recipient_did": "b", "timestamp": 1, "payload": "p"}] * 101,
    }
    assert post_a.send(envelope(alice, bad_page, recipient_did=tenant_a.did, nonce=nonce3)) == (
        400,
        err("INVALID_COMMAND"),
    )
    assert Nonce.objects.filter(nonce=nonce3).exists()
    assert post_a.send(envelope(alice, QUERY, recipient_did=tenant_a.did, nonce=nonce3)) == (
        401,
        err("DUPLICATE_NONCE"),
    )
    assert PendingEvent.objects.count() == 0


def test_an_expired_nonce_record_may_be_reused(post_a, tenant_a, registered, alice):
    env = envelope(alice, QUERY, recipient_did=tenant_a.did)
    assert post_a.send(env)[0] == 200
    # Past its expiry the record no longer blocks (the timestamp window refuses old commands anyway).
    Nonce.objects.filter(nonce=env["header"]["nonce"]).update(expires_at=now_ms() - 1)
    fresh = envelope(alice, QUERY, recipient_did=tenant_a.did, nonce=env["header"]["nonce"])
    assert post_a.send(fresh)[0] == 200
    assert Nonce.objects.filter(nonce=env["header"]["nonce"]).count() == 1


def test_the_nonce_expires_one_window_after_the_header_timestamp(post_a, tenant_a, registered, alice):
    ts = now_ms() - 1000
    env = envelope(alice, QUERY, recipient_did=tenant_a.did, timestamp=ts)
    assert post_a.send(env)[0] == 200
    assert Nonce.objects.get(nonce=env["header"]["nonce"]).expires_at == ts + 300_000


def test_an_unresolvable_sender_is_sender_not_found(post_a, tenant_a, alice):
    before = data_counts()
    for did in ("did:example:123", "did:decentrl:not:a:valid:did", "not a did", "did:web:elsewhere.test"):
        env = envelope(alice, QUERY, recipient_did=tenant_a.did, sender_did=did, sender_signing_key_id=f"{did}#signing")
        assert post_a.send(env) == (404, err("SENDER_NOT_FOUND")), did
    assert data_counts() == before


def test_a_key_id_outside_the_sender_document_is_sender_signing_key_not_found(post_a, tenant_a, registered, alice, bob):
    before = data_counts()
    for key_id in (f"{alice.did}#prekey", f"{bob.did}#signing", "#other", alice.did):
        env = envelope(alice, QUERY, recipient_did=tenant_a.did, sender_signing_key_id=key_id)
        assert post_a.send(env) == (404, err("SENDER_SIGNING_KEY_NOT_FOUND")), key_id
    # the relative form is accepted (docs/protocol-readings.md §1)
    assert post_a.send(envelope(alice, QUERY, recipient_did=tenant_a.did, sender_signing_key_id="#signing"))[0] == 200
    assert data_counts() == before


def test_an_unresolvable_recipient_is_recipient_not_found(post_a, tenant_a, registered, alice):
    before = data_counts()
    for did in ("did:example:nobody", "did:decentrl:broken", "did:web:not.hosted.here"):
        assert post_a.command(alice, "blob", recipient_did=did, channel="TWO_WAY_PRIVATE") == (
            404,
            err("RECIPIENT_NOT_FOUND"),
        )
    assert data_counts() == before


def test_delivery_to_an_unregistered_recipient_is_recipient_not_registered(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    before = data_counts()
    assert post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        404,
        err("RECIPIENT_NOT_REGISTERED"),
    )
    assert data_counts() == before


def test_delivery_without_a_contract_owned_by_the_recipient_is_contract_not_found(
    post_a, tenant_a, registered, alice, bob, dave
):
    before = data_counts()
    assert post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        404,
        err("COMMUNICATION_CONTRACT_NOT_FOUND"),
    )
    # A contract owned by the sender only does not count: the recipient must own it.
    signed, _, _ = signed_contract(alice, bob)
    payload = {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}
    assert post_a.command(alice, payload, recipient_did=tenant_a.did)[0] == 200
    assert post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        404,
        err("COMMUNICATION_CONTRACT_NOT_FOUND"),
    )
    # A contract between the recipient and someone else does not count.
    contract_both_ways(post_a, dave, bob, tenant_a)
    assert post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        404,
        err("COMMUNICATION_CONTRACT_NOT_FOUND"),
    )
    assert PendingEvent.objects.count() == 0
    assert data_counts()["PendingEvent"] == before["PendingEvent"]


def test_an_expired_contract_does_not_count(post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    Contract.objects.filter(owner_did=bob.did, requestor_did=alice.did).update(expires_at=int(time.time()) - 1)
    assert post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        404,
        err("COMMUNICATION_CONTRACT_NOT_FOUND"),
    )
    assert PendingEvent.objects.count() == 0


def test_a_body_over_6_mib_is_payload_too_large(post_a, tenant_a, registered, alice):
    before = row_counts()
    blob = "A" * (6 * 1024 * 1024)
    env = envelope(alice, blob, recipient_did=tenant_a.did, channel="TWO_WAY_PRIVATE")
    assert post_a.send(env) == (413, err("PAYLOAD_TOO_LARGE"))
    assert post_a.raw(b"x" * (6 * 1024 * 1024 + 1)) == (413, err("PAYLOAD_TOO_LARGE"))
    assert row_counts() == before


def test_a_body_just_under_the_cap_is_parsed(post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    env = envelope(alice, "", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    overhead = len(body_of(env))
    env = envelope(alice, "B" * (6 * 1024 * 1024 - overhead), recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert len(body_of(env)) == 6 * 1024 * 1024
    status, body = post_a.send(env)
    assert status == 200 and set(body) == {"type", "pendingEventId"}


def test_a_tenant_with_a_smaller_body_cap_enforces_it(post_a, tenant_a, registered, alice):
    Tenant.objects.filter(pk=tenant_a.pk).update(max_body_bytes=1024)
    env = envelope(
        alice,
        {
            "type": "SAVE_EVENTS",
            "events": [{"sender_did": "a", "recipient_did": "b", "timestamp": 1, "payload": "p" * 2000}],
        },
        recipient_did=tenant_a.did,
    )
    before = row_counts()
    assert post_a.send(env) == (413, err("PAYLOAD_TOO_LARGE"))
    assert row_counts() == before


def test_an_unknown_host_without_a_default_tenant_is_unknown_mediator(client, tenant_a, settings, alice):
    settings.MEDIATOR_DEFAULT_TENANT = ""
    before = row_counts()
    env = envelope(alice, QUERY, recipient_did=tenant_a.did)
    assert Poster("unknown.example").raw(body_of(env)) == (404, err("UNKNOWN_MEDIATOR"))
    resp = client.get("/", HTTP_HOST="unknown.example")
    assert (resp.status_code, json.loads(resp.content)) == (404, err("UNKNOWN_MEDIATOR"))
    resp = client.get("/.well-known/did.json", HTTP_HOST="unknown.example")
    assert (resp.status_code, json.loads(resp.content)) == (404, err("UNKNOWN_MEDIATOR"))
    assert row_counts() == before


def test_an_unknown_host_falls_back_to_the_default_tenant_when_configured(client, tenant_a, settings):
    settings.MEDIATOR_DEFAULT_TENANT = tenant_a.slug
    resp = client.get("/", HTTP_HOST="unknown.example")
    assert resp.status_code == 200 and json.loads(resp.content)["id"] == tenant_a.did


def test_the_host_port_80_is_the_bare_domain(client, tenant_a, settings):
    settings.MEDIATOR_DEFAULT_TENANT = ""
    resp = client.get("/", HTTP_HOST=f"{HOST_A.upper()}:80")
    assert resp.status_code == 200 and json.loads(resp.content)["id"] == tenant_a.did


def test_a_suspended_tenant_is_mediator_unavailable(client, post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    Tenant.objects.filter(pk=tenant_a.pk).update(status=Tenant.Status.SUSPENDED)
    before = row_counts()
    assert post_a.command(alice, QUERY, recipient_did=tenant_a.did) == (503, err("MEDIATOR_UNAVAILABLE"))
    assert post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        503,
        err("MEDIATOR_UNAVAILABLE"),
    )
    assert post_a.raw(b"garbage") == (503, err("MEDIATOR_UNAVAILABLE"))
    resp = client.get("/", HTTP_HOST=HOST_A)
    assert (resp.status_code, json.loads(resp.content)) == (503, err("MEDIATOR_UNAVAILABLE"))
    resp = client.get("/health", HTTP_HOST=HOST_A)
    assert (resp.status_code, json.loads(resp.content)) == (503, {"status": "error", "detail": "mediator suspended"})
    assert row_counts() == before


# --- signatures are verified over what was received (docs/protocol-readings.md §2, docs/contributing.md §8) -----------


def test_reordered_keys_and_whitespace_still_verify(post_a, tenant_a, registered, alice):
    env = envelope(
        alice, {"type": "QUERY_EVENTS", "pagination": {"page_size": 5, "page": 0}}, recipient_did=tenant_a.did
    )
    reordered = {
        "signature": env["signature"],
        "payload": {"pagination": {"page": 0, "page_size": 5}, "type": "QUERY_EVENTS"},
        "header": dict(reversed(list(env["header"].items()))),
    }
    text = json.dumps(reordered, indent=4, ensure_ascii=True)
    status, body = post_a.raw(" \n\t" + text + "\r\n ")
    assert status == 200, body
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 5, "total": 0}


def test_escaped_unicode_verifies_as_its_decoded_form(post_a, tenant_a, registered, alice):
    tag = "tag-ü-😀-\u2028"
    env = envelope(alice, {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": [tag]}}, recipient_did=tenant_a.did)
    assert post_a.raw(json.dumps(env, ensure_ascii=True))[0] == 200


def test_a_float_timestamp_verifies_as_its_canonical_integer(post_a, tenant_a, registered, alice):
    ts = now_ms()
    env = envelope(alice, QUERY, recipient_did=tenant_a.did, timestamp=ts)  # signed over the integer
    text = canonical_bytes(env).decode().replace(f'"timestamp":{ts}', f'"timestamp":{ts}.0')
    assert f'"timestamp":{ts}.0' in text
    status, body = post_a.raw(text)
    assert status == 200, body
    # and an exponent spelling of the same number
    env2 = envelope(alice, QUERY, recipient_did=tenant_a.did, timestamp=ts)
    text2 = canonical_bytes(env2).decode().replace(f'"timestamp":{ts}', f'"timestamp":{ts / 1000}e3')
    assert post_a.raw(text2)[0] == 200


def test_a_fractional_timestamp_is_invalid(post_a, tenant_a, registered, alice):
    env = envelope(alice, QUERY, recipient_did=tenant_a.did, timestamp=now_ms() + 0.5)
    assert post_a.send(env) == (400, err("INVALID_COMMAND"))


def test_a_signature_in_the_url_alphabet_without_padding_verifies(post_a, tenant_a, registered, alice):
    env = envelope(alice, QUERY, recipient_did=tenant_a.did)
    env["signature"] = env["signature"].replace("+", "-").replace("/", "_").rstrip("=")
    assert post_a.send(env)[0] == 200


def test_a_signature_by_another_registered_identity_is_refused(post_a, tenant_a, registered, alice, bob):
    env = envelope(alice, QUERY, recipient_did=tenant_a.did)
    env["signature"] = sign_json_object({"header": env["header"], "payload": env["payload"]}, bob.signing)
    assert post_a.send(env) == (401, err("INVALID_SIGNATURE"))


def test_an_identity_on_another_mediator_is_resolved_locally(post_a, tenant_a, registered, bob):
    stranger = Identity.create("stranger", "did:web:elsewhere.test")
    contract_both_ways(post_a, stranger, bob, tenant_a)
    status, body = post_a.command(stranger, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
    assert status == 200 and set(body) == {"type", "pendingEventId"}


def test_a_full_queue_is_recipient_queue_full_and_evicts_nothing(post_a, tenant_a, registered, alice, bob):
    contract_both_ways(post_a, alice, bob, tenant_a)
    Tenant.objects.filter(pk=tenant_a.pk).update(pending_queue_cap=2)
    assert post_a.command(alice, "1", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    assert post_a.command(alice, "2", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    before = data_counts()
    assert post_a.command(alice, "3", recipient_did=bob.did, channel="TWO_WAY_PRIVATE") == (
        507,
        err("RECIPIENT_QUEUE_FULL"),
    )
    assert data_counts() == before
    # Acknowledging frees room: nothing was evicted to make it.
    first = PendingEvent.objects.order_by("id").first()
    ack = {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": [str(first.public_id)]}
    assert post_a.command(bob, ack, recipient_did=tenant_a.did) == (200, {"type": "SUCCESS"})
    assert post_a.command(alice, "3", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    assert list(PendingEvent.objects.order_by("id").values_list("payload", flat=True)) == ["", "2", "3"]
