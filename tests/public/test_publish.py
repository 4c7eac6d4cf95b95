"""Publishing over ONE_WAY_PUBLIC (DCTRL-0007 §5, §8; docs/protocol-readings.md §8): authorization, the
event-level signature, verbatim storage, and every tenant cap at its edge (N accepted, N+1 refused)."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.messaging.models import Contract, PublicEvent
from apps.tenants.models import Tenant
from apps.wire.canonical import canonical_bytes
from apps.wire.crypto import sign_json_object
from apps.wire.public import sign_public_event
from tests.support.entry import wsgi_call

pytestmark = pytest.mark.django_db

UNAUTHORIZED = {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"}
INVALID_COMMAND = {"type": "ERROR", "code": "INVALID_COMMAND"}
INVALID_SIGNATURE = {"type": "ERROR", "code": "INVALID_SIGNATURE"}


def _policy(tenant, **fields):
    Tenant.objects.filter(pk=tenant.pk).update(**fields)


def test_a_registered_publisher_publishes_and_the_event_is_stored_verbatim(pub_a, tenant_a, alice_reg):
    event = '{"type":"blog.post","data":{"title":"Hé 👋","body":"line\\nbreak"}}'
    ev = sign_public_event(
        alice_reg.signing, channel_id="blog", event=event, tags=["blog.post", "ünï"], timestamp=1_699_123_456
    )
    status, body = pub_a.publish_event(alice_reg, ev)
    assert status == 200
    public_id = body["payload"]["public_event_id"]
    assert body == {"type": "SUCCESS", "payload": {"public_event_id": public_id}}
    assert str(uuid.UUID(public_id)) == public_id
    row = PublicEvent.objects.get(public_id=public_id)
    assert (row.tenant_id, row.publisher_did, row.channel_id) == (tenant_a.pk, alice_reg.did, "blog")
    assert (row.event, row.tags, row.timestamp, row.signature) == (
        event,
        ["blog.post", "ünï"],
        1_699_123_456,
        ev["signature"],
    )
    assert row.event_bytes == len(event.encode("utf-8"))
    assert row.deleted_at is None


def test_an_integral_float_timestamp_is_accepted_and_still_verifies(pub_a, alice_reg, read_a):
    body = {"channel_id": "blog", "event": "x", "tags": [], "timestamp": 1_699_123_456.0}
    ev = {**body, "signature": sign_json_object(body, alice_reg.signing)}
    status, reply = pub_a.publish_event(alice_reg, ev)
    assert status == 200, reply
    _, listing = read_a.json(alice_reg.did)
    assert listing["payload"]["public_events"][0]["timestamp"] == 1_699_123_456


def test_an_unregistered_publisher_is_unauthorized(pub_a, alice):
    assert pub_a.publish(alice) == (401, UNAUTHORIZED)
    assert PublicEvent.objects.count() == 0


def test_a_publisher_whose_registration_expired_is_unauthorized(pub_a, alice_reg):
    Contract.objects.filter(owner_did=alice_reg.did).update(expires_at=1)
    assert pub_a.publish(alice_reg) == (401, UNAUTHORIZED)


def test_a_publisher_registered_only_on_another_tenant_is_unauthorized(pub_a, carol_reg):
    assert pub_a.publish(carol_reg) == (401, UNAUTHORIZED)


def test_a_command_addressed_to_someone_else_is_unauthorized(pub_a, alice_reg, bob_reg):
    assert pub_a.publish(alice_reg, recipient_did=bob_reg.did) == (401, UNAUTHORIZED)
    assert pub_a.delete(alice_reg, str(uuid.uuid4()), recipient_did=bob_reg.did) == (401, UNAUTHORIZED)


def test_an_unregistered_identity_cannot_delete(pub_a, alice):
    assert pub_a.delete(alice, str(uuid.uuid4())) == (401, UNAUTHORIZED)


def test_a_tampered_event_is_invalid_signature(pub_a, alice_reg):
    ev = sign_public_event(alice_reg.signing, channel_id="blog", event="original", tags=["t"], timestamp=1)
    for field, value in (("event", "altered"), ("channel_id", "other"), ("tags", ["t", "u"]), ("timestamp", 2)):
        assert pub_a.publish_event(alice_reg, {**ev, field: value}) == (401, INVALID_SIGNATURE), field
    assert PublicEvent.objects.count() == 0


def test_an_event_signed_by_another_identity_is_invalid_signature(pub_a, alice_reg, bob):
    ev = sign_public_event(bob.signing, channel_id="blog", event="impersonation", tags=[], timestamp=1)
    assert pub_a.publish_event(alice_reg, ev) == (401, INVALID_SIGNATURE)


@pytest.mark.parametrize("signature", ["not base64!", "AAAA", "A" * 128])
def test_a_malformed_event_signature_is_invalid_signature(pub_a, alice_reg, signature):
    ev = sign_public_event(alice_reg.signing, channel_id="blog", event="x", tags=[], timestamp=1)
    assert pub_a.publish_event(alice_reg, {**ev, "signature": signature}) == (401, INVALID_SIGNATURE)


def test_a_url_alphabet_unpadded_event_signature_is_accepted_and_kept_as_sent(pub_a, alice_reg):
    ev = sign_public_event(alice_reg.signing, channel_id="blog", event="x", tags=[], timestamp=1)
    urlsafe = ev["signature"].rstrip("=").replace("+", "-").replace("/", "_")
    status, body = pub_a.publish_event(alice_reg, {**ev, "signature": urlsafe})
    assert status == 200, body
    assert PublicEvent.objects.get().signature == urlsafe


def test_the_command_signature_is_still_checked(pub_a, alice_reg, tenant_a):
    ev = sign_public_event(alice_reg.signing, channel_id="blog", event="x", tags=[], timestamp=1)
    env = alice_reg.sign_command(
        recipient_did=tenant_a.did,
        payload={"type": "PUBLISH_PUBLIC_EVENT", "public_event": ev},
        channel="ONE_WAY_PUBLIC",
    )
    env["payload"]["public_event"]["channel_id"] = "swapped"  # after signing
    assert pub_a.poster.send(env) == (401, INVALID_SIGNATURE)


def test_a_replayed_publish_is_a_duplicate_nonce(pub_a, alice_reg, tenant_a):
    ev = sign_public_event(alice_reg.signing, channel_id="blog", event="x", tags=[], timestamp=1)
    env = alice_reg.sign_command(
        recipient_did=tenant_a.did,
        payload={"type": "PUBLISH_PUBLIC_EVENT", "public_event": ev},
        channel="ONE_WAY_PUBLIC",
    )
    assert pub_a.poster.send(env)[0] == 200
    assert pub_a.poster.send(env) == (401, {"type": "ERROR", "code": "DUPLICATE_NONCE"})
    assert PublicEvent.objects.count() == 1


@pytest.mark.parametrize(
    "public_event",
    [
        {"channel_id": "", "event": "x", "tags": [], "timestamp": 1},
        {"channel_id": "blog", "event": 5, "tags": [], "timestamp": 1},
        {"channel_id": "blog", "event": "x", "tags": [1], "timestamp": 1},
        {"channel_id": "blog", "event": "x", "tags": "t", "timestamp": 1},
        {"channel_id": "blog", "event": "x", "tags": [], "timestamp": 1.5},
        {"channel_id": "blog", "event": "x", "tags": [], "timestamp": -1},
        {"channel_id": "blog", "event": "x", "tags": []},
        {"channel_id": "blog", "event": "x", "tags": [], "timestamp": 1, "signature": ""},
    ],
)
def test_a_malformed_public_event_is_invalid_command(pub_a, alice_reg, public_event):
    ev = {"signature": "A" * 88, **public_event}
    assert pub_a.publish_event(alice_reg, ev) == (400, INVALID_COMMAND)


@pytest.mark.parametrize("field", ["channel_id", "event", "tags"])
def test_a_nul_character_is_invalid_command_not_a_database_error(pub_a, alice_reg, field):
    values = {"channel_id": "bl\x00og", "event": "a\x00b", "tags": ["t\x00"]}
    kw = {"channel_id": "blog", "event": "x", "tags": []}
    kw[field] = values[field]
    assert pub_a.publish(alice_reg, **kw) == (400, INVALID_COMMAND)


# --- caps at their edges ------------------------------------------------------------------------


def test_event_size_cap_accepts_n_bytes_and_refuses_n_plus_one(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, public_event_max_bytes=64)
    assert pub_a.publish(alice_reg, event="é" * 32)[0] == 200  # 64 UTF-8 bytes
    assert pub_a.publish(alice_reg, event="é" * 32 + "a") == (413, {"type": "ERROR", "code": "PAYLOAD_TOO_LARGE"})


def test_tag_count_cap_accepts_n_and_refuses_n_plus_one(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, public_max_tags=3)
    assert pub_a.publish(alice_reg, tags=["a", "b", "c"])[0] == 200
    assert pub_a.publish(alice_reg, tags=["a", "b", "c", "d"]) == (400, INVALID_COMMAND)


def test_tag_length_cap_accepts_n_and_refuses_n_plus_one(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, max_tag_length=8)
    assert pub_a.publish(alice_reg, tags=["t" * 8])[0] == 200
    assert pub_a.publish(alice_reg, tags=["t" * 9]) == (400, INVALID_COMMAND)


def test_channel_id_cap_accepts_n_and_refuses_n_plus_one(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, public_channel_id_max_length=10)
    assert pub_a.publish(alice_reg, channel_id="c" * 10)[0] == 200
    assert pub_a.publish(alice_reg, channel_id="c" * 11) == (400, INVALID_COMMAND)


def test_zero_caps_mean_no_tenant_cap(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, public_event_max_bytes=0, public_max_tags=0, public_channel_id_max_length=0)
    assert (
        pub_a.publish(alice_reg, event="x" * 100_000, tags=[str(i) for i in 100 * [0]], channel_id="c" * 256)[0] == 200
    )


def test_publish_rate_accepts_n_per_minute_and_refuses_n_plus_one_with_retry_after(pub_a, tenant_a, alice_reg, bob_reg):
    _policy(tenant_a, public_publish_per_minute=3)
    for _ in range(3):
        assert pub_a.publish(alice_reg)[0] == 200
    status, headers, reply = wsgi_call(
        pub_a.poster.app,
        canonical_bytes(
            alice_reg.sign_command(
                recipient_did=tenant_a.did,
                payload={
                    "type": "PUBLISH_PUBLIC_EVENT",
                    "public_event": sign_public_event(
                        alice_reg.signing, channel_id="b", event="x", tags=[], timestamp=1
                    ),
                },
                channel="ONE_WAY_PUBLIC",
            )
        ),
        host=pub_a.poster.host,
    )
    assert (status, json.loads(reply)) == ("429 Too Many Requests", {"type": "ERROR", "code": "RATE_LIMITED"})
    assert 1 <= int(dict(headers)["Retry-After"]) <= 60
    assert PublicEvent.objects.filter(publisher_did=alice_reg.did).count() == 3
    # The cap is per publisher: bob is not affected.
    assert pub_a.publish(bob_reg)[0] == 200


def test_the_rate_window_slides(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, public_publish_per_minute=2)
    assert pub_a.publish(alice_reg)[0] == 200
    assert pub_a.publish(alice_reg)[0] == 200
    assert pub_a.publish(alice_reg)[0] == 429
    oldest = PublicEvent.objects.order_by("id").first()
    PublicEvent.objects.filter(pk=oldest.pk).update(created_at=timezone.now() - timedelta(seconds=61))
    assert pub_a.publish(alice_reg)[0] == 200
    assert pub_a.publish(alice_reg)[0] == 429


def test_deleting_does_not_give_back_publish_quota(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, public_publish_per_minute=1)
    event_id = pub_a.publish_ok(alice_reg)
    assert pub_a.delete(alice_reg, event_id) == (200, {"type": "SUCCESS"})
    assert pub_a.publish(alice_reg)[0] == 429


def test_publish_rate_zero_means_unlimited(pub_a, tenant_a, alice_reg):
    _policy(tenant_a, public_publish_per_minute=0)
    for _ in range(5):
        assert pub_a.publish(alice_reg)[0] == 200


def test_a_publish_costs_a_bounded_number_of_queries(pub_a, alice_reg, django_assert_max_num_queries):
    pub_a.publish_ok(alice_reg)  # warm caches (tenant lookup etc.)
    with django_assert_max_num_queries(12):
        pub_a.publish_ok(alice_reg)
