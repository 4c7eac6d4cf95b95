"""The push-device commands (PUSH_DEVICE_SET / _GET / _REMOVE, our extension outside DCTRL-0004:
docs/push.md, "Registration") through the production WSGI entry: a registered identity registers,
reads, replaces and removes its own device; an unregistered one is refused and nothing is stored;
another tenant's identity touches nothing here; a bad token is INVALID_COMMAND; and where the
tenant turns the extension off they are refused exactly as an unknown command is."""

from __future__ import annotations

import base64

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from apps.push.models import Device
from apps.push.services import subject_for_did
from apps.usage import records as request_records
from apps.wire.client import MediatorClient
from mediator_project.entry import protocol_application
from tests.support.entry import HOST_A, keep_test_connection
from tests.support.registration import register

pytestmark = pytest.mark.django_db

FCM_TOKEN = "fcm:APA91b" + "q" * 150
FCM_TOKEN_2 = "fcm:APA91b" + "r" * 150


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def subscription() -> str:
    point = (
        ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    )
    return (
        '{"endpoint":"https://push.example.net/wpush/v2/abc","keys":'
        f'{{"p256dh":"{_b64url(point)}","auth":"{_b64url(bytes(range(16)))}"}}}}'
    )


def rows(tenant) -> list[tuple[str, str, str, str | None]]:
    return [
        (d.subject, d.service, d.token, d.platform) for d in Device.objects.filter(tenant=tenant).order_by("service")
    ]


def cmd(post, who, tenant, payload):
    return post.command(who, payload, recipient_did=tenant.did)


def test_a_registered_identity_sets_reads_replaces_and_removes_its_devices(post_a, tenant_a, alice):
    register(post_a, alice, tenant_a)
    subject = subject_for_did(alice.did)
    set_fcm = {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": FCM_TOKEN, "platform": "android"}
    assert cmd(post_a, alice, tenant_a, set_fcm) == (200, {"type": "SUCCESS"})
    assert rows(tenant_a) == [(subject, "fcm", FCM_TOKEN, "android")]
    assert cmd(post_a, alice, tenant_a, {"type": "PUSH_DEVICE_GET", "service": "fcm"}) == (
        200,
        {"type": "SUCCESS", "payload": {"device": {"service": "fcm", "token": FCM_TOKEN, "platform": "android"}}},
    )
    cmd(post_a, alice, tenant_a, {**set_fcm, "token": FCM_TOKEN_2, "platform": None})
    sub = subscription()
    assert cmd(post_a, alice, tenant_a, {"type": "PUSH_DEVICE_SET", "service": "webpush", "token": sub})[0] == 200
    stored = rows(tenant_a)
    assert [r[:2] for r in stored] == [(subject, "fcm"), (subject, "webpush")]
    assert stored[0][2:] == (FCM_TOKEN_2, None)
    assert cmd(post_a, alice, tenant_a, {"type": "PUSH_DEVICE_REMOVE", "service": "fcm"}) == (
        200,
        {"type": "SUCCESS", "payload": {"removed": True}},
    )
    assert cmd(post_a, alice, tenant_a, {"type": "PUSH_DEVICE_REMOVE", "service": "fcm"}) == (
        200,
        {"type": "SUCCESS", "payload": {"removed": False}},
    )
    assert cmd(post_a, alice, tenant_a, {"type": "PUSH_DEVICE_GET", "service": "fcm"}) == (
        200,
        {"type": "SUCCESS", "payload": {"device": None}},
    )
    assert [r[1] for r in rows(tenant_a)] == ["webpush"]


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"type": "PUSH_DEVICE_SET", "service": "fcm", "token": "has spaces"}, "an FCM token is printable ASCII"),
        ({"type": "PUSH_DEVICE_SET", "service": "apns", "token": "not-hex" * 10}, "an APNs token is hex"),
        ({"type": "PUSH_DEVICE_SET", "service": "webpush", "token": '{"endpoint":"http://x"}'}, "no keys"),
        ({"type": "PUSH_DEVICE_SET", "service": "fcm", "token": "t" * 4097}, "over the cap"),
        ({"type": "PUSH_DEVICE_SET", "service": "fcm", "token": FCM_TOKEN, "platform": "Android!"}, "platform"),
    ],
)
def test_a_bad_token_is_invalid_command_and_stores_nothing(post_a, tenant_a, alice, payload, why):
    register(post_a, alice, tenant_a)
    assert cmd(post_a, alice, tenant_a, payload) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"}), why
    assert rows(tenant_a) == []


