"""Strict loopback stand-ins for the three push providers (docs/push.md, "Providers"): real servers
on 127.0.0.1 that check what Google, Apple and a browser's push service check, and answer each
documented error when told to. A stand-in that accepted anything would prove nothing.

- `FcmStandin` (HTTP/1.1): the OAuth 2.0 token endpoint (the JWT bearer grant: the assertion's
  RS256 signature against the service account's public key, `iss`, `scope`, `aud`, `iat`, `exp`
  at most an hour after `iat`) and `messages:send` (a live access token of the project, the
  message schema, the 4,096-byte limit). The assertion's `aud` is Google's token endpoint
  (`GOOGLE_TOKEN_AUDIENCE`), which google-auth puts there whatever the key's `token_uri`: the
  stand-in checks what Google checks.
- `ApnsStandin` (HTTP/2 with prior knowledge, h2c, through the `h2` state machine: an HTTP/1.1
  client cannot even start): the ES256 provider token against the team's key (`kid`, `iss`, its
  age, at most one new token per key every 20 minutes), the path's device token, the apns-*
  headers and the payload.
- `WebPushStandin` (HTTP/1.1): the VAPID JWT (RFC 8292: signature by the key in `k`, which must
  be the subscription's applicationServerKey, `aud` the endpoint's origin, `exp` within 24 hours,
  `sub`), TTL, Urgency and Topic, and it DECRYPTS the aes128gcm body (RFC 8291) with the
  subscription's private key (http_ece), so a test reads what the browser would.

Each records what it accepted and keeps a table of scripted answers by device token (`fail`).
Test keys are made at run time: no private key is committed.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import socketserver
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import http_ece
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

Answer = tuple[int, dict[str, str], bytes]
App = Callable[[str, str, list[tuple[str, str]], bytes], Answer]

GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def _json(status: int, body: object, headers: dict[str, str] | None = None) -> Answer:
    return status, {"content-type": "application/json", **(headers or {})}, json.dumps(body).encode()


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# ---------------------------------------------------------------------------------------------
# Servers


class _Http1Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        status, headers, out = self.server.app(self.command, self.path, list(self.headers.items()), body)  # type: ignore[attr-defined]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_POST = do_GET = do_PUT = _serve

    def log_message(self, format, *args):  # noqa: A002 - quiet: the tests read the records
        pass


class _Http1Server:
    """A threaded HTTP/1.1 server on 127.0.0.1 calling `app(method, path, headers, body)`."""

    def __init__(self, app: App) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Http1Handler)
        self._httpd.daemon_threads = True
        self._httpd.app = app  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _H2Handler(socketserver.BaseRequestHandler):
    """One HTTP/2 connection (prior knowledge): each finished stream is answered by the app."""

    def handle(self) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        self.request.sendall(conn.data_to_send())
        streams: dict[int, tuple[list[tuple[str, str]], bytearray]] = {}
        while True:
            data = self.request.recv(65535)
            if not data:
                return
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError:  # not HTTP/2 (an HTTP/1.1 client): drop it
                self.request.sendall(conn.data_to_send())
                return
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    streams[event.stream_id] = ([(str(k), str(v)) for k, v in event.headers], bytearray())
                elif isinstance(event, h2.events.DataReceived):
                    streams[event.stream_id][1].extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    headers, body = streams.pop(event.stream_id)
                    pseudo = dict(h for h in headers if h[0].startswith(":"))
                    regular = [h for h in headers if not h[0].startswith(":")]
                    status, out_headers, out = self.server.app(pseudo[":method"], pseudo[":path"], regular, bytes(body))  # type: ignore[attr-defined]
                    response = [(":status", str(status)), *out_headers.items(), ("content-length", str(len(out)))]
                    conn.send_headers(event.stream_id, response, end_stream=not out)
                    if out:
                        conn.send_data(event.stream_id, out, end_stream=True)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.request.sendall(conn.data_to_send())
                    return
            pending = conn.data_to_send()
            if pending:
                self.request.sendall(pending)


class _H2Server:
    def __init__(self, app: App) -> None:
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _H2Handler)
        self._server.daemon_threads = True
        self._server.app = app  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---------------------------------------------------------------------------------------------
# FCM


def _fcm_error(status: int, canonical: str, message: str, details: list[dict]) -> tuple[int, dict]:
    error: dict = {"code": status, "message": message, "status": canonical}
    if details:
        error["details"] = details
    return status, {"error": error}


# The documented answers a test can script (Firebase's ErrorCode reference and error-codes page).
FCM_ANSWERS: dict[str, tuple[int, dict]] = {
    "UNREGISTERED": _fcm_error(
        404, "NOT_FOUND", "Requested entity was not found.", [{"@type": FCM_ERROR, "errorCode": "UNREGISTERED"}]
    ),
    # Firebase's own example of an invalid registration token: the FcmError detail alone.
    "INVALID_TOKEN": _fcm_error(
        400,
        "INVALID_ARGUMENT",
        "The registration token is not a valid FCM registration token",
        [{"@type": FCM_ERROR, "errorCode": "INVALID_ARGUMENT"}],
    ),
    # The same, as FCM also answers it: with a field violation on message.token.
    "INVALID_TOKEN_FIELD": _fcm_error(
        400,
        "INVALID_ARGUMENT",
        "Request contains an invalid argument.",
        [
            {"@type": FCM_ERROR, "errorCode": "INVALID_ARGUMENT"},
            {"@type": BAD_REQUEST, "fieldViolations": [{"field": "message.token", "description": "Invalid token"}]},
        ],
    ),
    # About the message, not the token: Firebase's example of an invalid data value.
    "INVALID_PAYLOAD": _fcm_error(
        400,
        "INVALID_ARGUMENT",
        "Invalid value at 'message.data[0].value' (TYPE_STRING), 12",
        [
            {
                "@type": BAD_REQUEST,
                "fieldViolations": [{"field": "message.data[0].value", "description": "Invalid value"}],
            }
        ],
    ),
    # About the message too, though it carries an FcmError: no recipient.
    "MISSING_RECIPIENT": _fcm_error(
        400,
        "INVALID_ARGUMENT",
        "Recipient of the message is not set.",
        [
            {"@type": BAD_REQUEST, "fieldViolations": [{"field": "message", "description": "Recipient not set."}]},
            {"@type": FCM_ERROR, "errorCode": "INVALID_ARGUMENT"},
        ],
    ),
    "TOO_BIG": _fcm_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.", []),
    "SENDER_ID_MISMATCH": _fcm_error(
        403,
        "PERMISSION_DENIED",
        "SenderId mismatch",
        [{"@type": FCM_ERROR, "errorCode": "SENDER_ID_MISMATCH"}],
    ),
    "QUOTA_EXCEEDED": _fcm_error(
        429,
        "RESOURCE_EXHAUSTED",
        "Quota exceeded.",
        [{"@type": FCM_ERROR, "errorCode": "QUOTA_EXCEEDED"}],
    ),
    "UNAVAILABLE": _fcm_error(
        503, "UNAVAILABLE", "The service is currently unavailable.", [{"@type": FCM_ERROR, "errorCode": "UNAVAILABLE"}]
    ),
    "INTERNAL": _fcm_error(
        500, "INTERNAL", "Internal error encountered.", [{"@type": FCM_ERROR, "errorCode": "INTERNAL"}]
    ),
    "THIRD_PARTY_AUTH_ERROR": _fcm_error(
        401,
        "UNAUTHENTICATED",
        "Auth error from APNS or Web Push Service",
        [{"@type": FCM_ERROR, "errorCode": "THIRD_PARTY_AUTH_ERROR"}],
    ),
}

_MESSAGE_FIELDS = {
    "name",
    "data",
    "notification",
    "android",
    "webpush",
    "apns",
    "fcm_options",
    "token",
    "topic",
    "condition",
}
_ANDROID_FIELDS = {
    "collapse_key",
    "priority",
    "ttl",
    "restricted_package_name",
    "data",
    "notification",
    "fcm_options",
    "direct_boot_ok",
}
_ANDROID_NOTIFICATION_FIELDS = {
    "title", "body", "icon", "color", "sound", "tag", "click_action", "body_loc_key", "body_loc_args",
    "title_loc_key", "title_loc_args", "channel_id", "ticker", "sticky", "event_time", "local_only",
    "notification_priority", "default_sound", "default_vibrate_timings", "default_light_settings",
    "vibrate_timings", "visibility", "notification_count", "light_settings", "image",
}  # fmt: skip
_APNS_FIELDS = {"headers", "payload", "fcm_options", "live_activity_token"}
_RESERVED_DATA = re.compile(r"(from|gcm|message_type|google\..*|collapse_key)")
_TTL = re.compile(r"\d+(\.\d{1,9})?s")
FCM_PAYLOAD_LIMIT = 4096


def fcm_schema_violation(message: object) -> str | None:
    """The field FCM would name for a message it refuses as malformed, or None."""
    if not isinstance(message, dict):
        return "message"
    if set(message) - _MESSAGE_FIELDS:
        return "message"
    targets = [k for k in ("token", "topic", "condition") if k in message]
    if len(targets) != 1 or not isinstance(message[targets[0]], str) or not message[targets[0]]:
        return "message"
    data = message.get("data", {})
    if not isinstance(data, dict):
        return "message.data"
    for i, (k, v) in enumerate(data.items()):
        if not isinstance(v, str) or _RESERVED_DATA.fullmatch(k):
            return f"message.data[{i}].value"
    android = message.get("android", {})
    if not isinstance(android, dict) or set(android) - _ANDROID_FIELDS:
        return "message.android"
    if "priority" in android and android["priority"] not in ("NORMAL", "HIGH", "normal", "high"):
        return "message.android.priority"
    if "ttl" in android and not (isinstance(android["ttl"], str) and _TTL.fullmatch(android["ttl"])):
        return "message.android.ttl"
    note = android.get("notification", {})
    if not isinstance(note, dict) or set(note) - _ANDROID_NOTIFICATION_FIELDS:
        return "message.android.notification"
    if any(not isinstance(v, str) for k, v in note.items() if k.endswith(("_key", "tag"))):
        return "message.android.notification"
    apns = message.get("apns", {})
    if not isinstance(apns, dict) or set(apns) - _APNS_FIELDS:
        return "message.apns"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in apns.get("headers", {}).items()):
        return "message.apns.headers"
    payload = apns.get("payload", {"aps": {}})
    if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
        return "message.apns.payload"
    return None


@dataclass
class ServiceAccount:
    info: dict
    public_key: rsa.RSAPublicKey

    @property
    def text(self) -> str:
        return json.dumps(self.info)


def fake_service_account(token_uri: str, *, project_id: str = "wallet-test", name: str = "push") -> ServiceAccount:
    """A service-account key file of a fresh RSA key (made now, never stored)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": f"{name}@{project_id}.iam.gserviceaccount.com",
        "client_id": "1" * 21,
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    }
    return ServiceAccount(info, key.public_key())


