"""AUTHENTICATE on `/ws` (DCTRL-0004 §10.2), in the spec's order of checks.

`parse_authenticate` and `check_timestamp` are pure and run on the event loop; `authenticate`
touches the database and runs inside `database_sync_to_async`. Every failure is a `WsAuthFailed`
carrying the AUTH_FAILED code and its close code (errors.WS_CLOSE_CODES).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apps.decentrl import storage
from apps.decentrl.storage import NonceClaim
from apps.messaging.replay import Window
from apps.messaging.services import is_registered
from apps.tenants.models import Tenant
from apps.tenants.resolver import Verdict, verify_signer
from apps.wire.envelope import MAX_DID_LEN, UUID_RE, is_integral, loads_client_json
from apps.wire.errors import WS_CLOSE_CODES, ProtocolError

# An AUTHENTICATE frame is a few hundred bytes plus the DID; anything bigger is not one.
MAX_AUTH_FRAME_CHARS = 3 * MAX_DID_LEN + 1024
MAX_SIGNATURE_CHARS = 200


class WsAuthFailed(Exception):
    """AUTHENTICATE failed: `code` goes into AUTH_FAILED, `close_code` closes the socket.

    `sender_verified` is True when the frame's signature verified before the failure (only
    NOT_REGISTERED): metering records the DID then, and never an unverified claim."""

    def __init__(self, code: str, *, sender_verified: bool = False):
        super().__init__(code)
        self.code = code
        self.close_code = WS_CLOSE_CODES[code]
        self.sender_verified = sender_verified


@dataclass(frozen=True)
class AuthFrame:
    did: str
    signing_key_id: str
    timestamp: int
    nonce: str
    signature: str
    # {did, signing_key_id, timestamp, nonce} exactly as received: what the signature covers.
    signable: dict


def _str(value: Any, max_len: int) -> str:
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise WsAuthFailed("INVALID_MESSAGE")
    return value


def parse_authenticate(text: str | None) -> AuthFrame:
    """Validate the frame's shape (INVALID_MESSAGE, close 4002); unknown members are ignored.

    The frame is parsed under the same input rules as a POST / body (no U+0000, no duplicate
    keys, strict JSON): what POST / answers with INVALID_COMMAND, /ws answers with INVALID_MESSAGE."""
    if text is None or len(text) > MAX_AUTH_FRAME_CHARS:
        raise WsAuthFailed("INVALID_MESSAGE")
    try:
        obj = loads_client_json(text)
    except ProtocolError as exc:
        raise WsAuthFailed("INVALID_MESSAGE") from exc
    if not isinstance(obj, dict) or obj.get("type") != "AUTHENTICATE":
        raise WsAuthFailed("INVALID_MESSAGE")
    did = _str(obj.get("did"), MAX_DID_LEN)
    key_id = _str(obj.get("signing_key_id"), MAX_DID_LEN + 64)
    timestamp = obj.get("timestamp")
    # docs/protocol-readings.md §2: any JSON number with an integral value is an integer.
    if not is_integral(timestamp) or abs(timestamp) > 2**53:
        raise WsAuthFailed("INVALID_MESSAGE")
    nonce = obj.get("nonce")
    if not isinstance(nonce, str) or not UUID_RE.match(nonce):
        raise WsAuthFailed("INVALID_MESSAGE")
    signature = _str(obj.get("signature"), MAX_SIGNATURE_CHARS)
    signable = {"did": did, "signing_key_id": key_id, "timestamp": timestamp, "nonce": nonce}
    return AuthFrame(did, key_id, int(timestamp), nonce, signature, signable)


def check_timestamp(frame: AuthFrame, *, now_ms: int, window_ms: int) -> None:
    """Drift must be under the window (§10.2: "< 5 minutes", so not inclusive), else
    TIMESTAMP_OUT_OF_RANGE (4003)."""
    if not Window(window_ms, inclusive=False).admits(frame.timestamp, now_ms):
        raise WsAuthFailed("TIMESTAMP_OUT_OF_RANGE")


_FAILURES = {
    Verdict.DID_NOT_FOUND: "DID_NOT_FOUND",
    Verdict.KEY_NOT_FOUND: "SIGNING_KEY_NOT_FOUND",
    Verdict.BAD_SIGNATURE: "INVALID_SIGNATURE",
}


def authenticate(*, tenant: Tenant, frame: AuthFrame, now_ms: int, window_ms: int) -> str:
    """Steps 4-7 of §10.2, then the nonce (docs/protocol-readings.md §6); returns the authenticated DID."""
    # Verified over the received values, re-canonicalised (docs/contributing.md §8), never over a re-built frame;
    # the same check as every command's (tenants.resolver.verify_signer).
    verdict = verify_signer(
        did=frame.did, key_id=frame.signing_key_id, signable=frame.signable, signature=frame.signature
    )
    if verdict is not Verdict.VERIFIED:
        raise WsAuthFailed(_FAILURES[verdict])
    if not is_registered(tenant=tenant, did=frame.did):
        raise WsAuthFailed("NOT_REGISTERED", sender_verified=True)
    # Last, so that only a verified frame consumes its nonce; a replay of the same frame (even on
    # another process) finds the committed pair and is refused with 4008. Its signature verifies,
    # but a replay is anybody's: it is not attributed to the DID (sender_verified stays False).
    claim = NonceClaim(
        tenant_id=tenant.pk,
        sender_did=frame.did,
        nonce=frame.nonce.lower(),
        expires_at_ms=frame.timestamp + window_ms,
        now_ms=now_ms,
    )
    if not storage.claim(claim):
        raise WsAuthFailed("DUPLICATE_NONCE")
    return frame.did
