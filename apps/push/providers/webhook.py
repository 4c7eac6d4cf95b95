"""The webhook provider: the operator's own push gateway (docs/push.md, "Webhook").

Settings: `url`, https (http only under PUSH_WEBHOOK_ALLOW_HTTP, for a loopback stand-in).
Credentials: `secret`, the shared HMAC key (at least 32 characters).

Each wake is one POST of a JSON body:

    {"type": "wake", "tenant": "<slug>", "service": "fcm|apns|webpush", "token": "<device token>",
     "platform": "<platform or null>", "visible": false, "title_loc_key": null,
     "body_loc_key": null, "collapse_id": null}

The token is in it because the gateway pushes to the device itself; nothing else identifies the
subject (no DID, message id, count or sender). The request is signed Stripe-style:
`X-Mediator-Signature: t=<epoch seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`; the
gateway recomputes it over the bytes it received and refuses a `t` older than its tolerance
(300 s suggested), which bounds replays.

Answers: 2xx sent; 410 the token is dead; 429 and 5xx retry (Retry-After honoured), as is 408
and no answer at all; any other status (400, 401, 403, 404…: our request or our secret) fails
and keeps the device. Redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
from django.conf import settings as django_settings

from .base import Result, Wake, register
from .http import TIMEOUT, LazyClient, retry_after, transport_failure

KIND = "webhook"
SECRET_MIN = 32
SIGNATURE_HEADER = "X-Mediator-Signature"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Mediator-Signature value of `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def body(settings: dict, token: str, wake: Wake) -> bytes:
    """The request's JSON body (see the module docstring)."""
    return json.dumps(
        {
            "type": "wake",
            "tenant": settings.get("tenant"),
            "service": settings.get("service"),
            "token": token,
            "platform": settings.get("platform"),
            "visible": wake.visible,
            "title_loc_key": wake.title_loc_key,
            "body_loc_key": wake.body_loc_key,
            "collapse_id": wake.collapse_id,
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


class WebhookProvider:
    """The webhook provider (kind `webhook`)."""

    kind = KIND

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._http = LazyClient(lambda: httpx.Client(timeout=TIMEOUT, follow_redirects=False))

    def check(self, credentials: dict, settings: dict) -> None:
        secret = credentials.get("secret")
        if not isinstance(secret, str) or len(secret) < SECRET_MIN:
            raise ValueError(f"the secret is at least {SECRET_MIN} characters")
        url = settings.get("url")
        if not isinstance(url, str) or not url:
            raise ValueError("the URL is required")
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:
            raise ValueError("the URL is not a URL") from None
        if not host or parts.scheme not in ("https", "http"):
            raise ValueError("the URL is not an http(s) URL")
        if parts.scheme == "http" and not (django_settings.PUSH_WEBHOOK_ALLOW_HTTP and host in _LOOPBACK):
            raise ValueError("the URL must be https")

    def send(self, credentials: dict, settings: dict, token: str, wake: Wake) -> Result:
        try:
            self.check(credentials, settings)
        except ValueError:
            return Result("failed", "misconfigured")
        raw = body(settings, token, wake)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(credentials["secret"], int(self._clock()), raw),
        }
        try:
            answer = self._http.get().post(settings["url"], content=raw, headers=headers)
        except httpx.HTTPError as exc:
            return transport_failure(exc)
        status = answer.status_code
        if 200 <= status < 300:
            return Result("sent")
        if status == 410:
            return Result("dead_token", "gone")
        if status in (408, 429) or status >= 500:
            return Result(
                "retry",
                f"http_{status}" if status in (408, 429, 500, 502, 503, 504) else "http_5xx",
                retry_after(answer.headers.get("Retry-After")),
            )
        return Result("failed", f"http_{status}" if status in (400, 401, 403, 404, 413) else "http_4xx")


PROVIDER = register(WebhookProvider())
