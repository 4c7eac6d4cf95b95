"""The command envelope of DCTRL-0004 §4 and the payload schema of every command (§8, DCTRL-0007).

`parse_command(raw)` validates once, at the edge, and returns a typed `Command` (its `body` is one
frozen dataclass per command type, which the handlers read); anything that
does not match raises ProtocolError(INVALID_COMMAND) (docs/protocol-readings.md §3 step 1).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeGuard, TypeVar

from .canonical import CanonicalError, loads_strict
from .errors import ErrorCode, ProtocolError

DIRECT_AUTHENTICATED = "DIRECT_AUTHENTICATED"
TWO_WAY_PRIVATE = "TWO_WAY_PRIVATE"
ONE_WAY_PUBLIC = "ONE_WAY_PUBLIC"
CHANNELS = (DIRECT_AUTHENTICATED, TWO_WAY_PRIVATE, ONE_WAY_PUBLIC)

UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

# Hard structural caps applied before any tenant policy (the tenant's own caps are stricter).
MAX_DID_LEN = 2048
MAX_ID_LIST = 1000
MAX_STR = 6 * 1024 * 1024
MAX_TAG_LEN = 1024
MAX_EVENTS = 1000
MAX_TAGS = 100
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 10
MAX_PAGE = 10_000_000


def invalid(detail: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_COMMAND, detail)


def unknown_command() -> ProtocolError:
    """The refusal of a command type the channel does not have (and of an extension a tenant turned off)."""
    return invalid("unknown command type for channel")


def is_integral(value: Any) -> TypeGuard[int | float]:
    """JSON number with an integral value (1.0 counts as 1), never a bool (docs/protocol-readings.md §2)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and value.is_integer()


def as_int(value: Any, name: str, lo: int | None = None, hi: int | None = None) -> int:
    if not is_integral(value):
        raise invalid(f"{name} must be an integer")
    n = int(value)
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise invalid(f"{name} out of range")
    return n


def as_str(value: Any, name: str, max_len: int = MAX_STR, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not allow_empty):
        raise invalid(f"{name} must be a non-empty string")
    if len(value) > max_len:
        raise invalid(f"{name} too long")
    return value


