"""The Web Push provider against its strict stand-in (tests/support/push_standins.py): the VAPID
JWT (RFC 8292) the push service verifies, the aes128gcm body (RFC 8291) it decrypts with the
browser's key, TTL/Urgency/Topic (RFC 8030), every answer's Result (a dead subscription only on
404/410), the body limit, and the credential check."""

from __future__ import annotations

import json
import time

import jwt
import pytest
import time_machine
from cryptography.hazmat.primitives.asymmetric import ec

from apps.push.providers.base import Result, Wake
from apps.push.providers.webpush import (
    TTL_S,
    VAPID_LIFETIME_S,
    WebPushProvider,
    application_server_key,
    parse_subscription,
)
from tests.support.push_standins import WebPushStandin, b64url, vapid_key_pair

SUBJECT = {"subject": "mailto:ops@wallet.example"}
SILENT = Wake()
VISIBLE = Wake(visible=True, title_loc_key="wake_title", body_loc_key="wake_body", collapse_id="wake-1")


@pytest.fixture(scope="module")
def standin():
    server = WebPushStandin()
    yield server
    server.close()


@pytest.fixture(scope="module")
def vapid():
    private_pem, public = vapid_key_pair()
    return {"vapid_private_key": private_pem}, public


@pytest.fixture(autouse=True)
def _loopback_endpoints(settings):
    settings.PUSH_WEBPUSH_ALLOW_HTTP = True


@pytest.fixture
def webpush():
    return WebPushProvider()


def test_a_wake_reaches_the_browser_encrypted_and_vapid_signed(standin, vapid, webpush):
    credentials, public = vapid
    sub = standin.subscribe(public)
    with time_machine.travel(time.time(), tick=False):
        now = int(time.time())

        assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == Result("sent")

    sub_id, headers, plaintext = standin.received[-1]
    assert (sub_id, json.loads(plaintext)) == (sub.id, {"type": "wake"})
    assert (headers["ttl"], headers["urgency"], headers["topic"], headers["content-encoding"]) == (
        str(TTL_S),
        "high",
        "wake",
        "aes128gcm",
    )
    token = headers["authorization"].split("t=", 1)[1].split(",", 1)[0]
    assert jwt.decode(token, options={"verify_signature": False}) == {
        "aud": standin.url,
        "exp": now + VAPID_LIFETIME_S,
        "sub": "mailto:ops@wallet.example",
    }


def test_a_visible_wake_carries_the_localisation_keys_and_its_collapse_topic(standin, vapid, webpush):
    credentials, public = vapid
    sub = standin.subscribe(public)

    assert webpush.send(credentials, SUBJECT, sub.json, VISIBLE) == Result("sent")

    _id, headers, plaintext = standin.received[-1]
    assert json.loads(plaintext) == {"type": "wake", "title_loc_key": "wake_title", "body_loc_key": "wake_body"}
    assert headers["topic"] == "wake-1"


def test_wakes_waiting_at_the_push_service_coalesce_on_their_topic(standin, vapid, webpush):
    credentials, public = vapid
    sub = standin.subscribe(public)

    for _ in range(3):
        assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == Result("sent")

    assert [key for key in standin.waiting if key[0] == sub.id] == [(sub.id, "wake")]


def test_the_raw_form_of_a_vapid_key_works_too(standin, webpush):
    raw = ec.generate_private_key(ec.SECP256R1()).private_numbers().private_value.to_bytes(32, "big")
    credentials = {"vapid_private_key": b64url(raw)}
    sub = standin.subscribe(application_server_key(credentials))

    assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == Result("sent")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (404, Result("dead_token", "not_found")),
        (410, Result("dead_token", "gone")),
        (413, Result("failed", "payload_too_large")),
        (400, Result("failed", "bad_request")),
        (401, Result("failed", "unauthorized")),
        (403, Result("failed", "forbidden")),
        (429, Result("retry", "too_many_requests")),
        (500, Result("retry", "server_error")),
        (503, Result("retry", "server_error")),
    ],
)
def test_each_answer_maps_to_its_result(standin, vapid, webpush, status, expected):
    credentials, public = vapid
    sub = standin.subscribe(public)
    standin.fail(sub, status)

    assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == expected


@pytest.mark.parametrize("status", [429, 503])
def test_retries_honour_retry_after(standin, vapid, webpush, status):
    credentials, public = vapid
    sub = standin.subscribe(public)
    standin.fail(sub, status, retry_after="90")

    assert webpush.send(credentials, SUBJECT, sub.json, SILENT).retry_after_s == 90.0


def test_a_subscription_made_with_another_vapid_key_is_refused_and_kept(standin, vapid, webpush):
    credentials, _public = vapid
    _other_private, other_public = vapid_key_pair()
    sub = standin.subscribe(other_public)

    assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == Result("failed", "forbidden")
    assert standin.refusals[-1] == "403 vapid key is not the subscription's applicationServerKey"


