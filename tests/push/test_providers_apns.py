"""The APNs provider against its strict HTTP/2 stand-in (tests/support/push_standins.py): the ES256
provider token (one for many sends, reused up to 50 minutes, a new one after; never refreshed
within 20 minutes), the request headers and payload, every documented answer's Result (a dead
token only when the token is dead), the payload limit, and the credential check."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest
import time_machine
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from apps.push.providers.apns import EXPIRATION_S, MIN_REMINT_S, REUSE_S, ApnsProvider
from apps.push.providers.base import Result, Wake
from tests.support.push_standins import ApnsStandin
from tests.support.servers import free_port

BUNDLE = "org.example.wallet"
SILENT = Wake()
VISIBLE = Wake(visible=True, title_loc_key="wake_title", body_loc_key="wake_body", collapse_id="wake")


@pytest.fixture(scope="module")
def standin():
    server = ApnsStandin()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _apns_url(settings, standin):
    settings.PUSH_APNS_URL = standin.url
    settings.PUSH_APNS_SANDBOX_URL = f"http://127.0.0.1:{free_port()}"  # nothing there


@pytest.fixture
def team(standin):
    """A team of its own per test: the stand-in's token-update rule counts per key."""
    key = standin.key(BUNDLE)
    credentials = {"signing_key": key.pem}
    settings = {"key_id": key.key_id, "team_id": key.team_id, "bundle_id": BUNDLE, "environment": "production"}
    return key, credentials, settings


@pytest.fixture
def apns():
    return ApnsProvider()


def test_a_silent_wake_is_a_background_push_with_a_verified_provider_token(standin, team, apns):
    key, credentials, settings = team
    device = standin.device(BUNDLE)
    with time_machine.travel(time.time(), tick=False):
        now = int(time.time())

        assert apns.send(credentials, settings, device, SILENT) == Result("sent")

    assert standin.deliveries[-1] == (
        device,
        {
            "apns-topic": BUNDLE,
            "apns-push-type": "background",
            "apns-priority": "5",
            "apns-expiration": str(now + EXPIRATION_S),
        },
        {"aps": {"content-available": 1}, "type": "wake"},
    )
    (token,) = standin.provider_tokens[key.key_id]
    assert jwt.get_unverified_header(token) == {"alg": "ES256", "kid": key.key_id}
    assert jwt.decode(token, key.public_key, algorithms=["ES256"]) == {"iss": key.team_id, "iat": now}


def test_a_visible_wake_is_an_alert_of_localisation_keys_collapsed(standin, team, apns):
    _key, credentials, settings = team
    device = standin.device(BUNDLE)

    assert apns.send(credentials, settings, device, VISIBLE) == Result("sent")

    _device, headers, payload = standin.deliveries[-1]
    assert (headers["apns-push-type"], headers["apns-priority"], headers["apns-collapse-id"]) == ("alert", "10", "wake")
    assert payload == {"aps": {"alert": {"title-loc-key": "wake_title", "loc-key": "wake_body"}}, "type": "wake"}


