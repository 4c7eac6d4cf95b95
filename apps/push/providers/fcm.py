"""Firebase Cloud Messaging, HTTP v1 API (docs/push.md, "Providers"; the wire contract is
Firebase's `projects.messages.send` and its ErrorCode reference).

Credentials: the JSON key file of a Google service account of the tenant's Firebase project, the
object itself (the operator pastes the file's text; it is sealed as parsed). No settings: the
project is the key's `project_id`.

- The access token comes from the OAuth 2.0 JWT bearer flow run by google-auth
  (`google.oauth2.service_account.Credentials`, scope `firebase.messaging`): it signs the RS256
  assertion and POSTs it to the key's `token_uri`. The token is kept per credential set until
  `EARLY_REFRESH_S` before it expires (`tokens.TokenCache`), so many sends make one exchange.
- The message is data-only and high priority by default, with nothing identifying in it
  (`{"type": "wake"}`; on iOS a background push). A tenant that chose visible pushes gets a
  notification built from localisation keys, collapsed by its collapse id on both platforms.
- FCM's limit of 4,096 bytes applies to the message without its target (the token): it is
  checked before anything is sent.

Answers (`_result`): 404 `UNREGISTERED` is a dead token. 400 `INVALID_ARGUMENT` is a dead token
only when an `FcmError` detail says INVALID_ARGUMENT and no `google.rpc.BadRequest` field
violation names anything but `message.token` (Firebase documents the invalid-token answer with the
FcmError detail alone; FCM also answers it with a violation on `message.token`; a violation on any
other field, such as `message` when no target is set, or a 400 with no FcmError detail at all,
such as a payload FCM finds too big, is about our message and keeps the token). 429
`QUOTA_EXCEEDED` is retried after at least 60 s; 500 `INTERNAL` and 503 `UNAVAILABLE` are
retried, honouring Retry-After. 401 `THIRD_PARTY_AUTH_ERROR` (the APNs credentials in the Firebase
project) and 403 `SENDER_ID_MISMATCH` fail on a credential problem and keep the token. A 401
about our access token drops it and tries once more with a new one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC

import google.auth.exceptions
import google.auth.transport.requests
import httpx
from django.conf import settings as django_settings
from google.oauth2 import service_account

from .base import Result, Wake, register
from .http import TIMEOUT, LazyClient, bounded, retry_after, transport_failure
from .tokens import Token, TokenCache, credentials_key

KIND = "fcm"
SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
PAYLOAD_LIMIT = 4096  # bytes, FCM's limit for a message to a token
EARLY_REFRESH_S = 60  # an access token is replaced this long before it expires
QUOTA_BACKOFF_S = 60.0  # FCM: back off at least a minute after QUOTA_EXCEEDED
TTL = "86400s"  # a wake for a phone that is off stays a day at FCM
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
TOKEN_FIELD = "message.token"
# The key file's fields the flow needs (the others, such as client_id, are not used).
SERVICE_ACCOUNT_FIELDS = ("type", "project_id", "private_key_id", "private_key", "client_email", "token_uri")
# FCM's ErrorCode values and the canonical statuses its answers carry: a reason is one of these.
REASONS = frozenset(
    {
        "UNSPECIFIED_ERROR",
        "INVALID_ARGUMENT",
        "UNREGISTERED",
        "SENDER_ID_MISMATCH",
        "QUOTA_EXCEEDED",
        "UNAVAILABLE",
        "INTERNAL",
        "THIRD_PARTY_AUTH_ERROR",
        "NOT_FOUND",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "RESOURCE_EXHAUSTED",
    }
)


class _Request(google.auth.transport.requests.Request):
    """google-auth's requests transport with our timeout instead of its 120 s default."""

    def __call__(self, url, method="GET", body=None, headers=None, timeout=None, **kwargs):
        return super().__call__(url, method, body, headers, timeout=timeout or TIMEOUT.read, **kwargs)


def service_account_info(credentials: dict) -> dict:
    """The tenant's service-account key (the credentials are the key file's JSON object), its
    shape checked (ValueError: a short reason)."""
    info = credentials
    if not isinstance(info, dict) or not info:
        raise ValueError("service_account_missing")
    for name in SERVICE_ACCOUNT_FIELDS:
        if not isinstance(info.get(name), str) or not info[name]:
            raise ValueError(f"service_account_{name}_missing")
    if info["type"] != "service_account":
        raise ValueError("service_account_type")
    if "@" not in info["client_email"]:
        raise ValueError("service_account_client_email")
    if not info["token_uri"].startswith(("https://", "http://")):
        raise ValueError("service_account_token_uri")
    return info


def _google_credentials(info: dict) -> service_account.Credentials:
    """google-auth's credentials for the key (ValueError when its private key does not load)."""
    try:
        creds = service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
        creds.signer.sign(b"check")  # an RSA key: google-auth loads other PEM keys but cannot sign RS256
    except (ValueError, TypeError, AttributeError):
        raise ValueError("service_account_private_key") from None
    return creds


def message(token: str, wake: Wake) -> dict:
    """The v1 `message` of a wake: content-free data, plus a localised notification when visible."""
    msg: dict = {
        "token": token,
        "data": {"type": "wake"},
        "android": {"priority": "high", "ttl": TTL},
    }
    if not wake.visible:
        # iOS through FCM: a background push (content-available, priority 5).
        msg["apns"] = {
            "headers": {"apns-push-type": "background", "apns-priority": "5"},
            "payload": {"aps": {"content-available": 1}},
        }
        return msg
    notification = {k: v for k, v in (("title_loc_key", wake.title_loc_key), ("body_loc_key", wake.body_loc_key)) if v}
    alert = {k: v for k, v in (("title-loc-key", wake.title_loc_key), ("loc-key", wake.body_loc_key)) if v}
    apns_headers = {"apns-push-type": "alert", "apns-priority": "10"}
    if wake.collapse_id:
        msg["android"]["collapse_key"] = wake.collapse_id
        notification["tag"] = wake.collapse_id
        apns_headers["apns-collapse-id"] = wake.collapse_id
    msg["android"]["notification"] = notification
    msg["apns"] = {"headers": apns_headers, "payload": {"aps": {"alert": alert}}}
    return msg


