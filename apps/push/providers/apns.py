"""Apple Push Notification service, the provider API over HTTP/2 with token authentication
(docs/push.md, "Providers"; the wire contract is Apple's "Sending notification requests to APNs"
and "Establishing a token-based connection to APNs").

Credentials: `signing_key`, the text of the `.p8` key file the operator downloaded from the Apple
developer account. Settings: `key_id` (that key's id), `team_id`, `bundle_id` (the app's bundle
id, the `apns-topic`) and `environment` (`production` or `sandbox`: which APNs host).

- The provider token is an ES256 JWT `{alg: ES256, kid}{iss: team_id, iat}` made by PyJWT. It is
  kept per credential set and reused for `REUSE_S` (Apple: not older than an hour, and a new one
  at most every 20 minutes, else 429 TooManyProviderTokenUpdates).
- A wake is a background push by default (`apns-push-type: background`, priority 5, aps
  `content-available`, nothing identifying); a visible one is an alert from localisation keys
  (priority 10) collapsed by `apns-collapse-id`. `apns-expiration` keeps it a day for a phone
  that is off. The 4,096-byte payload limit is checked before sending.
- HTTP/2 only (`http1=False`): over https it is negotiated with ALPN; over an http:// base URL
  (the loopback stand-in of the tests) it is HTTP/2 with prior knowledge (h2c).

Answers: 410 (`Unregistered`, `ExpiredToken`), 400 `BadDeviceToken` and `DeviceTokenNotForTopic`
are dead tokens; 429 and 500/503 are retried; 403 `ExpiredProviderToken`/`InvalidProviderToken`
makes a new provider token and tries once more when the refused one is old enough to replace
(`MIN_REMINT_S`), else fails; every other answer fails and keeps the token.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from django.conf import settings as django_settings

from .base import Result, Wake, register
from .http import TIMEOUT, LazyClient, bounded, retry_after, transport_failure
from .tokens import Token, TokenCache, credentials_key

KIND = "apns"
PAYLOAD_LIMIT = 4096  # bytes, Apple's limit for a (non-VoIP) notification payload
REUSE_S = 50 * 60  # a provider token is replaced after this
MIN_REMINT_S = 20 * 60  # and never sooner than this after the last one (TooManyProviderTokenUpdates)
EXPIRATION_S = 86400  # apns-expiration: APNs keeps a wake this long for a phone that is off
DEVICE_TOKEN = re.compile(r"[0-9a-fA-F]{8,200}")  # hex, and it goes into the URL path
TEN_CHARS = re.compile(r"[A-Z0-9]{10}")  # Apple's key ids and team ids
BUNDLE_ID = re.compile(r"[A-Za-z0-9.-]{1,155}")
ENVIRONMENTS = ("production", "sandbox")
DEAD = {410: frozenset({"Unregistered", "ExpiredToken"}), 400: frozenset({"BadDeviceToken", "DeviceTokenNotForTopic"})}
STALE_PROVIDER_TOKEN = frozenset({"ExpiredProviderToken", "InvalidProviderToken"})
# Apple's documented reasons: a Result's reason is one of these.
REASONS = frozenset(
    {
        "BadCollapseId",
        "BadDeviceToken",
        "BadExpirationDate",
        "BadMessageId",
        "BadPriority",
        "BadTopic",
        "DeviceTokenNotForTopic",
        "DuplicateHeaders",
        "IdleTimeout",
        "InvalidPushType",
        "MissingDeviceToken",
        "MissingTopic",
        "PayloadEmpty",
        "TopicDisallowed",
        "BadCertificate",
        "BadCertificateEnvironment",
        "ExpiredProviderToken",
        "Forbidden",
        "InvalidProviderToken",
        "MissingProviderToken",
        "UnrelatedKeyIdInToken",
        "BadEnvironmentKeyIdInToken",
        "BadPath",
        "MethodNotAllowed",
        "ExpiredToken",
        "Unregistered",
        "PayloadTooLarge",
        "TooManyProviderTokenUpdates",
        "TooManyRequests",
        "InternalServerError",
        "ServiceUnavailable",
        "Shutdown",
    }
)


def _signing_key(credentials: dict) -> ec.EllipticCurvePrivateKey:
    """The tenant's .p8 key, checked to be a P-256 key (ValueError: a short reason)."""
    text = credentials.get("signing_key")
    if not isinstance(text, str) or "-----BEGIN" not in text:
        raise ValueError("signing_key_missing")
    try:
        key = load_pem_private_key(text.strip().encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError("signing_key_unreadable") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("signing_key_not_p256")
    return key


def _settings(settings: dict) -> tuple[str, str, str, str]:
    """(key_id, team_id, bundle_id, environment), each checked (ValueError: a short reason)."""
    key_id, team_id = settings.get("key_id"), settings.get("team_id")
    bundle_id, environment = settings.get("bundle_id"), settings.get("environment", "production")
    if not isinstance(key_id, str) or not TEN_CHARS.fullmatch(key_id):
        raise ValueError("key_id")
    if not isinstance(team_id, str) or not TEN_CHARS.fullmatch(team_id):
        raise ValueError("team_id")
    if not isinstance(bundle_id, str) or not BUNDLE_ID.fullmatch(bundle_id):
        raise ValueError("bundle_id")
    if environment not in ENVIRONMENTS:
        raise ValueError("environment")
    return key_id, team_id, bundle_id, str(environment)


def payload(wake: Wake) -> dict:
    """The notification's JSON: a content-free background push, or an alert of localisation keys."""
    if not wake.visible:
        return {"aps": {"content-available": 1}, "type": "wake"}
    alert = {k: v for k, v in (("title-loc-key", wake.title_loc_key), ("loc-key", wake.body_loc_key)) if v}
    return {"aps": {"alert": alert}, "type": "wake"}


def headers(wake: Wake, *, bundle_id: str, now: float) -> dict[str, str]:
    """The apns-* request headers of a wake."""
    out = {
        "apns-topic": bundle_id,
        "apns-push-type": "alert" if wake.visible else "background",
        "apns-priority": "10" if wake.visible else "5",
        "apns-expiration": str(int(now) + EXPIRATION_S),
    }
    if wake.visible and wake.collapse_id:
        out["apns-collapse-id"] = wake.collapse_id
    return out


def _reason(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return ""
    return str(body.get("reason", "")) if isinstance(body, dict) else ""


def _result(resp: httpx.Response, reason: str) -> Result:
    status = resp.status_code
    if status == 200:
        return Result("sent")
    code = bounded(reason, REASONS)
    if reason in DEAD.get(status, ()):
        return Result("dead_token", code)
    if status == 429 or status >= 500:
        return Result("retry", code, retry_after(resp.headers.get("retry-after")))
    return Result("failed", code)


class ApnsProvider:
    """The APNs provider (kind `apns`)."""

    kind = KIND
    credential_fields = ("signing_key",)
    setting_fields = ("key_id", "team_id", "bundle_id", "environment")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.tokens = TokenCache()
        # APNs wants long-lived connections: one pooled client per process, HTTP/2 only.
        self._client = LazyClient(lambda: httpx.Client(http1=False, http2=True, timeout=TIMEOUT))

    def _http(self) -> httpx.Client:
        return self._client.get()

    def check(self, credentials: dict, settings: dict) -> None:
        """The key is a P-256 PEM key, the ids and the bundle id have Apple's shapes."""
        _settings(settings)
        _signing_key(credentials)

    def _mint(self, key: ec.EllipticCurvePrivateKey, key_id: str, team_id: str) -> Token:
        now = self.clock()
        value = jwt.encode(
            {"iss": team_id, "iat": int(now)}, key, algorithm="ES256", headers={"kid": key_id, "typ": None}
        )
        return Token(value, now, now + 3600)

    def send(self, credentials: dict, settings: dict, token: str, wake: Wake) -> Result:
        """One notification request to one device token."""
        try:
            key_id, team_id, bundle_id, environment = _settings(settings)
            key = _signing_key(credentials)
        except ValueError as exc:
            return Result("failed", str(exc))
        if not DEVICE_TOKEN.fullmatch(token):
            return Result("failed", "malformed_token")
        body = json.dumps(payload(wake), separators=(",", ":")).encode()
        if len(body) > PAYLOAD_LIMIT:
            return Result("failed", "payload_too_large")
        base = django_settings.PUSH_APNS_URL if environment == "production" else django_settings.PUSH_APNS_SANDBOX_URL
        url = f"{base.rstrip('/')}/3/device/{token}"
        cache_key = credentials_key(team_id, key_id, credentials["signing_key"])
        reminted = False
        while True:
            jwt_token = self.tokens.get(
                cache_key,
                now=self.clock,
                fresh=lambda t, now: now - t.issued_at < REUSE_S,
                make=lambda: self._mint(key, key_id, team_id),
            )
            request_headers = {
                "authorization": f"bearer {jwt_token.value}",
                "content-type": "application/json",
                **headers(wake, bundle_id=bundle_id, now=self.clock()),
            }
            try:
                resp = self._http().post(url, content=body, headers=request_headers)
            except httpx.HTTPError as exc:
                return transport_failure(exc)
            reason = _reason(resp)
            old_enough = self.clock() - jwt_token.issued_at >= MIN_REMINT_S
            if resp.status_code != 403 or reason not in STALE_PROVIDER_TOKEN or reminted or not old_enough:
                return _result(resp, reason)
            reminted = True  # APNs finds our provider token stale: one new token, once
            self.tokens.drop(cache_key, jwt_token)


PROVIDER = register(ApnsProvider())
