"""The FCM HTTP v1 provider against its strict stand-in (tests/support/push_standins.py): the OAuth
JWT bearer flow (one exchange for many sends, a new one before expiry), the message, every
documented error's Result (a dead token only when the token is dead), the 4,096-byte limit, and
the credential check."""

from __future__ import annotations

import json
import time

import httpx
import jwt
import pytest
import time_machine
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from apps.push.providers.base import Result, Wake
from apps.push.providers.fcm import EARLY_REFRESH_S, FcmProvider
from tests.support.push_standins import (
    FCM_SCOPE,
    GOOGLE_TOKEN_AUDIENCE,
    JWT_BEARER,
    FcmStandin,
    fake_service_account,
)
from tests.support.servers import free_port

SILENT = Wake()
VISIBLE = Wake(visible=True, title_loc_key="wake_title", body_loc_key="wake_body", collapse_id="wake")


@pytest.fixture(scope="module")
def standin():
    server = FcmStandin()
    yield server
    server.close()


@pytest.fixture(scope="module")
def account(standin):
    return standin.account()


@pytest.fixture(autouse=True)
def _fcm_url(settings, standin):
    settings.PUSH_FCM_URL = standin.url


@pytest.fixture
def fcm():
    """A provider of its own: its token cache starts empty."""
    return FcmProvider()


def creds(account) -> dict:
    """The sealed credentials of an FCM provider: the key file's object (as PushProvider.seal gets it)."""
    return json.loads(account.text)


def test_a_silent_wake_reaches_fcm_as_a_content_free_data_message(standin, account, fcm):
    before = len(standin.exchanges)

    assert fcm.send(creds(account), {}, "device-token-1", SILENT) == Result("sent")

    assert standin.messages[-1] == {
        "token": "device-token-1",
        "data": {"type": "wake"},
        "android": {"priority": "high", "ttl": "86400s"},
        "apns": {
            "headers": {"apns-push-type": "background", "apns-priority": "5"},
            "payload": {"aps": {"content-available": 1}},
        },
    }
    claims = standin.exchanges[before]
    assert (claims["iss"], claims["aud"], claims["scope"]) == (
        account.info["client_email"],
        GOOGLE_TOKEN_AUDIENCE,
        FCM_SCOPE,
    )
    assert claims["exp"] - claims["iat"] <= 3600


def test_a_visible_wake_is_a_localised_notification_collapsed_on_both_platforms(standin, account, fcm):
    assert fcm.send(creds(account), {}, "device-token-2", VISIBLE) == Result("sent")

    assert standin.messages[-1] == {
        "token": "device-token-2",
        "data": {"type": "wake"},
        "android": {
            "priority": "high",
            "ttl": "86400s",
            "collapse_key": "wake",
            "notification": {"title_loc_key": "wake_title", "body_loc_key": "wake_body", "tag": "wake"},
        },
        "apns": {
            "headers": {"apns-push-type": "alert", "apns-priority": "10", "apns-collapse-id": "wake"},
            "payload": {"aps": {"alert": {"title-loc-key": "wake_title", "loc-key": "wake_body"}}},
        },
    }


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("UNREGISTERED", Result("dead_token", "UNREGISTERED")),
        ("INVALID_TOKEN", Result("dead_token", "INVALID_ARGUMENT")),
        ("INVALID_TOKEN_FIELD", Result("dead_token", "INVALID_ARGUMENT")),
        ("INVALID_PAYLOAD", Result("failed", "INVALID_ARGUMENT")),
        ("MISSING_RECIPIENT", Result("failed", "INVALID_ARGUMENT")),
        ("TOO_BIG", Result("failed", "INVALID_ARGUMENT")),
        ("SENDER_ID_MISMATCH", Result("failed", "SENDER_ID_MISMATCH")),
        ("THIRD_PARTY_AUTH_ERROR", Result("failed", "THIRD_PARTY_AUTH_ERROR")),
        ("QUOTA_EXCEEDED", Result("retry", "QUOTA_EXCEEDED", 60.0)),
        ("UNAVAILABLE", Result("retry", "UNAVAILABLE", None)),
        ("INTERNAL", Result("retry", "INTERNAL", None)),
    ],
)
def test_each_documented_error_maps_to_its_result(standin, account, fcm, answer, expected):
    token = f"device-{answer}"
    standin.fail(token, answer)

    assert fcm.send(creds(account), {}, token, SILENT) == expected