def test_an_unregistered_identity_is_refused_and_nothing_is_stored(post_a, tenant_a, bob):
    payload = {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": FCM_TOKEN}
    assert cmd(post_a, bob, tenant_a, payload) == (401, {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"})
    assert rows(tenant_a) == []


def test_an_identity_of_tenant_b_touches_nothing_on_tenant_a(post_a, post_b, tenant_a, tenant_b, alice, carol):
    register(post_a, alice, tenant_a)
    register(post_b, carol, tenant_b)
    cmd(post_a, alice, tenant_a, {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": FCM_TOKEN})
    # carol, registered on B only, asks A (addressed to A's DID): not registered there
    payload = {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": FCM_TOKEN_2}
    assert cmd(post_a, carol, tenant_a, payload) == (401, {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"})
    # on B, her own device; A's stays A's and B reads nothing of it
    assert cmd(post_b, carol, tenant_b, payload)[0] == 200
    assert cmd(post_b, carol, tenant_b, {"type": "PUSH_DEVICE_GET", "service": "fcm"})[1]["payload"]["device"][
        "token"
    ] == (FCM_TOKEN_2)
    assert [r[2] for r in rows(tenant_a)] == [FCM_TOKEN] and [r[2] for r in rows(tenant_b)] == [FCM_TOKEN_2]
    # addressed to B's DID but sent to A's host: not for this mediator
    status, body = post_a.command(carol, {"type": "PUSH_DEVICE_GET", "service": "fcm"}, recipient_did=tenant_b.did)
    assert (status, body) == (401, {"type": "ERROR", "code": "UNAUTHORIZED_COMMAND"})


def test_turned_off_they_are_refused_exactly_as_an_unknown_command(post_a, tenant_a, alice, monkeypatch):
    register(post_a, alice, tenant_a)
    tenant_a.decentrl_push_devices = False
    tenant_a.save()  # the tenant caches drop it on save
    seen: list = []
    monkeypatch.setattr(request_records, "OBSERVERS", [*request_records.OBSERVERS, seen.append])
    unknown = cmd(post_a, alice, tenant_a, {"type": "NO_SUCH_COMMAND", "service": "fcm"})
    for payload in (
        {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": FCM_TOKEN},
        {"type": "PUSH_DEVICE_GET", "service": "fcm"},
        {"type": "PUSH_DEVICE_REMOVE", "service": "fcm"},
    ):
        assert cmd(post_a, alice, tenant_a, payload) == unknown == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
    # metered as the unknown command is: no command type, no sender
    assert {(r.command_type, r.sender_did, r.code) for r in seen} == {(None, None, "INVALID_COMMAND")}
    assert rows(tenant_a) == []


def test_the_client_library_has_a_method_per_command(tenant_a, post_a, alice):
    """apps/wire/client.py's push_device_set / push_device / push_device_remove, over the production WSGI
    application in process (the same bytes as over a socket)."""
    register(post_a, alice, tenant_a)
    http = httpx.Client(transport=httpx.WSGITransport(app=protocol_application()))
    client = MediatorClient(f"http://{HOST_A}", http=http)
    with keep_test_connection():
        assert client.push_device_set(alice, "apns", "AB" * 32) == {"type": "SUCCESS"}
        assert client.push_device(alice, "apns") == {"service": "apns", "token": "ab" * 32, "platform": None}
        assert client.push_device(alice, "fcm") is None
        assert client.push_device_remove(alice, "apns") is True
        assert client.push_device_remove(alice, "apns") is False
    client.close()