def payload_size(msg: dict) -> int:
    """Bytes FCM counts against its limit: the message without its target."""
    return len(json.dumps({k: v for k, v in msg.items() if k != "token"}, separators=(",", ":")).encode())


def _error(resp: httpx.Response) -> tuple[str, str, list[str], bool]:
    """(FcmError errorCode, status, BadRequest violation fields, whether a BadRequest detail came)."""
    try:
        error = resp.json().get("error") or {}
    except (ValueError, AttributeError):
        return "", "", [], False
    if not isinstance(error, dict):
        return "", "", [], False
    details = [d for d in error.get("details") or () if isinstance(d, dict)]
    code = next((str(d.get("errorCode", "")) for d in details if d.get("@type") == FCM_ERROR), "")
    bad = [d for d in details if d.get("@type") == BAD_REQUEST]
    fields = [str(v.get("field", "")) for d in bad for v in d.get("fieldViolations") or () if isinstance(v, dict)]
    return code, str(error.get("status", "")), fields, bool(bad)


def _result(resp: httpx.Response) -> Result:
    """The Result of one messages:send answer (the rules in the module docstring)."""
    status = resp.status_code
    if status == 200:
        return Result("sent")
    code, canonical, fields, has_bad_request = _error(resp)
    reason = bounded(code or canonical, REASONS)
    wait = retry_after(resp.headers.get("retry-after"))
    if status == 404 and code == "UNREGISTERED":
        return Result("dead_token", "UNREGISTERED")
    if status == 400 and code == "INVALID_ARGUMENT":
        about_token = all(f == TOKEN_FIELD for f in fields) and (bool(fields) or not has_bad_request)
        return Result("dead_token" if about_token else "failed", "INVALID_ARGUMENT")
    if status == 429:
        return Result("retry", reason, max(wait or 0.0, QUOTA_BACKOFF_S))
    if status >= 500:
        return Result("retry", reason, wait)
    return Result("failed", reason)


class FcmProvider:
    """The FCM HTTP v1 provider (kind `fcm`)."""

    kind = KIND
    # What the tenant page asks for: the credentials are the key file's object itself.
    credential_fields: tuple[str, ...] = ()
    setting_fields: tuple[str, ...] = ()

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.tokens = TokenCache()
        self._client = LazyClient(lambda: httpx.Client(http2=True, timeout=TIMEOUT))
        # google-auth's transport (a requests session, one per thread: sessions are not thread-safe).
        self._auth_request = LazyClient(_Request, per_thread=True)

    def _http(self) -> tuple[httpx.Client, _Request]:
        return self._client.get(), self._auth_request.get()

    def check(self, credentials: dict, settings: dict) -> None:
        """The key file's shape and its private key (offline: nothing is sent on save)."""
        _google_credentials(service_account_info(credentials))

    def _key(self, info: dict) -> str:
        return credentials_key(info["client_email"], info["private_key_id"], info["token_uri"], info["private_key"])

    def _fresh(self, token: Token, now: float) -> bool:
        return now < token.expires_at - EARLY_REFRESH_S

    def _exchange(self, info: dict) -> Token:
        """One OAuth exchange (google-auth signs the assertion and POSTs it to token_uri)."""
        creds = _google_credentials(info)
        _client, request = self._http()
        issued = self.clock()
        creds.refresh(request)
        if creds.expiry is None:
            raise google.auth.exceptions.RefreshError("no expiry")
        return Token(str(creds.token), issued, creds.expiry.replace(tzinfo=UTC).timestamp())

    def send(self, credentials: dict, settings: dict, token: str, wake: Wake) -> Result:
        """One messages:send of a wake to one registration token."""
        try:
            info = service_account_info(credentials)
        except ValueError as exc:
            return Result("failed", str(exc))
        msg = message(token, wake)
        if payload_size(msg) > PAYLOAD_LIMIT:
            return Result("failed", "payload_too_large")
        body = json.dumps({"message": msg}, separators=(",", ":")).encode()
        url = f"{django_settings.PUSH_FCM_URL.rstrip('/')}/v1/projects/{info['project_id']}/messages:send"
        client, _request = self._http()
        key = self._key(info)
        refused: Token | None = None
        while True:
            try:
                access = self.tokens.get(key, now=self.clock, fresh=self._fresh, make=lambda: self._exchange(info))
            except ValueError as exc:
                return Result("failed", str(exc))
            except google.auth.exceptions.TransportError:
                return Result("retry", "oauth_unreachable")
            except google.auth.exceptions.RefreshError as exc:
                return Result("retry" if exc.retryable else "failed", "oauth_refused")
            try:
                resp = client.post(
                    url,
                    content=body,
                    headers={"authorization": f"Bearer {access.value}", "content-type": "application/json"},
                )
            except httpx.HTTPError as exc:
                return transport_failure(exc)
            if resp.status_code != 401 or refused is not None or _error(resp)[0] == "THIRD_PARTY_AUTH_ERROR":
                return _result(resp)
            # FCM refused our access token (revoked, or expired early): one new exchange, once.
            refused = access
            self.tokens.drop(key, access)


PROVIDER = register(FcmProvider())