def as_obj(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{name} must be an object")
    return value


def as_list(value: Any, name: str, max_items: int) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(f"{name} must be an array")
    if len(value) > max_items:
        raise invalid(f"{name} has too many items")
    return value


def opt(obj: dict[str, Any], key: str) -> Any:
    """Optional member: absent and null both mean 'not given'."""
    return obj.get(key)


@dataclass(frozen=True)
class Pagination:
    page: int = 0
    page_size: int = DEFAULT_PAGE_SIZE

    @property
    def offset(self) -> int:
        return self.page * self.page_size

    def reply(self, total: int) -> dict[str, Any]:
        return {"page": self.page, "page_size": self.page_size, "total": total}


def parse_pagination(payload: dict[str, Any], max_page_size: int = MAX_PAGE_SIZE) -> Pagination:
    """DCTRL-0004 §9 with docs/protocol-readings.md §5 bounds: page ≥ 0, 1 ≤ page_size ≤ 100."""
    raw = payload.get("pagination")
    if raw is None:
        return Pagination()
    p = as_obj(raw, "pagination")
    page = 0 if p.get("page") is None else as_int(p["page"], "page", 0, MAX_PAGE)
    size = DEFAULT_PAGE_SIZE if p.get("page_size") is None else as_int(p["page_size"], "page_size", 1, max_page_size)
    return Pagination(page=page, page_size=size)


def _str_list(value: Any, name: str, max_items: int, max_len: int) -> list[str]:
    items = as_list(value, name, max_items)
    for item in items:
        as_str(item, name, max_len)
    return items


# --- typed payloads: what each validator returns, and what the handlers read ------------------


@dataclass(frozen=True)
class RequestContract:
    encrypted_contract_request: str
    requestor_ephemeral_public_key: str


@dataclass(frozen=True)
class SignedContract:
    """COMMUNICATION_CONTRACT_RESPONSE and SAVE_COMMUNICATION_CONTRACT: the contract as received."""

    signed_communication_contract: dict[str, Any]


@dataclass(frozen=True)
class Listing:
    page: Pagination


@dataclass(frozen=True)
class Acknowledge:
    ids: tuple[str, ...]


F = TypeVar("F")


@dataclass(frozen=True)
class Query(Generic[F]):
    """A list command: its filter and its page."""

    filter: F
    page: Pagination


@dataclass(frozen=True)
class ContractFilter:
    did: str | None = None
    expires_at_before: int | None = None
    expires_at_after: int | None = None


@dataclass(frozen=True)
class PendingFilter:
    sender_did: str | None = None


@dataclass(frozen=True)
class EventToSave:
    sender_did: str
    recipient_did: str
    contract_id: str | None
    timestamp: int
    payload: str
    encrypted_tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class SaveEvents:
    events: tuple[EventToSave, ...]


@dataclass(frozen=True)
class EventFilter:
    after_timestamp: int | None = None
    before_timestamp: int | None = None
    participant_did: str | None = None
    encrypted_tags: tuple[str, ...] = ()
    unprocessed_only: bool = False


QueryContracts = Query[ContractFilter]
QueryPendingEvents = Query[PendingFilter]
QueryEvents = Query[EventFilter]


@dataclass(frozen=True)
class TagUpdate:
    event_id: str
    encrypted_tags: tuple[str, ...]


@dataclass(frozen=True)
class UpdateEventTags:
    updates: tuple[TagUpdate, ...]


@dataclass(frozen=True)
class PublishPublicEvent:
    """The public event as received: its publisher's signature covers exactly that object."""

    public_event: dict[str, Any]


@dataclass(frozen=True)
class DeletePublicEvent:
    public_event_id: str


@dataclass(frozen=True)
class PushDeviceSet:
    """PUSH_DEVICE_SET (our extension, outside DCTRL-0004): a device to wake the sender's queue."""

    service: str
    token: str
    platform: str | None = None


@dataclass(frozen=True)
class PushDevice:
    """PUSH_DEVICE_GET and PUSH_DEVICE_REMOVE: which of the sender's devices."""

    service: str


def _opt_int(f: dict[str, Any], key: str, name: str) -> int | None:
    return None if opt(f, key) is None else as_int(f[key], name, -(2**53), 2**53)


def _opt_str(f: dict[str, Any], key: str, name: str, max_len: int) -> str | None:
    return None if opt(f, key) is None else as_str(f[key], name, max_len)


def _query(build: Callable[[dict[str, Any]], F]) -> Callable[[dict[str, Any]], Query[F]]:
    """A list command's validator: its pagination, then its `filter` object through `build`."""

    def validate(p: dict[str, Any]) -> Query[F]:
        page = parse_pagination(p)
        f = p.get("filter")
        return Query(build({} if f is None else as_obj(f, "filter")), page)

    return validate


def _v_request_contract(p: dict[str, Any]) -> RequestContract:
    return RequestContract(
        as_str(p.get("encrypted_contract_request"), "encrypted_contract_request", 64 * 1024),
        as_str(p.get("requestor_ephemeral_public_key"), "requestor_ephemeral_public_key", 64),
    )


def _v_signed_contract(p: dict[str, Any]) -> SignedContract:
    return SignedContract(as_obj(p.get("signed_communication_contract"), "signed_communication_contract"))


def _v_query_with_page(p: dict[str, Any]) -> Listing:
    return Listing(parse_pagination(p))


def _acknowledge(key: str) -> Callable[[dict[str, Any]], Acknowledge]:
    """An acknowledge command's validator: the list of ids under `key`."""
    return lambda p: Acknowledge(tuple(_str_list(p.get(key), key, MAX_ID_LIST, 64)))


def _contract_filter(f: dict[str, Any]) -> ContractFilter:
    return ContractFilter(
        did=_opt_str(f, "did", "filter.did", MAX_DID_LEN),
        expires_at_before=_opt_int(f, "expires_at_before", "filter.expires_at_before"),
        expires_at_after=_opt_int(f, "expires_at_after", "filter.expires_at_after"),
    )


def _pending_filter(f: dict[str, Any]) -> PendingFilter:
    return PendingFilter(_opt_str(f, "sender_did", "filter.sender_did", MAX_DID_LEN))


def _v_save_events(p: dict[str, Any]) -> SaveEvents:
    events = as_list(p.get("events"), "events", MAX_EVENTS)
    if not events:
        raise invalid("events must not be empty")
    out = []
    for ev in events:
        as_obj(ev, "event")
        out.append(
            EventToSave(
                sender_did=as_str(ev.get("sender_did"), "event.sender_did", MAX_DID_LEN),
                recipient_did=as_str(ev.get("recipient_did"), "event.recipient_did", MAX_DID_LEN),
                contract_id=_opt_str(ev, "contract_id", "event.contract_id", 256),
                timestamp=as_int(ev.get("timestamp"), "event.timestamp", -(2**53), 2**53),
                payload=as_str(ev.get("payload"), "event.payload"),
                encrypted_tags=tuple(
                    _str_list(ev.get("encrypted_tags", []), "event.encrypted_tags", MAX_TAGS, MAX_TAG_LEN)
                ),
            )
        )
    return SaveEvents(tuple(out))


def _event_filter(f: dict[str, Any]) -> EventFilter:
    after = _opt_int(f, "after_timestamp", "filter.after_timestamp")
    before = _opt_int(f, "before_timestamp", "filter.before_timestamp")
    participant = _opt_str(f, "participant_did", "filter.participant_did", MAX_DID_LEN)
    tags: list[str] = []
    if opt(f, "encrypted_tags") is not None:
        tags = _str_list(f["encrypted_tags"], "filter.encrypted_tags", MAX_TAGS, MAX_TAG_LEN)
    unprocessed = opt(f, "unprocessed_only")
    if unprocessed is not None and not isinstance(unprocessed, bool):
        raise invalid("filter.unprocessed_only must be a boolean")
    return EventFilter(after, before, participant, tuple(tags), bool(unprocessed))


def _v_update_tags(p: dict[str, Any]) -> UpdateEventTags:
    updates = []
    for ev in as_list(p.get("events"), "events", MAX_EVENTS):
        as_obj(ev, "event")
        updates.append(
            TagUpdate(
                as_str(ev.get("event_id"), "event.event_id", 64),
                tuple(_str_list(ev.get("encrypted_tags"), "event.encrypted_tags", MAX_TAGS, MAX_TAG_LEN)),
            )
        )
    return UpdateEventTags(tuple(updates))


def _v_publish(p: dict[str, Any]) -> PublishPublicEvent:
    ev = as_obj(p.get("public_event"), "public_event")
    as_str(ev.get("channel_id"), "public_event.channel_id", 256)
    as_str(ev.get("event"), "public_event.event", allow_empty=True)
    _str_list(ev.get("tags"), "public_event.tags", MAX_TAGS, MAX_TAG_LEN)
    as_int(ev.get("timestamp"), "public_event.timestamp", 0, 2**53)
    as_str(ev.get("signature"), "public_event.signature", 128)
    return PublishPublicEvent(ev)


def _v_delete_public(p: dict[str, Any]) -> DeletePublicEvent:
    return DeletePublicEvent(as_str(p.get("public_event_id"), "public_event_id", 64))


# Push devices (docs/push.md, "Registration"): our extension, outside DCTRL-0004. The token is the
# service's own (FCM registration token, APNs device token in hex) or, for Web Push, the browser's
# PushSubscription as JSON text; the push app checks its form.
PUSH_SERVICES = ("fcm", "apns", "webpush")
MAX_PUSH_TOKEN = 4096
MAX_PUSH_PLATFORM = 32


def _push_service(p: dict[str, Any]) -> str:
    service = p.get("service")
    if service not in PUSH_SERVICES:
        raise invalid("service must be one of fcm, apns, webpush")
    return str(service)


def _v_push_set(p: dict[str, Any]) -> PushDeviceSet:
    return PushDeviceSet(
        _push_service(p),
        as_str(p.get("token"), "token", MAX_PUSH_TOKEN),
        _opt_str(p, "platform", "platform", MAX_PUSH_PLATFORM),
    )


def _v_push_device(p: dict[str, Any]) -> PushDevice:
    return PushDevice(_push_service(p))


PUSH_COMMANDS = {
    "PUSH_DEVICE_SET": _v_push_set,
    "PUSH_DEVICE_GET": _v_push_device,
    "PUSH_DEVICE_REMOVE": _v_push_device,
}

DIRECT_COMMANDS = {
    "REQUEST_COMMUNICATION_CONTRACT": _v_request_contract,
    "COMMUNICATION_CONTRACT_RESPONSE": _v_signed_contract,
    "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS": _v_query_with_page,
    "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS": _acknowledge("communication_contract_ids"),
    "SAVE_COMMUNICATION_CONTRACT": _v_signed_contract,
    "QUERY_COMMUNICATION_CONTRACTS": _query(_contract_filter),
    "QUERY_PENDING_EVENTS": _query(_pending_filter),
    "ACKNOWLEDGE_PENDING_EVENTS": _acknowledge("event_ids"),
    "SAVE_EVENTS": _v_save_events,
    "QUERY_EVENTS": _query(_event_filter),
    "UPDATE_EVENT_TAGS": _v_update_tags,
    **PUSH_COMMANDS,
}
PUBLIC_COMMANDS = {
    "PUBLISH_PUBLIC_EVENT": _v_publish,
    "DELETE_PUBLIC_EVENT": _v_delete_public,
}


@dataclass(frozen=True)
class Header:
    channel: str
    sender_did: str
    sender_signing_key_id: str
    recipient_did: str
    timestamp: int
    nonce: str


@dataclass(frozen=True)
class Command:
    header: Header
    payload: Any  # as received: the TWO_WAY_PRIVATE blob, or the payload object
    signature: str
    signable: dict[str, Any]  # {"header": <as received>, "payload": <as received>}
    # The validated payload: a typed value per command type (RequestContract, QueryEvents, …);
    # for TWO_WAY_PRIVATE the blob itself.
    body: Any = None

    @property
    def type(self) -> str:
        """The command type: the payload `type`, or the channel for TWO_WAY_PRIVATE."""
        if isinstance(self.payload, dict):
            return str(self.payload["type"])
        return self.header.channel


def parse_header(h: Any) -> Header:
    """Validate the six header fields (DCTRL-0004 §4.2)."""
    h = as_obj(h, "header")
    channel = h.get("channel")
    if channel not in CHANNELS:
        raise invalid("unknown channel")
    nonce = h.get("nonce")
    if not isinstance(nonce, str) or not UUID_RE.match(nonce):
        raise invalid("nonce must be a UUID")
    return Header(
        channel=channel,
        sender_did=as_str(h.get("sender_did"), "sender_did", MAX_DID_LEN),
        sender_signing_key_id=as_str(h.get("sender_signing_key_id"), "sender_signing_key_id", MAX_DID_LEN + 64),
        recipient_did=as_str(h.get("recipient_did"), "recipient_did", MAX_DID_LEN),
        timestamp=as_int(h.get("timestamp"), "timestamp", -(2**53), 2**53),
        nonce=nonce.lower(),
    )


def loads_client_json(raw: bytes | str) -> Any:
    """Parse JSON a client sent (a command body, a WebSocket frame) under the mediator's input
    rules: strict JSON (canonical.loads_strict: no duplicate keys, no NaN, no lone surrogates,
    bounded depth and integers) and no U+0000, which PostgreSQL text cannot store.
    ProtocolError(INVALID_COMMAND) otherwise."""
    try:
        return loads_strict(raw, forbid_nul=True)
    except CanonicalError as exc:
        raise invalid(str(exc)) from exc


def parse_command(raw: bytes | str) -> Command:
    """Parse and validate a command body; ProtocolError(INVALID_COMMAND) on any mismatch."""
    return command_from_obj(loads_client_json(raw))


def command_from_obj(obj: Any) -> Command:
    """Validate an already-parsed envelope object."""
    obj = as_obj(obj, "command")
    if "header" not in obj or "payload" not in obj:
        raise invalid("header and payload are required")
    header = parse_header(obj["header"])
    signature = obj.get("signature")
    if not isinstance(signature, str) or len(signature) > 200:
        raise invalid("signature must be a string")
    payload = obj["payload"]
    if header.channel == TWO_WAY_PRIVATE:
        body: object = as_str(payload, "payload")
    else:
        table = DIRECT_COMMANDS if header.channel == DIRECT_AUTHENTICATED else PUBLIC_COMMANDS
        as_obj(payload, "payload")
        validator = table.get(payload.get("type")) if isinstance(payload.get("type"), str) else None
        if validator is None:
            raise unknown_command()
        body = validator(payload)
    return Command(
        header=header,
        payload=payload,
        signature=signature,
        signable={"header": obj["header"], "payload": payload},
        body=body,
    )