def test_the_sandbox_environment_uses_the_sandbox_host(settings, standin, team, apns):
    _key, credentials, tenant_settings = team
    settings.PUSH_APNS_SANDBOX_URL, settings.PUSH_APNS_URL = standin.url, f"http://127.0.0.1:{free_port()}"

    assert apns.send(credentials, {**tenant_settings, "environment": "sandbox"}, standin.device(BUNDLE), SILENT) == (
        Result("sent")
    )


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (410, "Unregistered", Result("dead_token", "Unregistered")),
        (410, "ExpiredToken", Result("dead_token", "ExpiredToken")),
        (400, "BadDeviceToken", Result("dead_token", "BadDeviceToken")),
        (400, "DeviceTokenNotForTopic", Result("dead_token", "DeviceTokenNotForTopic")),
        (400, "BadCollapseId", Result("failed", "BadCollapseId")),
        (400, "BadPriority", Result("failed", "BadPriority")),
        (400, "PayloadEmpty", Result("failed", "PayloadEmpty")),
        (413, "PayloadTooLarge", Result("failed", "PayloadTooLarge")),
        (403, "BadCertificateEnvironment", Result("failed", "BadCertificateEnvironment")),
        (403, "ExpiredProviderToken", Result("failed", "ExpiredProviderToken")),
        (403, "InvalidProviderToken", Result("failed", "InvalidProviderToken")),
        (429, "TooManyRequests", Result("retry", "TooManyRequests")),
        (429, "TooManyProviderTokenUpdates", Result("retry", "TooManyProviderTokenUpdates")),
        (500, "InternalServerError", Result("retry", "InternalServerError")),
        (503, "ServiceUnavailable", Result("retry", "ServiceUnavailable")),
        (503, "Shutdown", Result("retry", "Shutdown")),
        (400, "SomethingNew", Result("failed", "other")),
    ],
)
def test_each_documented_answer_maps_to_its_result(standin, team, apns, status, reason, expected):
    _key, credentials, settings = team
    device = standin.device(BUNDLE)
    standin.fail(device, status, reason)

    assert apns.send(credentials, settings, device, SILENT) == expected


def test_a_token_apns_does_not_know_and_one_of_another_app_are_dead(standin, team, apns):
    _key, credentials, settings = team

    assert apns.send(credentials, settings, "ab" * 32, SILENT) == Result("dead_token", "BadDeviceToken")
    assert apns.send(credentials, settings, standin.device("org.example.other"), SILENT) == Result(
        "dead_token", "DeviceTokenNotForTopic"
    )


def test_too_many_requests_honours_retry_after(standin, team, apns):
    _key, credentials, settings = team
    device = standin.device(BUNDLE)
    standin.fail(device, 429, "TooManyRequests", retry_after="30")

    assert apns.send(credentials, settings, device, SILENT) == Result("retry", "TooManyRequests", 30.0)


def test_one_provider_token_serves_many_sends_and_is_replaced_after_50_minutes(standin, team, apns):
    key, credentials, settings = team
    device = standin.device(BUNDLE)
    with time_machine.travel(time.time(), tick=False) as clock:
        for _ in range(5):
            assert apns.send(credentials, settings, device, SILENT) == Result("sent")
        assert len(standin.provider_tokens[key.key_id]) == 1

        clock.shift(REUSE_S - 1)
        assert apns.send(credentials, settings, device, SILENT) == Result("sent")
        assert len(standin.provider_tokens[key.key_id]) == 1

        clock.shift(1)
        assert apns.send(credentials, settings, device, SILENT) == Result("sent")
        assert len(standin.provider_tokens[key.key_id]) == 2


def test_a_stale_provider_token_is_replaced_once_when_old_enough(standin, team, apns):
    key, credentials, settings = team
    device = standin.device(BUNDLE)
    with time_machine.travel(time.time(), tick=False) as clock:
        assert apns.send(credentials, settings, device, SILENT) == Result("sent")
        clock.shift(MIN_REMINT_S)
        standin.stale_before[key.key_id] = int(time.time())  # APNs now finds the token expired

        assert apns.send(credentials, settings, device, SILENT) == Result("sent")
        assert len(standin.provider_tokens[key.key_id]) == 2


def test_a_stale_provider_token_younger_than_20_minutes_is_not_replaced(standin, team, apns):
    key, credentials, settings = team
    device = standin.device(BUNDLE)
    with time_machine.travel(time.time(), tick=False) as clock:
        assert apns.send(credentials, settings, device, SILENT) == Result("sent")
        clock.shift(MIN_REMINT_S - 1)
        standin.stale_before[key.key_id] = int(time.time())

        assert apns.send(credentials, settings, device, SILENT) == Result("failed", "ExpiredProviderToken")
        assert len(standin.provider_tokens[key.key_id]) == 1


def test_a_second_new_token_within_20_minutes_is_throttled_by_apns(standin, team, apns):
    """Two processes (two caches) on one key: APNs takes the second new token as too many updates."""
    key, credentials, settings = team
    device = standin.device(BUNDLE)

    assert apns.send(credentials, settings, device, SILENT) == Result("sent")
    assert ApnsProvider().send(credentials, settings, device, SILENT) == Result("retry", "TooManyProviderTokenUpdates")
    assert len(standin.provider_tokens[key.key_id]) == 1