@pytest.mark.parametrize(
    ("answer", "header", "wait"),
    [
        ("UNAVAILABLE", "120", 120.0),
        ("INTERNAL", "7", 7.0),
        ("QUOTA_EXCEEDED", "5", 60.0),
        ("QUOTA_EXCEEDED", "300", 300.0),
    ],
)
def test_retries_honour_retry_after_and_quota_backs_off_a_minute_at_least(standin, account, fcm, answer, header, wait):
    token = f"device-{answer}-{header}"
    standin.fail(token, answer, retry_after=header)

    assert fcm.send(creds(account), {}, token, SILENT).retry_after_s == wait


def test_an_http_date_retry_after_is_seconds_from_now(standin, account, fcm):
    with time_machine.travel(1_900_000_000, tick=False):
        standin.fail("device-date", "UNAVAILABLE", retry_after="Sun, 17 Mar 2030 17:48:20 GMT")  # +100 s

        assert fcm.send(creds(account), {}, "device-date", SILENT) == Result("retry", "UNAVAILABLE", 100.0)


def test_many_sends_make_one_token_exchange_and_a_new_one_before_it_expires(standin, account, fcm):
    with time_machine.travel(time.time(), tick=False) as clock:
        before = len(standin.exchanges)
        for i in range(5):
            assert fcm.send(creds(account), {}, f"device-cache-{i}", SILENT) == Result("sent")
        assert len(standin.exchanges) == before + 1

        clock.shift(3599 - EARLY_REFRESH_S - 1)  # the stand-in's token lives 3,599 s
        assert fcm.send(creds(account), {}, "device-cache-late", SILENT) == Result("sent")
        assert len(standin.exchanges) == before + 1

        clock.shift(2)
        assert fcm.send(creds(account), {}, "device-cache-renewed", SILENT) == Result("sent")
        assert len(standin.exchanges) == before + 2


def test_each_tenants_credentials_have_their_own_token(standin, account, fcm):
    other = standin.account(project_id="other-wallet", name="other")
    before = len(standin.exchanges)

    assert fcm.send(creds(account), {}, "device-a", SILENT) == Result("sent")
    assert fcm.send(creds(other), {}, "device-b", SILENT) == Result("sent")
    assert fcm.send(creds(account), {}, "device-a", SILENT) == Result("sent")

    assert [c["iss"] for c in standin.exchanges[before:]] == [account.info["client_email"], other.info["client_email"]]


def test_a_revoked_access_token_is_exchanged_again_once(standin, account, fcm):
    assert fcm.send(creds(account), {}, "device-r", SILENT) == Result("sent")
    before = len(standin.exchanges)
    standin.revoke_access_tokens()

    assert fcm.send(creds(account), {}, "device-r", SILENT) == Result("sent")
    assert len(standin.exchanges) == before + 1


def test_a_key_google_does_not_know_is_refused_and_sends_nothing(standin, account, fcm):
    forged = dict(fake_service_account(standin.token_uri).info, private_key_id=account.info["private_key_id"])
    sent = len(standin.messages)

    result = fcm.send(forged, {}, "device-f", SILENT)

    assert result == Result("failed", "oauth_refused")
    assert standin.refused_exchanges[-1] == "InvalidSignatureError"
    assert len(standin.messages) == sent


def test_a_project_the_token_is_not_for_is_refused(standin, account, fcm):
    wrong = dict(account.info, project_id="someone-else")

    assert fcm.send(wrong, {}, "device-p", SILENT) == Result("failed", "PERMISSION_DENIED")


def test_a_payload_over_4096_bytes_is_not_sent(standin, account, fcm):
    requests = standin.requests
    big = Wake(visible=True, title_loc_key="t" * 4000, body_loc_key="b", collapse_id="wake")

    assert fcm.send(creds(account), {}, "device-big", big) == Result("failed", "payload_too_large")
    assert standin.requests == requests


