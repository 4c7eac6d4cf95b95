"""Device registration's rules (apps/push/services.py): each service's token checked and capped,
one device per service per subject, the subject's device count on its queue-depth row, the
subject rule of both protocols, and sealed provider credentials."""

from __future__ import annotations

import base64
import json

import pytest

from apps.didcomm.models import presence_key
from apps.messaging.models import PendingQueueDepth
from apps.push import services
from apps.push.models import Device, PushProvider
from apps.push.services import DEVICE_ERRORS, DeviceInvalid

P256 = base64.urlsafe_b64encode(b"\x04" + b"\x01" * 64).decode().rstrip("=")
AUTH = base64.urlsafe_b64encode(b"\x02" * 16).decode().rstrip("=")


def _sub(endpoint="https://push.example/abc", p256dh=P256, auth=AUTH, **extra) -> str:
    return json.dumps({"endpoint": endpoint, "keys": {"p256dh": p256dh, "auth": auth}, **extra})


@pytest.mark.parametrize(
    ("service", "token", "platform", "code"),
    [
        ("gcm", "x", None, "service_unknown"),
        ("fcm", "", None, "token_invalid"),
        ("fcm", "has space", None, "token_invalid"),
        ("fcm", "a" * 4097, None, "token_too_large"),
        ("apns", "zz" * 32, None, "token_invalid"),
        ("apns", "ab" * 31, None, "token_invalid"),
        ("apns", "ab" * 101, None, "token_too_large"),
        ("webpush", "not json", None, "token_invalid"),
        ("webpush", _sub(endpoint="http://push.example/abc"), None, "endpoint_not_https"),
        ("webpush", _sub(p256dh=AUTH), None, "token_invalid"),
        ("webpush", _sub(auth=P256), None, "token_invalid"),
        ("webpush", _sub(pad="x" * 5000), None, "token_too_large"),
        ("webpush", _sub(endpoint="https://push.example/" + "x" * 2048), None, "token_too_large"),
        # Registration and sending share one rule (webpush.parse_subscription): what a send would
        # refuse is never registered.
        ("webpush", _sub(endpoint="https://user:pw@push.example/abc"), None, "token_invalid"),
        ("webpush", _sub(endpoint="file:///etc/passwd"), None, "token_invalid"),
        ("webpush", json.dumps([1]), None, "token_invalid"),
        ("fcm", "tok", "iOS 17", "platform_invalid"),
    ],
)
def test_a_bad_device_is_refused_with_its_code_and_nothing_stored(tenant_a, service, token, platform, code):
    with pytest.raises(DeviceInvalid) as caught:
        services.device_set(tenant=tenant_a, subject="did:example:bob", service=service, token=token, platform=platform)
    assert caught.value.code == code and code in DEVICE_ERRORS
    assert token not in caught.value.detail or not token
    assert Device.objects.count() == 0


def test_an_empty_subject_is_refused(tenant_a):
    with pytest.raises(DeviceInvalid) as caught:
        services.device_set(tenant=tenant_a, subject="", service="fcm", token="t", platform=None)
    assert caught.value.code == "subject_invalid"


def test_one_device_per_service_and_the_count_on_the_subjects_row(tenant_a):
    subject = "did:example:bob"
    services.device_set(tenant=tenant_a, subject=subject, service="fcm", token="t1", platform="android")
    services.device_set(tenant=tenant_a, subject=subject, service="fcm", token="t2", platform="android")
    services.device_set(tenant=tenant_a, subject=subject, service="apns", token="AB" * 32, platform="ios")
    services.device_set(tenant=tenant_a, subject=subject, service="webpush", token=_sub(extra=1), platform=None)
    rows = {d.service: d.token for d in services.devices_of(tenant=tenant_a, subject=subject)}
    assert rows == {"fcm": "t2", "apns": "ab" * 32, "webpush": _canonical()}
    assert PendingQueueDepth.objects.get(recipient_did=subject).devices == 3
    assert services.device_remove(tenant=tenant_a, subject=subject, service="fcm") is True
    assert services.device_remove(tenant=tenant_a, subject=subject, service="fcm") is False
    assert PendingQueueDepth.objects.get(recipient_did=subject).devices == 2


def _canonical() -> str:
    return json.dumps(
        {"endpoint": "https://push.example/abc", "keys": {"auth": AUTH, "p256dh": P256}},
        separators=(",", ":"),
        sort_keys=True,
    )


def test_a_prune_keeps_a_device_registered_again_with_another_token(tenant_a):
    device = services.device_set(tenant=tenant_a, subject="s", service="fcm", token="old", platform=None)
    services.device_set(tenant=tenant_a, subject="s", service="fcm", token="new", platform=None)
    assert services.device_prune(tenant_id=tenant_a.pk, device_id=device.pk, token="old") is False
    assert services.device_get(tenant=tenant_a, subject="s", service="fcm").token == "new"


def test_one_subject_rule_for_both_protocols():
    assert services.subject_for_did("did:decentrl:abc") == "did:decentrl:abc"
    assert services.subject_for_mediation("f" * 64) == "didcomm:" + "f" * 64 == presence_key("f" * 64)


def test_provider_credentials_are_sealed_at_rest(tenant_a):
    provider = PushProvider(tenant=tenant_a, kind="webhook", settings={"url": "https://gw.example/wake"})
    provider.seal({"secret": "top-secret-value-" * 3})
    provider.save()
    stored = PushProvider.objects.get()
    assert "top-secret" not in stored.credentials_sealed
    assert stored.credentials() == {"secret": "top-secret-value-" * 3}