def test_a_token_signed_by_another_key_is_refused(standin, team, apns):
    key, _credentials, settings = team
    other = standin.key(BUNDLE)

    assert apns.send({"signing_key": other.pem}, settings, standin.device(BUNDLE), SILENT) == Result(
        "failed", "InvalidProviderToken"
    )


def test_a_payload_over_4096_bytes_is_not_sent(standin, team, apns):
    _key, credentials, settings = team
    requests = standin.requests
    big = Wake(visible=True, title_loc_key="t" * 4096)

    assert apns.send(credentials, settings, standin.device(BUNDLE), big) == Result("failed", "payload_too_large")
    assert standin.requests == requests


def test_a_malformed_device_token_never_reaches_apns(standin, team, apns):
    _key, credentials, settings = team
    requests = standin.requests

    assert apns.send(credentials, settings, "../../3/device/x", SILENT) == Result("failed", "malformed_token")
    assert standin.requests == requests


def test_the_standin_speaks_only_http2(standin):
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"{standin.url}/3/device/{'ab' * 32}", content=b"{}")


def test_a_provider_that_does_not_answer_is_retried(settings, team, apns):
    _key, credentials, tenant_settings = team
    settings.PUSH_APNS_URL = f"http://127.0.0.1:{free_port()}"

    assert apns.send(credentials, tenant_settings, "ab" * 32, SILENT) == Result("retry", "unreachable")


def _rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.mark.parametrize(
    ("credentials", "change", "reason"),
    [
        ({"signing_key": ""}, {}, "signing_key_missing"),
        (
            {"signing_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"},
            {},
            "signing_key_unreadable",
        ),
        ({"signing_key": _rsa_pem()}, {}, "signing_key_not_p256"),
        (None, {"key_id": "short"}, "key_id"),
        (None, {"team_id": "lowercase!"}, "team_id"),
        (None, {"bundle_id": "no spaces"}, "bundle_id"),
        (None, {"environment": "staging"}, "environment"),
    ],
)
def test_check_rejects_bad_credentials(team, apns, credentials, change, reason):
    _key, good_credentials, settings = team
    with pytest.raises(ValueError, match=f"^{reason}$"):
        apns.check(credentials or good_credentials, {**settings, **change})


def test_check_accepts_a_p8_key_and_apples_ids(team, apns):
    _key, credentials, settings = team

    apns.check(credentials, settings)


def _raw(standin, team, **headers) -> httpx.Response:
    key, _credentials, _settings = team
    token = jwt.encode(
        {"iss": key.team_id, "iat": int(time.time())}, key.pem, algorithm="ES256", headers={"kid": key.key_id}
    )
    with httpx.Client(http1=False, http2=True) as client:
        return client.post(
            f"{standin.url}/3/device/{standin.device(BUNDLE)}",
            content=b'{"aps":{"content-available":1}}',
            headers={"authorization": f"bearer {token}", **headers},
        )


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [
        ({"apns-push-type": "background", "apns-priority": "5"}, 400, "MissingTopic"),
        (
            {"apns-topic": "org.example.other", "apns-push-type": "background", "apns-priority": "5"},
            400,
            "TopicDisallowed",
        ),
        ({"apns-topic": BUNDLE, "apns-push-type": "silent", "apns-priority": "5"}, 400, "InvalidPushType"),
        ({"apns-topic": BUNDLE, "apns-push-type": "background", "apns-priority": "10"}, 400, "BadPriority"),
        (
            {"apns-topic": BUNDLE, "apns-push-type": "background", "apns-priority": "5", "apns-collapse-id": "c" * 65},
            400,
            "BadCollapseId",
        ),
    ],
)
def test_the_standin_refuses_wrong_headers(standin, team, headers, status, reason):
    resp = _raw(standin, team, **headers)

    assert (resp.status_code, resp.json()["reason"]) == (status, reason)