def test_the_standin_refuses_a_message_over_4096_bytes(standin, account, fcm):
    assert fcm.send(creds(account), {}, "device-warm", SILENT) == Result("sent")
    access = next(iter(standin.access_tokens))
    message = {"token": "x", "data": {"type": "wake", "pad": "p" * 4096}}

    resp = httpx.post(
        f"{standin.url}/v1/projects/wallet-test/messages:send",
        json={"message": message},
        headers={"authorization": f"Bearer {access}"},
    )

    assert (resp.status_code, resp.json()["error"]["status"]) == (400, "INVALID_ARGUMENT")


def test_a_provider_that_does_not_answer_is_retried(settings, account, fcm):
    settings.PUSH_FCM_URL = f"http://127.0.0.1:{free_port()}"

    assert fcm.send(creds(account), {}, "device-down", SILENT) == Result("retry", "unreachable")


def test_a_token_endpoint_that_does_not_answer_is_retried(fcm):
    down = fake_service_account(f"http://127.0.0.1:{free_port()}/token")

    assert fcm.send(creds(down), {}, "device-down", SILENT) == Result("retry", "oauth_unreachable")


def _ec_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


BAD_PEM = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda info: {}, "service_account_missing"),
        (lambda info: {**info, "type": "authorized_user"}, "service_account_type"),
        (lambda info: {k: v for k, v in info.items() if k != "client_email"}, "service_account_client_email_missing"),
        (lambda info: {**info, "project_id": 7}, "service_account_project_id_missing"),
        (lambda info: {**info, "client_email": "nobody"}, "service_account_client_email"),
        (lambda info: {**info, "token_uri": "file:///etc/passwd"}, "service_account_token_uri"),
        (lambda info: {**info, "private_key": BAD_PEM}, "service_account_private_key"),
        (lambda info: {**info, "private_key": _ec_pem()}, "service_account_private_key"),
    ],
)
def test_check_rejects_bad_credentials(account, fcm, change, reason):
    with pytest.raises(ValueError, match=f"^{reason}$"):
        fcm.check(change(creds(account)), {})


def test_check_accepts_a_service_account_key_offline(standin, account, fcm):
    requests = standin.requests

    fcm.check(creds(account), {})

    assert standin.requests == requests


def _assertion(account, lifetime: int = 3600, **claims) -> str:
    now = int(time.time())
    payload = {"iss": account.info["client_email"], "scope": FCM_SCOPE, "aud": GOOGLE_TOKEN_AUDIENCE, "iat": now}
    payload["exp"] = now + lifetime
    payload.update(claims)
    return jwt.encode(
        payload, account.info["private_key"], algorithm="RS256", headers={"kid": account.info["private_key_id"]}
    )


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"lifetime": 3601}, "Invalid JWT: Token must be a short-lived token (60 minutes)"),
        ({"scope": "https://www.googleapis.com/auth/cloud-platform.read-only"}, "scope"),
        ({"aud": "https://example.com/token"}, "InvalidAudienceError"),
        ({"iss": "someone@else.iam.gserviceaccount.com"}, "InvalidIssuerError"),
    ],
)
def test_the_standins_token_endpoint_refuses_a_wrong_assertion(standin, account, claims, why):
    resp = httpx.post(standin.token_uri, data={"grant_type": JWT_BEARER, "assertion": _assertion(account, **claims)})

    assert (resp.status_code, resp.json()["error"], standin.refused_exchanges[-1]) == (400, "invalid_grant", why)


def test_the_standin_refuses_a_data_value_that_is_not_a_string(standin, account, fcm):
    assert fcm.send(creds(account), {}, "device-warm", SILENT) == Result("sent")
    access = next(iter(standin.access_tokens))

    resp = httpx.post(
        f"{standin.url}/v1/projects/wallet-test/messages:send",
        json={"message": {"token": "x", "data": {"n": 1}}},
        headers={"authorization": f"Bearer {access}"},
    )

    assert resp.json()["error"]["details"][0]["fieldViolations"][0]["field"] == "message.data[0].value"
