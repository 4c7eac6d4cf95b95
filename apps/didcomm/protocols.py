"""The DIDComm v2 protocols this front door speaks: message types, what Discover Features discloses,
and the Report Problem 2.0 codes it answers with (docs/didcomm.md).
"""

from __future__ import annotations

BASE = "https://didcomm.org/"

FORWARD = BASE + "routing/2.0/forward"

CM2 = BASE + "coordinate-mediation/2.0/"
CM3 = BASE + "coordinate-mediation/3.0/"
PICKUP = BASE + "messagepickup/3.0/"
# Message Pickup 4.0, one PIURI for both formats (DIDComm v2 plaintexts and v1 `@type` messages).
PICKUP4 = BASE + "message-pickup/4.0/"
TRUST_PING = BASE + "trust-ping/2.0/"
DISCOVER = BASE + "discover-features/2.0/"
REPORT_PROBLEM = BASE + "report-problem/2.0/"
OOB = BASE + "out-of-band/2.0/"

# Aries RFC 0734 and RFC 0699 (device registration for push wake-ups, docs/push.md "Registration"):
# the same URIs and bodies in DIDComm v1 and v2 messages.
PUSH_FCM = BASE + "push-notifications-fcm/1.0/"
PUSH_APNS = BASE + "push-notifications-apns/1.0/"
PUSH_ROLES = ("notification-sender",)

PROBLEM_REPORT = REPORT_PROBLEM + "problem-report"
OOB_INVITATION = OOB + "invitation"

# Protocol PIURIs and our roles in them, exactly what we implement (Discover Features 2.0).
SUPPORTED: dict[str, tuple[str, ...]] = {
    BASE + "routing/2.0": ("mediator",),
    BASE + "coordinate-mediation/2.0": ("mediator",),
    BASE + "coordinate-mediation/3.0": ("mediator",),
    BASE + "messagepickup/3.0": ("mediator",),
    BASE + "message-pickup/4.0": ("mediator",),
    BASE + "trust-ping/2.0": ("receiver",),
    BASE + "discover-features/2.0": ("responder",),
    BASE + "report-problem/2.0": ("notified",),
    BASE + "push-notifications-fcm/1.0": PUSH_ROLES,
    BASE + "push-notifications-apns/1.0": PUSH_ROLES,
}


def problem_type(message_type: str | None, default: str) -> str:
    """The type of a problem report about a message of `message_type`: Pickup 4.0's own
    (`message-pickup/4.0/problem-report`, as its spec and Credo send it), else `default`."""
    return PICKUP4 + "problem-report" if isinstance(message_type, str) and message_type.startswith(PICKUP4) else default


def short_type(message_type: str | None) -> str:
    """`routing/2.0/forward` from the full message type URI (metering and logs); '-' if unknown."""
    if isinstance(message_type, str) and message_type.startswith(BASE):
        short = message_type[len(BASE) :]
        if short.count("/") == 2 and len(short) <= 64:
            return short
    return "-"