@dataclass
class FcmStandin:
    """FCM's token endpoint and messages:send (see the module docstring)."""

    accounts: dict[str, tuple[ServiceAccount, str]] = field(default_factory=dict)  # kid → (account, email)
    access_tokens: dict[str, tuple[str, float]] = field(default_factory=dict)  # token → (project, expiry)
    exchanges: list[dict] = field(default_factory=list)  # the verified assertion claims
    refused_exchanges: list[str] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # accepted messages
    answers: dict[str, tuple[int, dict, str | None]] = field(default_factory=dict)  # device token → answer
    requests: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = _Http1Server(self._app)
        self.url = self._server.url
        self.token_uri = f"{self.url}/token"

    def close(self) -> None:
        self._server.close()

    def account(self, *, project_id: str = "wallet-test", name: str = "push") -> ServiceAccount:
        """A new service account the token endpoint knows."""
        sa = fake_service_account(self.token_uri, project_id=project_id, name=name)
        self.accounts[sa.info["private_key_id"]] = (sa, sa.info["client_email"])
        return sa

    def fail(self, device_token: str, answer: str, *, retry_after: str | None = None) -> None:
        """Answer messages:send to this device token with one of FCM_ANSWERS."""
        status, body = FCM_ANSWERS[answer]
        self.answers[device_token] = (status, body, retry_after)

    def revoke_access_tokens(self) -> None:
        self.access_tokens.clear()

    def _app(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> Answer:
        with self._lock:
            self.requests += 1
        if method == "POST" and path == "/token":
            return self._token(dict((k.lower(), v) for k, v in headers), body)
        match = re.fullmatch(r"/v1/projects/([a-z0-9-]+)/messages:send", path)
        if method == "POST" and match:
            return self._send(match.group(1), dict((k.lower(), v) for k, v in headers), body)
        return _json(*_fcm_error(404, "NOT_FOUND", "Not found", []))

    def _token(self, headers: dict[str, str], body: bytes) -> Answer:
        def refuse(why: str) -> Answer:
            self.refused_exchanges.append(why)
            return _json(400, {"error": "invalid_grant", "error_description": why})

        if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return refuse("content type")
        form = parse_qs(body.decode(), strict_parsing=True)
        if form.get("grant_type") != [JWT_BEARER] or len(form.get("assertion", [])) != 1:
            return refuse("grant")
        assertion = form["assertion"][0]
        try:
            header = jwt.get_unverified_header(assertion)
        except jwt.PyJWTError:
            return refuse("not a JWT")
        if header.get("alg") != "RS256" or header.get("kid") not in self.accounts:
            return refuse("Invalid JWT Signature.")
        account, email = self.accounts[header["kid"]]
        try:
            claims = jwt.decode(
                assertion,
                account.public_key,
                algorithms=["RS256"],
                audience=GOOGLE_TOKEN_AUDIENCE,
                issuer=email,
                leeway=60,
                options={"require": ["iss", "aud", "iat", "exp", "scope"]},
            )
        except jwt.PyJWTError as exc:
            return refuse(type(exc).__name__)
        if claims["exp"] - claims["iat"] > 3600:
            return refuse("Invalid JWT: Token must be a short-lived token (60 minutes)")
        if FCM_SCOPE not in str(claims["scope"]).split():
            return refuse("scope")
        access = "ya29." + secrets.token_urlsafe(32)
        with self._lock:
            self.exchanges.append(claims)
            self.access_tokens[access] = (account.info["project_id"], time.time() + 3599)
        return _json(200, {"access_token": access, "expires_in": 3599, "token_type": "Bearer"})

    def _send(self, project: str, headers: dict[str, str], body: bytes) -> Answer:
        auth = headers.get("authorization", "")
        granted = self.access_tokens.get(auth[7:]) if auth.startswith("Bearer ") else None
        if granted is None or granted[1] <= time.time():
            return _json(*_fcm_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.", []))
        if granted[0] != project:
            return _json(*_fcm_error(403, "PERMISSION_DENIED", "Permission denied.", []))
        try:
            request = json.loads(body)
        except ValueError:
            return _json(*_fcm_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.", []))
        if not isinstance(request, dict) or set(request) - {"message", "validate_only"}:
            return _json(*FCM_ANSWERS["MISSING_RECIPIENT"])
        message = request.get("message")
        field_name = fcm_schema_violation(message)
        if field_name is not None:
            violation = {"@type": BAD_REQUEST, "fieldViolations": [{"field": field_name, "description": "Invalid"}]}
            return _json(*_fcm_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.", [violation]))
        assert isinstance(message, dict)
        without_target = {k: v for k, v in message.items() if k not in ("token", "topic", "condition")}
        if len(json.dumps(without_target, separators=(",", ":")).encode()) > FCM_PAYLOAD_LIMIT:
            return _json(*FCM_ANSWERS["TOO_BIG"])
        scripted = self.answers.get(message.get("token", ""))
        if scripted is not None:
            status, answer, retry_after = scripted
            return _json(status, answer, {"retry-after": retry_after} if retry_after else None)
        with self._lock:
            self.messages.append(message)
            n = len(self.messages)
        return _json(200, {"name": f"projects/{project}/messages/0:{n}"})


# ---------------------------------------------------------------------------------------------
# APNs

APNS_REUSE_MAX_S = 3600
APNS_MIN_UPDATE_S = 20 * 60
_HEX = re.compile(r"[0-9a-fA-F]{8,200}")
_PUSH_TYPES = {"alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk", "widgets"}  # fmt: skip


@dataclass
class AppleKey:
    team_id: str
    key_id: str
    pem: str
    public_key: ec.EllipticCurvePublicKey


def _ten() -> str:
    return "".join(secrets.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(10))


@dataclass
class ApnsStandin:
    """APNs' provider API over h2c (see the module docstring)."""

    keys: dict[str, tuple[AppleKey, frozenset[str]]] = field(default_factory=dict)  # kid → (key, topics)
    devices: dict[str, str] = field(default_factory=dict)  # device token → its app's topic
    answers: dict[str, tuple[int, str, str | None]] = field(default_factory=dict)  # device token → answer
    deliveries: list[tuple[str, dict[str, str], dict]] = field(default_factory=list)
    provider_tokens: dict[str, list[str]] = field(default_factory=dict)  # kid → distinct JWTs, in order
    stale_before: dict[str, int] = field(default_factory=dict)  # kid → tokens issued before are expired
    requests: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._last_new: dict[str, float] = {}
        self._server = _H2Server(self._app)
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()

    def key(self, *topics: str) -> AppleKey:
        """A new .p8 signing key of a new team, for these bundle ids."""
        private = ec.generate_private_key(ec.SECP256R1())
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        key = AppleKey(_ten(), _ten(), pem, private.public_key())
        self.keys[key.key_id] = (key, frozenset(topics))
        return key

    def device(self, topic: str) -> str:
        """A new device token of an app."""
        token = secrets.token_hex(32)
        self.devices[token] = topic
        return token

    def fail(self, device_token: str, status: int, reason: str, *, retry_after: str | None = None) -> None:
        self.answers[device_token] = (status, reason, retry_after)

    def _app(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> Answer:
        with self._lock:
            self.requests += 1
            return self._answer(method, path, headers, body)

    def _answer(self, method: str, path: str, header_list: list[tuple[str, str]], body: bytes) -> Answer:
        def no(status: int, reason: str, extra: dict[str, str] | None = None) -> Answer:
            return _json(status, {"reason": reason}, {"apns-id": str(uuid.uuid4()), **(extra or {})})

        names = [k for k, _ in header_list]
        if len(names) != len(set(names)):
            return no(400, "DuplicateHeaders")
        headers = dict(header_list)
        if method != "POST":
            return no(405, "MethodNotAllowed")
        match = re.fullmatch(r"/3/device/([^/]*)", path)
        if not match:
            return no(404, "BadPath")
        device = match.group(1)
        auth = headers.get("authorization", "")
        if not auth.startswith("bearer "):
            return no(403, "MissingProviderToken")
        provider_token = auth[len("bearer ") :]
        try:
            header = jwt.get_unverified_header(provider_token)
        except jwt.PyJWTError:
            return no(403, "InvalidProviderToken")
        if header.get("alg") != "ES256" or header.get("kid") not in self.keys:
            return no(403, "InvalidProviderToken")
        key, topics = self.keys[header["kid"]]
        try:
            claims = jwt.decode(
                provider_token,
                key.public_key,
                algorithms=["ES256"],
                issuer=key.team_id,
                options={"require": ["iss", "iat"], "verify_iat": True},
            )
        except jwt.PyJWTError:
            return no(403, "InvalidProviderToken")
        if time.time() - claims["iat"] > APNS_REUSE_MAX_S or claims["iat"] < self.stale_before.get(key.key_id, 0):
            return no(403, "ExpiredProviderToken")
        seen = self.provider_tokens.setdefault(key.key_id, [])
        if provider_token not in seen:
            last = self._last_new.get(key.key_id)
            if last is not None and time.time() - last < APNS_MIN_UPDATE_S:
                return no(429, "TooManyProviderTokenUpdates")
            seen.append(provider_token)
            self._last_new[key.key_id] = time.time()
        topic = headers.get("apns-topic")
        if not topic:
            return no(400, "MissingTopic")
        if topic not in topics:
            return no(400, "TopicDisallowed")
        push_type = headers.get("apns-push-type")
        if push_type not in _PUSH_TYPES:
            return no(400, "InvalidPushType")
        priority = headers.get("apns-priority", "10")
        if priority not in ("1", "5", "10"):
            return no(400, "BadPriority")
        if not headers.get("apns-expiration", "0").isdigit():
            return no(400, "BadExpirationDate")
        if len(headers.get("apns-collapse-id", "").encode()) > 64:
            return no(400, "BadCollapseId")
        if not body:
            return no(400, "PayloadEmpty")
        if len(body) > 4096:
            return no(413, "PayloadTooLarge")
        try:
            payload = json.loads(body)
        except ValueError:
            return no(400, "BadPayload")  # not one of Apple's reasons: a test failing here names it
        aps = payload.get("aps") if isinstance(payload, dict) else None
        if not isinstance(aps, dict):
            return no(400, "BadPayload")
        if push_type == "background" and (
            priority != "5" or aps.get("content-available") != 1 or {"alert", "sound", "badge"} & set(aps)
        ):
            return no(400, "BadPriority" if priority != "5" else "BadPayload")
        if push_type == "alert" and not aps.get("alert"):
            return no(400, "BadPayload")
        if not device:
            return no(400, "MissingDeviceToken")
        scripted = self.answers.get(device)
        if scripted is not None:
            status, reason, retry_after = scripted
            extra = {"retry-after": retry_after} if retry_after else None
            if status == 410:
                return _json(410, {"reason": reason, "timestamp": int(time.time() * 1000)}, extra)
            return no(status, reason, extra)
        if not _HEX.fullmatch(device) or device not in self.devices:
            return no(400, "BadDeviceToken")
        if self.devices[device] != topic:
            return no(400, "DeviceTokenNotForTopic")
        self.deliveries.append((device, {k: v for k, v in headers.items() if k.startswith("apns-")}, payload))
        return 200, {"apns-id": str(uuid.uuid4())}, b""


# ---------------------------------------------------------------------------------------------
# Web Push


@dataclass
class BrowserSubscription:
    """What a browser keeps of one PushSubscription: its private key and auth secret."""

    id: str
    application_server_key: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes
    endpoint: str

    @property
    def json(self) -> str:
        public = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return json.dumps({"endpoint": self.endpoint, "keys": {"p256dh": b64url(public), "auth": b64url(self.auth)}})


def vapid_key_pair() -> tuple[str, str]:
    """(private PEM, public applicationServerKey) of a fresh VAPID key."""
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = private.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return pem, b64url(public)


_VAPID = re.compile(r"vapid t=([A-Za-z0-9_.-]+),\s*k=([A-Za-z0-9_-]+)")
_URGENCY = {"very-low", "low", "normal", "high"}
_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
VAPID_MAX_LIFETIME_S = 24 * 3600


@dataclass
class WebPushStandin:
    """A browser vendor's push service (see the module docstring)."""

    subscriptions: dict[str, BrowserSubscription] = field(default_factory=dict)
    answers: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # subscription id → answer
    received: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)  # (id, headers, plaintext)
    waiting: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (id, topic) → the newest plaintext
    refusals: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = _Http1Server(self._app)
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()

    def subscribe(self, application_server_key: str) -> BrowserSubscription:
        """What PushManager.subscribe({applicationServerKey}) gives a browser."""
        sub_id = secrets.token_urlsafe(16)
        sub = BrowserSubscription(
            sub_id,
            application_server_key,
            ec.generate_private_key(ec.SECP256R1()),
            secrets.token_bytes(16),
            f"{self.url}/push/{sub_id}",
        )
        self.subscriptions[sub_id] = sub
        return sub

    def fail(self, sub: BrowserSubscription, status: int, *, retry_after: str | None = None) -> None:
        self.answers[sub.id] = (status, retry_after)

    def _app(self, method: str, path: str, header_list: list[tuple[str, str]], body: bytes) -> Answer:
        with self._lock:
            answer = self._answer(method, path, {k.lower(): v for k, v in header_list}, body)
            if answer[0] >= 400:
                self.refusals.append(f"{answer[0]} {answer[2].decode()}")
            return answer

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Answer:
        def no(status: int, why: str, extra: dict[str, str] | None = None) -> Answer:
            return status, {"content-type": "text/plain", **(extra or {})}, why.encode()

        match = re.fullmatch(r"/push/([A-Za-z0-9_-]+)", path)
        if method != "POST" or not match or match.group(1) not in self.subscriptions:
            return no(404, "no such subscription")
        sub = self.subscriptions[match.group(1)]
        # RFC 8292 §3: the token and the key; the key must be the one the subscription was made with.
        vapid = _VAPID.fullmatch(headers.get("authorization", ""))
        if not vapid:
            return no(401, "no vapid authorization")
        token, k = vapid.groups()
        if k != sub.application_server_key:
            return no(403, "vapid key is not the subscription's applicationServerKey")
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), _unb64url(k))
        origin = f"{urlsplit(sub.endpoint).scheme}://{urlsplit(sub.endpoint).netloc}"
        try:
            claims = jwt.decode(
                token, public, algorithms=["ES256"], audience=origin, options={"require": ["aud", "exp", "sub"]}
            )
        except jwt.PyJWTError as exc:
            return no(401, f"vapid token: {type(exc).__name__}")
        if claims["exp"] > time.time() + VAPID_MAX_LIFETIME_S:
            return no(401, "vapid exp more than 24 hours ahead")
        if not re.fullmatch(r"(mailto:.+@.+|https://.+)", str(claims["sub"])):
            return no(401, "vapid sub")
        # RFC 8030 §5.2-5.4
        if not headers.get("ttl", "").isdigit():
            return no(400, "TTL missing")
        if headers.get("urgency", "normal") not in _URGENCY:
            return no(400, "urgency")
        topic = headers.get("topic")
        if topic is not None and not _TOPIC.fullmatch(topic):
            return no(400, "topic")
        if len(body) > 4096:
            return no(413, "payload too large")
        if headers.get("content-encoding") != "aes128gcm":
            return no(400, "content-encoding is not aes128gcm")
        try:
            plaintext = http_ece.decrypt(body, private_key=sub.private_key, auth_secret=sub.auth, version="aes128gcm")
        except (http_ece.ECEException, ValueError, struct.error) as exc:
            return no(400, f"does not decrypt: {type(exc).__name__}")
        scripted = self.answers.get(sub.id)
        if scripted is not None:
            status, retry_after = scripted
            return no(status, "scripted", {"retry-after": retry_after} if retry_after else None)
        self.received.append((sub.id, headers, plaintext))
        self.waiting[(sub.id, topic or secrets.token_hex(8))] = plaintext
        return 201, {"location": f"{self.url}/message/{secrets.token_urlsafe(8)}"}, b""


@pytest.fixture
def fcm():
    """FCM's stand-in for one test (an e2e test points PUSH_FCM_URL at `fcm.url`)."""
    standin = FcmStandin()
    yield standin
    standin.close()
