"""Web Push for browser wallets: RFC 8030 (the push protocol), RFC 8291 (message encryption,
aes128gcm) and RFC 8292 (VAPID), through pywebpush and py-vapid (docs/push.md, "Providers").

Credentials: `vapid_private_key`, the operator's VAPID private key (PEM, or the base64url raw
32-byte form the `web-push` tools print). Settings: `subject`, the `mailto:` or `https:` contact
the push service may use (VAPID `sub`). The public half is the `applicationServerKey` the wallet
subscribes with (`application_server_key`).

The device token is the browser's PushSubscription as JSON (`{"endpoint", "keys": {"p256dh",
"auth"}}`, `parse_subscription`); the request goes to its endpoint, which must be https (http
only to a loopback host when PUSH_WEBPUSH_ALLOW_HTTP, for the stand-in of the tests).

- The body is encrypted to the subscription's keys (aes128gcm) and says nothing identifying:
  `{"type": "wake"}`, plus the localisation keys when the tenant chose visible pushes (a browser
  shows a notification for every push anyway; the service worker picks its text).
- `TTL` keeps it a day, `Urgency: high` wakes a device in power saving, `Topic` (the collapse id,
  or `wake`) makes the push service replace a wake still waiting instead of queuing another.
- The VAPID JWT has `aud` = the endpoint's origin and `exp` 12 hours ahead (RFC 8292 allows 24).

Answers: 201 is sent; 404 and 410 are dead subscriptions; 429 and 5xx are retried, honouring
Retry-After; 413 (too large), 400, and 401/403 (VAPID refused) fail and keep the subscription.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from cryptography.hazmat.primitives import serialization
from django.conf import settings as django_settings
from py_vapid import Vapid, VapidException
from pywebpush import WebPusher, WebPushException

from apps.ops import egress

from .base import Result, Wake, register
from .http import TIMEOUT, LazyClient, retry_after

KIND = "webpush"
TTL_S = 86400
VAPID_LIFETIME_S = 12 * 3600
# A push service must accept 4,096 bytes of body (RFC 8030 §7.2); aes128gcm adds its header
# (86 bytes with the 65-byte key id), the 16-byte tag and the padding delimiter (RFC 8291 §4).
BODY_LIMIT = 4096
ENCRYPTION_OVERHEAD = 86 + 16 + 1
TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")  # RFC 8030 §5.4: at most 32 base64url characters
SUBJECT = re.compile(r"(mailto:[^@\s]+@[^@\s]+|https://[^\s/]+(/\S*)?)")
SUBSCRIPTION_LIMIT = 4096  # bytes of a subscription's JSON
ENDPOINT_LIMIT = 2048  # characters of its endpoint
# Each reason `parse_subscription` refuses a subscription with, in words (registration's detail).
SUBSCRIPTION_REFUSALS = {
    "subscription_too_large": f"a Web Push subscription is at most {SUBSCRIPTION_LIMIT} bytes, its endpoint at most"
    f" {ENDPOINT_LIMIT} characters",
    "subscription_not_json": "a Web Push subscription is a JSON object",
    "subscription_keys": "keys.p256dh is an uncompressed P-256 point and keys.auth 16 bytes, base64url",
    "subscription_endpoint": "the endpoint is an https URL without credentials",
    "subscription_not_https": "the endpoint must be https",
}
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
REASONS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    410: "gone",
    413: "payload_too_large",
    429: "too_many_requests",
}


@dataclass(frozen=True)
class Subscription:
    endpoint: str
    p256dh: str
    auth: str

    def info(self) -> dict:
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}

    def canonical(self) -> str:
        """The stored form: the endpoint and the two keys only, in canonical JSON."""
        return json.dumps(self.info(), sort_keys=True, separators=(",", ":"))


def _b64url(value: object, size: int) -> bool:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_-]+={0,2}", value):
        return False
    try:
        raw = base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))
    except (binascii.Error, ValueError):
        return False
    return len(raw) == size and (size != 65 or raw[0] == 4)


def parse_subscription(text: str) -> Subscription:
    """A PushSubscription's JSON, checked: the one rule of a subscription, for registration
    (apps/push/services.py, which stores `Subscription.canonical()`) and for each send. An https
    endpoint without credentials, a P-256 point and a 16-byte auth secret; ValueError: one of
    SUBSCRIPTION_REFUSALS."""
    if not isinstance(text, str) or len(text.encode()) > SUBSCRIPTION_LIMIT:
        raise ValueError("subscription_too_large")
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError("subscription_not_json") from None
    if not isinstance(data, dict):
        raise ValueError("subscription_not_json")
    keys = data.get("keys")
    if not isinstance(keys, dict):
        raise ValueError("subscription_keys")
    endpoint = data.get("endpoint")
    if not isinstance(endpoint, str):
        raise ValueError("subscription_endpoint")
    if len(endpoint) > ENDPOINT_LIMIT:
        raise ValueError("subscription_too_large")
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
    except ValueError:
        raise ValueError("subscription_endpoint") from None
    if not host or parts.username or parts.password:
        raise ValueError("subscription_endpoint")
    loopback_http = django_settings.PUSH_WEBPUSH_ALLOW_HTTP and host in LOOPBACK
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback_http):
        raise ValueError("subscription_not_https" if parts.scheme == "http" else "subscription_endpoint")
    if not _b64url(keys.get("p256dh"), 65) or not _b64url(keys.get("auth"), 16):
        raise ValueError("subscription_keys")
    return Subscription(endpoint, keys["p256dh"], keys["auth"])


def _vapid(credentials: dict) -> Vapid:
    """The operator's VAPID key (ValueError: a short reason)."""
    text = credentials.get("vapid_private_key")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("vapid_private_key_missing")
    text = text.strip()
    try:
        key = Vapid.from_pem(text.encode()) if text.startswith("-----BEGIN") else Vapid.from_string(text)
    except (ValueError, TypeError, binascii.Error, VapidException):
        raise ValueError("vapid_private_key_unreadable") from None
    if getattr(key.private_key, "curve", None) is None or key.private_key.curve.name != "secp256r1":
        raise ValueError("vapid_private_key_not_p256")
    return key