# Report Problem 2.0 codes (sorter.scope.descriptor) with their HTTP statuses.
class Code:
    NOT_FOUND = "e.p.me.res.not-found"  # UC-021 AF-1: forward to a recipient we do not mediate
    STORAGE_FULL = "e.p.me.res.storage.full"  # overflow policy `reject`
    NOT_GRANTED = "e.p.req.not-granted"  # mediation or pickup without a granted mediation
    RECIPIENT_CONFLICT = "e.p.req.recipient-conflict"  # a recipient DID another client registered (409)
    RECIPIENT_UNPROVEN = "e.p.req.recipient-unproven"  # a recipient DID the request must prove control of (403)
    UNAUTHENTICATED = "e.p.trust.unauthenticated"  # an admin message that was not authcrypt
    SENDER_MISMATCH = "e.p.trust.sender-mismatch"  # `from` is not the authcrypt sender's DID
    MALFORMED = "e.p.msg"  # not a message at all (also DidcommError's default problem code)
    UNSUPPORTED_TYPE = "e.p.msg.unsupported-type"
    BAD_BODY = "e.p.msg.invalid-body"
    LIVE_NOT_SUPPORTED = "e.m.live-mode-not-supported"  # Pickup 3.0 and 4.0: live mode over HTTP
    RETURN_ROUTE_REQUIRED = "e.p.msg.return-route-required"  # a Pickup 4.0 request without return_route all
    UNSUPPORTED_MEDIA = "e.p.xfer.unsupported-media-type"
    TOO_BIG = "e.p.xfer.too-big"
    RATE_LIMITED = "e.p.xfer.rate-limited"
    UNKNOWN_MEDIATOR = "e.p.xfer.unknown-mediator"
    UNAVAILABLE = "e.p.me.unavailable"
    # Replay protection of authcrypt admin messages (scope `m`: this message is rejected, has no
    # effect, the thread goes on; docs/didcomm.md "Replays").
    REPLAY = "e.m.msg.replay"  # the sender already used this id (409)
    EXPIRED = "e.m.req.time.expired"  # expires_time has passed
    OUT_OF_WINDOW = "e.m.req.time"  # created_time further than the replay window from now
    # A live socket that does not read, over its send budget (then close 4509; nothing is lost).
    SEND_BUDGET = "e.p.xfer.send-budget-exceeded"
    # A socket not in use for MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S (then close 4408; nothing is lost).
    IDLE = "e.p.xfer.idle-timeout"
    # RFC 0734 / RFC 0699's own codes (both versions)
    MISSING_VALUE = "missing-value"  # set-device-info with some fields null, not all
    NOT_REGISTERED = "not-registered-for-push-notifications"  # get-device-info with no device (404)
    # DIDComm v1 only
    NOT_CONNECTED = "e.p.req.not-connected"  # an authcrypt message from a key with no connection
    CONNECTION_EXISTS = "e.p.req.connection-exists"  # DID Exchange again from a connected key, new thread
    UNSUPPORTED_DID = "e.p.did.unresolvable"  # DID Exchange with a DID we cannot resolve


# --- DIDComm v1 (Aries) -------------------------------------------------------------------------

DIDX_10 = BASE + "didexchange/1.0/"
DIDX_11 = BASE + "didexchange/1.1/"
CM1 = BASE + "coordinate-mediation/1.0/"
FORWARD_V1 = BASE + "routing/1.0/forward"
PICKUP_V1 = BASE + "messagepickup/1.0/"
PICKUP_V2 = BASE + "messagepickup/2.0/"
TRUST_PING_V1 = BASE + "trust_ping/1.0/"
DISCOVER_V1 = BASE + "discover-features/1.0/"
REPORT_PROBLEM_V1 = BASE + "report-problem/1.0/problem-report"
NOTIFICATION_PROBLEM = BASE + "notification/1.0/problem-report"
OOB_V1_INVITATION = BASE + "out-of-band/1.1/invitation"

# Discover Features 1.0: protocol ids and our roles, exactly what the v1 front door implements.
SUPPORTED_V1: dict[str, tuple[str, ...]] = {
    BASE + "didexchange/1.1": ("responder",),
    BASE + "didexchange/1.0": ("responder",),
    BASE + "coordinate-mediation/1.0": ("mediator",),
    BASE + "routing/1.0": ("mediator",),
    BASE + "messagepickup/2.0": ("mediator",),
    BASE + "message-pickup/4.0": ("mediator",),
    BASE + "messagepickup/1.0": ("mediator",),
    BASE + "trust_ping/1.0": ("receiver",),
    BASE + "discover-features/1.0": ("responder",),
    BASE + "report-problem/1.0": ("notified",),
    BASE + "push-notifications-fcm/1.0": PUSH_ROLES,
    BASE + "push-notifications-apns/1.0": PUSH_ROLES,
}