def test_a_body_not_encrypted_to_the_subscription_is_refused(standin, vapid, webpush):
    credentials, public = vapid
    sub, other = standin.subscribe(public), standin.subscribe(public)
    swapped = json.dumps({**json.loads(sub.json), "keys": json.loads(other.json)["keys"]})

    assert webpush.send(credentials, SUBJECT, swapped, SILENT) == Result("failed", "bad_request")
    assert standin.refusals[-1] == "400 does not decrypt: ECEException"


def test_a_subscription_the_push_service_forgot_is_dead(standin, vapid, webpush):
    credentials, public = vapid
    sub = standin.subscribe(public)
    del standin.subscriptions[sub.id]

    assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == Result("dead_token", "not_found")


def test_a_body_over_the_limit_is_not_sent(standin, vapid, webpush):
    credentials, public = vapid
    sub = standin.subscribe(public)
    received = len(standin.received) + len(standin.refusals)

    big = Wake(visible=True, title_loc_key="t" * 4000)
    assert webpush.send(credentials, SUBJECT, sub.json, big) == Result("failed", "payload_too_large")
    assert len(standin.received) + len(standin.refusals) == received


def test_a_push_service_that_does_not_answer_is_retried(vapid, webpush):
    credentials, public = vapid
    gone = WebPushStandin()
    sub = gone.subscribe(public)
    gone.close()

    assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == Result("retry", "unreachable")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: "not json", "subscription_not_json"),
        (lambda s: json.dumps({**s, "keys": None}), "subscription_keys"),
        (lambda s: json.dumps({**s, "keys": {**s["keys"], "auth": "AAAA"}}), "subscription_keys"),
        (lambda s: json.dumps({**s, "keys": {**s["keys"], "p256dh": "AAAA"}}), "subscription_keys"),
        (lambda s: json.dumps({**s, "endpoint": "file:///etc/passwd"}), "subscription_endpoint"),
        (lambda s: json.dumps({**s, "endpoint": "https://user:pw@push.example/x"}), "subscription_endpoint"),
        (lambda s: json.dumps({**s, "endpoint": "http://push.example/x"}), "subscription_not_https"),
        (lambda s: json.dumps({**s, "endpoint": "https://push.example/" + "x" * 2048}), "subscription_too_large"),
        (lambda s: json.dumps([s]), "subscription_not_json"),
        (lambda s: json.dumps({**s, "pad": "x" * 4096}), "subscription_too_large"),
    ],
)
def test_a_malformed_subscription_is_refused(standin, vapid, change, reason):
    sub = json.loads(standin.subscribe(vapid[1]).json)
    with pytest.raises(ValueError, match=f"^{reason}$"):
        parse_subscription(change(sub))


def test_an_http_endpoint_is_refused_outside_the_tests(settings, standin, vapid, webpush):
    credentials, public = vapid
    settings.PUSH_WEBPUSH_ALLOW_HTTP = False
    sub = standin.subscribe(public)

    assert webpush.send(credentials, SUBJECT, sub.json, SILENT) == Result("failed", "subscription_not_https")


@pytest.mark.parametrize(("allow_private", "allow_loopback", "sent"), [(False, False, False), (False, True, True)])
def test_an_endpoint_on_the_operators_own_network_is_never_reached(
    settings, standin, vapid, webpush, allow_private, allow_loopback, sent
):
    """The subscription's endpoint is the client's choice: a host that resolves to a loopback or
    private address is refused before any request (the outbound target rule, apps/ops/egress.py)."""
    credentials, public = vapid
    settings.MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE = allow_private
    settings.MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK = allow_loopback
    sub = standin.subscribe(public)
    before = len(standin.received)

    result = webpush.send(credentials, SUBJECT, sub.json, SILENT)

    assert (result, len(standin.received) - before) == (
        (Result("sent"), 1) if sent else (Result("failed", "endpoint_refused"), 0)
    )


@pytest.mark.parametrize(
    ("credentials", "tenant_settings", "reason"),
    [
        ({"vapid_private_key": ""}, SUBJECT, "vapid_private_key_missing"),
        ({"vapid_private_key": "not a key"}, SUBJECT, "vapid_private_key_unreadable"),
        (None, {"subject": "ops@wallet.example"}, "subject"),
        (None, {"subject": "http://wallet.example"}, "subject"),
        (None, {}, "subject"),
    ],
)
def test_check_rejects_bad_credentials(vapid, webpush, credentials, tenant_settings, reason):
    with pytest.raises(ValueError, match=f"^{reason}$"):
        webpush.check(credentials or vapid[0], tenant_settings)


def test_check_accepts_a_vapid_key_and_gives_its_application_server_key(vapid, webpush):
    credentials, public = vapid

    webpush.check(credentials, SUBJECT)
    assert application_server_key(credentials) == public