def _subject(settings: dict) -> str:
    subject = settings.get("subject")
    if not isinstance(subject, str) or not SUBJECT.fullmatch(subject):
        raise ValueError("subject")
    return subject


def application_server_key(credentials: dict) -> str:
    """The VAPID public key, base64url (no padding): the wallet's `applicationServerKey`."""
    raw = _vapid(credentials).public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def body(wake: Wake) -> bytes:
    """The plaintext of a wake (encrypted before it leaves)."""
    data: dict = {"type": "wake"}
    if wake.visible:
        data.update(
            {k: v for k, v in (("title_loc_key", wake.title_loc_key), ("body_loc_key", wake.body_loc_key)) if v}
        )
    return json.dumps(data, separators=(",", ":")).encode()


def _result(resp: requests.Response) -> Result:
    status = resp.status_code
    if status in (200, 201, 202):
        return Result("sent")
    reason = REASONS.get(status, "server_error" if status >= 500 else "other")
    if status in (404, 410):
        return Result("dead_token", reason)
    if status == 429 or status >= 500:
        return Result("retry", reason, retry_after(resp.headers.get("retry-after")))
    return Result("failed", reason)


class WebPushProvider:
    """The Web Push provider (kind `webpush`)."""

    kind = KIND
    credential_fields = ("vapid_private_key",)
    setting_fields = ("subject",)

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._session = LazyClient(requests.Session, per_thread=True)

    def _http(self) -> requests.Session:
        return self._session.get()

    def check(self, credentials: dict, settings: dict) -> None:
        """The VAPID key is a P-256 key; the subject is a mailto: or https: URL."""
        _subject(settings)
        _vapid(credentials)

    def send(self, credentials: dict, settings: dict, token: str, wake: Wake) -> Result:
        """One push message to one subscription."""
        try:
            vapid, subject = _vapid(credentials), _subject(settings)
            sub = parse_subscription(token)
        except ValueError as exc:
            return Result("failed", str(exc))
        try:  # the endpoint is the client's choice: never a host of the operator's own network
            egress.check_target(
                sub.endpoint,
                allow_private=django_settings.MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE,
                allow_loopback=django_settings.MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK,
            )
        except egress.TargetRefused:
            return Result("failed", "endpoint_refused")
        plaintext = body(wake)
        if len(plaintext) > BODY_LIMIT - ENCRYPTION_OVERHEAD:
            return Result("failed", "payload_too_large")
        parts = urlsplit(sub.endpoint)
        claims = {
            "sub": subject,
            "aud": f"{parts.scheme}://{parts.netloc}",
            "exp": int(self.clock()) + VAPID_LIFETIME_S,
        }
        topic = wake.collapse_id if wake.collapse_id and TOPIC.fullmatch(wake.collapse_id) else "wake"
        try:
            request_headers = {**vapid.sign(claims), "urgency": "high", "topic": topic}
            resp = WebPusher(sub.info(), requests_session=self._http()).send(
                plaintext, request_headers, ttl=TTL_S, content_encoding="aes128gcm", timeout=TIMEOUT.read
            )
        except (VapidException, WebPushException, ValueError):
            return Result("failed", "vapid_or_subscription")
        except requests.Timeout:
            return Result("retry", "timeout")
        except requests.RequestException:
            return Result("retry", "unreachable")
        return _result(resp)


PROVIDER = register(WebPushProvider())
