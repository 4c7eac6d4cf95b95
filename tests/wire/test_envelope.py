"""parse_command: the schema every command must pass before anything else (docs/protocol-readings.md §3 step 1)."""

from __future__ import annotations

import copy
import json

import pytest

from apps.wire.canonical import canonical_bytes
from apps.wire.envelope import (
    DIRECT_COMMANDS,
    PUBLIC_COMMANDS,
    PUSH_COMMANDS,
    EventFilter,
    EventToSave,
    Pagination,
    PendingFilter,
    QueryEvents,
    QueryPendingEvents,
    SaveEvents,
    parse_command,
    parse_pagination,
)
from apps.wire.errors import HTTP_STATUS, WS_CLOSE_CODES, ErrorCode, ProtocolError, error_body

from .test_vectors import ALICE_DID, COMMAND_SIG, NONCE

MEDIATOR = "did:web:mediator.decentrl.io"
TAG = "urAYoClLz4qgsq9JbDZ7K2s8rP5Waq054iA7cHO7XP+LGJLQqrooqI5t4rC69sSEGBgJMC170KSeOlFPiKdyBg=="
CONTRACT = {"communication_contract": {"requestor_did": ALICE_DID}, "requestor_signature": "x"}
EVENT = {
    "sender_did": ALICE_DID,
    "recipient_did": MEDIATOR,
    "timestamp": 1699123456000,
    "payload": "blob",
    "encrypted_tags": [TAG],
}

VALID_PAYLOADS = {
    "REQUEST_COMMUNICATION_CONTRACT": {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": "AAECAwQFBgcICQoLRfzcBYlP72hMbRhm/UfgHDpoBJYNGUlycAbNgMv/ypaS",
        "requestor_ephemeral_public_key": "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=",
    },
    "COMMUNICATION_CONTRACT_RESPONSE": {
        "type": "COMMUNICATION_CONTRACT_RESPONSE",
        "signed_communication_contract": CONTRACT,
    },
    "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS": {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"},
    "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS": {
        "type": "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS",
        "communication_contract_ids": ["7b1c"],
    },
    "SAVE_COMMUNICATION_CONTRACT": {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": CONTRACT},
    "QUERY_COMMUNICATION_CONTRACTS": {
        "type": "QUERY_COMMUNICATION_CONTRACTS",
        "filter": {"did": ALICE_DID, "expires_at_before": 1900000000, "expires_at_after": 1.0},
        "pagination": {"page": 1, "page_size": 100},
    },
    "QUERY_PENDING_EVENTS": {"type": "QUERY_PENDING_EVENTS", "filter": {"sender_did": ALICE_DID}},
    "ACKNOWLEDGE_PENDING_EVENTS": {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": ["a", "b"]},
    "SAVE_EVENTS": {
        "type": "SAVE_EVENTS",
        "events": [EVENT, {**EVENT, "contract_id": "ab" * 32, "encrypted_tags": []}],
    },
    "QUERY_EVENTS": {
        "type": "QUERY_EVENTS",
        "filter": {
            "after_timestamp": 0,
            "before_timestamp": 2.0e12,
            "participant_did": ALICE_DID,
            "encrypted_tags": [TAG],
            "unprocessed_only": True,
        },
        "pagination": {"page": 0},
    },
    "UPDATE_EVENT_TAGS": {"type": "UPDATE_EVENT_TAGS", "events": [{"event_id": "e1", "encrypted_tags": [TAG]}]},
    "PUBLISH_PUBLIC_EVENT": {
        "type": "PUBLISH_PUBLIC_EVENT",
        "public_event": {
            "channel_id": "news",
            "event": "",
            "tags": ["t"],
            "timestamp": 1699123456000,
            "signature": "sig",
        },
    },
    "DELETE_PUBLIC_EVENT": {"type": "DELETE_PUBLIC_EVENT", "public_event_id": "p1"},
    # Our extension, outside DCTRL-0004 (docs/push.md, "Registration")
    "PUSH_DEVICE_SET": {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": "t0k3n", "platform": "android"},
    "PUSH_DEVICE_GET": {"type": "PUSH_DEVICE_GET", "service": "apns"},
    "PUSH_DEVICE_REMOVE": {"type": "PUSH_DEVICE_REMOVE", "service": "webpush"},
}


def _channel_for(type_: str) -> str:
    return "ONE_WAY_PUBLIC" if type_ in PUBLIC_COMMANDS else "DIRECT_AUTHENTICATED"


def envelope(payload, chan: str | None = None, **header) -> dict:
    channel = chan
    if channel is None:
        channel = (
            _channel_for(payload["type"])
            if isinstance(payload, dict) and isinstance(payload.get("type"), str)
            else "DIRECT_AUTHENTICATED"
        )
    h = {
        "channel": channel,
        "sender_did": ALICE_DID,
        "sender_signing_key_id": ALICE_DID + "#signing",
        "recipient_did": MEDIATOR,
        "timestamp": 1699123456000,
        "nonce": NONCE,
    }
    h.update(header)
    return {"header": h, "payload": payload, "signature": COMMAND_SIG}


def raw(obj) -> bytes:
    return json.dumps(obj).encode("utf-8")


def rejected(body: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_command(body)
    assert info.value.code is ErrorCode.INVALID_COMMAND
    assert info.value.status == 400
    assert info.value.body() == {"type": "ERROR", "code": "INVALID_COMMAND"}


def test_the_table_covers_every_command_type():
    assert set(VALID_PAYLOADS) == set(DIRECT_COMMANDS) | set(PUBLIC_COMMANDS)
    assert len(DIRECT_COMMANDS) == 11 + len(PUSH_COMMANDS)  # DCTRL-0004's eleven and our extension's


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "PUSH_DEVICE_SET", "service": "gcm", "token": "t"},
        {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": ""},
        {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": "t" * 4097},
        {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": 7},
        {"type": "PUSH_DEVICE_SET", "service": "fcm", "token": "t", "platform": "p" * 33},
        {"type": "PUSH_DEVICE_GET"},
        {"type": "PUSH_DEVICE_REMOVE", "service": None},
    ],
)
def test_push_device_commands_refuse_a_bad_payload(payload):
    rejected(raw(envelope(payload)))


@pytest.mark.parametrize("type_", sorted(VALID_PAYLOADS))
def test_every_command_type_accepts_its_valid_payload(type_):
    env = envelope(VALID_PAYLOADS[type_])
    cmd = parse_command(raw(env))
    assert cmd.type == type_
    assert cmd.header.channel == _channel_for(type_)
    assert cmd.signable == {"header": env["header"], "payload": env["payload"]}
    assert cmd.signature == COMMAND_SIG


def test_two_way_private_takes_a_string_payload():
    cmd = parse_command(raw(envelope("opaque-blob", chan="TWO_WAY_PRIVATE", recipient_did=ALICE_DID)))
    assert cmd.type == "TWO_WAY_PRIVATE"
    assert cmd.payload == "opaque-blob"


def test_the_header_is_typed():
    cmd = parse_command(raw(envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"], timestamp=1.0, nonce=NONCE.upper())))
    assert cmd.header.timestamp == 1 and isinstance(cmd.header.timestamp, int)
    assert cmd.header.nonce == NONCE
    assert cmd.header.sender_did == ALICE_DID
    assert cmd.header.recipient_did == MEDIATOR


def test_the_signable_is_what_was_received_so_an_integral_float_keeps_the_js_spelling():
    body = raw(envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"])).replace(b"1699123456000", b"1699123456000.0")
    cmd = parse_command(body)
    assert b'"timestamp":1699123456000}' in canonical_bytes(cmd.signable)


def test_unknown_extra_members_are_tolerated_and_kept_in_the_signable():
    env = envelope({**VALID_PAYLOADS["QUERY_PENDING_EVENTS"], "x": 1}, extra="y")
    cmd = parse_command(raw(env))
    assert cmd.signable["payload"]["x"] == 1 and cmd.signable["header"]["extra"] == "y"


HEADER_REJECTS = {
    "channel unknown": {"channel": "BROADCAST"},
    "channel lowercase": {"channel": "direct_authenticated"},
    "channel missing": {"channel": None},
    "nonce not a uuid": {"nonce": "not-a-uuid"},
    "nonce without dashes": {"nonce": NONCE.replace("-", "")},
    "nonce braces": {"nonce": "{" + NONCE + "}"},
    "nonce number": {"nonce": 12345},
    "timestamp fractional": {"timestamp": 1699123456000.5},
    "timestamp string": {"timestamp": "1699123456000"},
    "timestamp bool": {"timestamp": True},
    "timestamp null": {"timestamp": None},
    "timestamp too large": {"timestamp": 2**60},
    "sender_did empty": {"sender_did": ""},
    "sender_did number": {"sender_did": 7},
    "sender_did too long": {"sender_did": "d" * 5000},
    "key id list": {"sender_signing_key_id": [ALICE_DID]},
    "recipient_did null": {"recipient_did": None},
    "recipient_did object": {"recipient_did": {}},
}


@pytest.mark.parametrize("case", sorted(HEADER_REJECTS))
def test_a_mistyped_header_is_invalid_command(case):
    env = envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"], **HEADER_REJECTS[case])
    rejected(raw(env))


@pytest.mark.parametrize(
    "field", ["channel", "sender_did", "sender_signing_key_id", "recipient_did", "timestamp", "nonce"]
)
def test_a_missing_header_field_is_invalid_command(field):
    env = envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"])
    del env["header"][field]
    rejected(raw(env))


def _without(key):
    def f(env):
        del env[key]

    return f


def _set(key, value):
    def f(env):
        env[key] = value

    return f


ENVELOPE_REJECTS = {
    "no header": _without("header"),
    "no payload": _without("payload"),
    "no signature": _without("signature"),
    "signature number": _set("signature", 5),
    "signature null": _set("signature", None),
    "signature huge": _set("signature", "A" * 500),
    "header array": _set("header", []),
    "header string": _set("header", "h"),
}


@pytest.mark.parametrize("case", sorted(ENVELOPE_REJECTS))
def test_a_malformed_envelope_is_invalid_command(case):
    env = envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"])
    ENVELOPE_REJECTS[case](env)
    rejected(raw(env))


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b"null", b'"x"', b"42", b"{", b"NaN", b'{"header":NaN}', b"\xff\xfe", b'{"a":"\\udfff"}', b"[" * 5000],
)
def test_bytes_that_are_not_an_envelope_are_invalid_command(body):
    rejected(body)


def test_a_lone_surrogate_anywhere_is_invalid_command():
    for where in ("payload", "header"):
        env = envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"])
        env[where]["x"] = "\ud800"
        body = raw(env)
        assert b'"\\ud800"' in body
        rejected(body)


def test_a_huge_number_anywhere_is_invalid_command():
    body = raw(envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"])).replace(b"1699123456000", b"1" + b"0" * 400)
    rejected(body)
    body = raw(envelope(VALID_PAYLOADS["QUERY_PENDING_EVENTS"])).replace(b"1699123456000", b"1e999")
    rejected(body)


PAYLOAD_CHANNEL_REJECTS = [
    ("DIRECT_AUTHENTICATED", "a string"),
    ("DIRECT_AUTHENTICATED", ["QUERY_PENDING_EVENTS"]),
    ("DIRECT_AUTHENTICATED", None),
    ("DIRECT_AUTHENTICATED", {}),
    ("DIRECT_AUTHENTICATED", {"type": "NOT_A_COMMAND"}),
    ("DIRECT_AUTHENTICATED", {"type": "query_pending_events"}),
    ("DIRECT_AUTHENTICATED", {"type": 3}),
    ("DIRECT_AUTHENTICATED", {"type": None}),
    ("DIRECT_AUTHENTICATED", VALID_PAYLOADS["PUBLISH_PUBLIC_EVENT"]),  # public command on the direct channel
    ("ONE_WAY_PUBLIC", VALID_PAYLOADS["QUERY_PENDING_EVENTS"]),  # direct command on the public channel
    ("ONE_WAY_PUBLIC", "a string"),
    ("TWO_WAY_PRIVATE", {"type": "QUERY_PENDING_EVENTS"}),
    ("TWO_WAY_PRIVATE", ""),
    ("TWO_WAY_PRIVATE", None),
    ("TWO_WAY_PRIVATE", 12),
    ("TWO_WAY_PRIVATE", ["blob"]),
]


@pytest.mark.parametrize("channel,payload", PAYLOAD_CHANNEL_REJECTS)
def test_the_payload_must_match_its_channel(channel, payload):
    rejected(raw(envelope(payload, chan=channel)))


def _p(type_, **changes):
    p = copy.deepcopy(VALID_PAYLOADS[type_])
    for k, v in changes.items():
        if v is ...:
            p.pop(k, None)
        else:
            p[k] = v
    return p


PAYLOAD_REJECTS = [
    _p("REQUEST_COMMUNICATION_CONTRACT", encrypted_contract_request=...),
    _p("REQUEST_COMMUNICATION_CONTRACT", encrypted_contract_request=""),
    _p("REQUEST_COMMUNICATION_CONTRACT", encrypted_contract_request=5),
    _p("REQUEST_COMMUNICATION_CONTRACT", encrypted_contract_request="A" * (64 * 1024 + 1)),
    _p("REQUEST_COMMUNICATION_CONTRACT", requestor_ephemeral_public_key=...),
    _p("REQUEST_COMMUNICATION_CONTRACT", requestor_ephemeral_public_key="A" * 65),
    _p("COMMUNICATION_CONTRACT_RESPONSE", signed_communication_contract="{}"),
    _p("COMMUNICATION_CONTRACT_RESPONSE", signed_communication_contract=...),
    _p("SAVE_COMMUNICATION_CONTRACT", signed_communication_contract=[CONTRACT]),
    _p("QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", pagination=[]),
    _p("QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", pagination={"page": -1}),
    _p("QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", pagination={"page": 0.5}),
    _p("QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", pagination={"page_size": 0}),
    _p("QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", pagination={"page_size": 101}),
    _p("QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", pagination={"page_size": True}),
    _p("QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", pagination={"page": "1"}),
    _p("ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", communication_contract_ids=...),
    _p("ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", communication_contract_ids="id"),
    _p("ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", communication_contract_ids=[1]),
    _p("ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", communication_contract_ids=[""]),
    _p("ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", communication_contract_ids=["x"] * 1001),
    _p("QUERY_COMMUNICATION_CONTRACTS", filter="did"),
    _p("QUERY_COMMUNICATION_CONTRACTS", filter={"did": 5}),
    _p("QUERY_COMMUNICATION_CONTRACTS", filter={"expires_at_before": 1.5}),
    _p("QUERY_COMMUNICATION_CONTRACTS", filter={"expires_at_after": False}),
    _p("QUERY_COMMUNICATION_CONTRACTS", filter={"expires_at_after": "1"}),
    _p("QUERY_PENDING_EVENTS", filter={"sender_did": ["x"]}),
    _p("QUERY_PENDING_EVENTS", filter=[]),
    _p("QUERY_PENDING_EVENTS", pagination={"page_size": 1000}),
    _p("ACKNOWLEDGE_PENDING_EVENTS", event_ids=...),
    _p("ACKNOWLEDGE_PENDING_EVENTS", event_ids=[None]),
    _p("ACKNOWLEDGE_PENDING_EVENTS", event_ids={"a": 1}),
    _p("ACKNOWLEDGE_PENDING_EVENTS", event_ids=["x" * 65]),
    _p("SAVE_EVENTS", events=[]),
    _p("SAVE_EVENTS", events=...),
    _p("SAVE_EVENTS", events=EVENT),
    _p("SAVE_EVENTS", events=["e"]),
    _p("SAVE_EVENTS", events=[{**EVENT, "timestamp": 1.5}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "timestamp": True}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "timestamp": "1"}]),
    _p("SAVE_EVENTS", events=[{k: v for k, v in EVENT.items() if k != "timestamp"}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "payload": 5}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "payload": ""}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "sender_did": None}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "recipient_did": ""}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "contract_id": 5}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "encrypted_tags": "t"}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "encrypted_tags": [5]}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "encrypted_tags": ["t"] * 101}]),
    _p("SAVE_EVENTS", events=[{**EVENT, "encrypted_tags": ["t" * 1025]}]),
    _p("SAVE_EVENTS", events=[EVENT] * 1001),
    _p("QUERY_EVENTS", filter={"after_timestamp": 0.25}),
    _p("QUERY_EVENTS", filter={"before_timestamp": "now"}),
    _p("QUERY_EVENTS", filter={"participant_did": 1}),
    _p("QUERY_EVENTS", filter={"encrypted_tags": TAG}),
    _p("QUERY_EVENTS", filter={"unprocessed_only": 1}),
    _p("QUERY_EVENTS", filter={"unprocessed_only": "true"}),
    _p("QUERY_EVENTS", pagination={"page": 1.5}),
    _p("UPDATE_EVENT_TAGS", events=...),
    _p("UPDATE_EVENT_TAGS", events=[{"encrypted_tags": [TAG]}]),
    _p("UPDATE_EVENT_TAGS", events=[{"event_id": "e1"}]),
    _p("UPDATE_EVENT_TAGS", events=[{"event_id": 1, "encrypted_tags": []}]),
    _p("UPDATE_EVENT_TAGS", events=["e1"]),
    _p("PUBLISH_PUBLIC_EVENT", public_event=...),
    _p(
        "PUBLISH_PUBLIC_EVENT",
        public_event={"channel_id": "news", "event": "", "tags": [], "timestamp": 1.5, "signature": "s"},
    ),
    _p(
        "PUBLISH_PUBLIC_EVENT",
        public_event={"channel_id": "", "event": "", "tags": [], "timestamp": 1, "signature": "s"},
    ),
    _p(
        "PUBLISH_PUBLIC_EVENT",
        public_event={"channel_id": "n", "event": 1, "tags": [], "timestamp": 1, "signature": "s"},
    ),
    _p(
        "PUBLISH_PUBLIC_EVENT",
        public_event={"channel_id": "n", "event": "", "tags": "t", "timestamp": 1, "signature": "s"},
    ),
    _p(
        "PUBLISH_PUBLIC_EVENT",
        public_event={"channel_id": "n", "event": "", "tags": [], "timestamp": -1, "signature": "s"},
    ),
    _p(
        "PUBLISH_PUBLIC_EVENT",
        public_event={"channel_id": "n", "event": "", "tags": [], "timestamp": 1, "signature": None},
    ),
    _p("DELETE_PUBLIC_EVENT", public_event_id=...),
    _p("DELETE_PUBLIC_EVENT", public_event_id=7),
]


@pytest.mark.parametrize("payload", PAYLOAD_REJECTS, ids=lambda p: p["type"])
def test_a_payload_that_breaks_its_schema_is_invalid_command(payload):
    rejected(raw(envelope(payload)))


def test_pagination_defaults_and_integral_floats():
    assert parse_pagination({}) == Pagination(0, 10)
    assert parse_pagination({"pagination": None}) == Pagination(0, 10)
    assert parse_pagination({"pagination": {}}) == Pagination(0, 10)
    assert parse_pagination({"pagination": {"page": 2.0, "page_size": 100.0}}) == Pagination(2, 100)
    p = parse_pagination({"pagination": {"page": 3, "page_size": 7}})
    assert (p.offset, p.reply(22)) == (21, {"page": 3, "page_size": 7, "total": 22})


def test_error_codes_have_their_http_statuses():
    assert {c.value: c.http_status for c in ErrorCode} == {
        "INVALID_COMMAND": 400,
        "INVALID_SIGNATURE": 401,
        "INVALID_SIGNATURES": 401,
        "UNAUTHORIZED_COMMAND": 401,
        "TIMESTAMP_OUT_OF_RANGE": 401,
        "DUPLICATE_NONCE": 401,
        "SENDER_NOT_FOUND": 404,
        "SENDER_SIGNING_KEY_NOT_FOUND": 404,
        "RECIPIENT_NOT_FOUND": 404,
        "RECIPIENT_NOT_REGISTERED": 404,
        "COMMUNICATION_CONTRACT_NOT_FOUND": 404,
        "PAYLOAD_TOO_LARGE": 413,
        "RATE_LIMITED": 429,
        "RECIPIENT_QUEUE_FULL": 507,
        "MEDIATOR_UNAVAILABLE": 503,
        "UNKNOWN_MEDIATOR": 404,
    }
    assert set(HTTP_STATUS) == set(ErrorCode)
    assert error_body(ErrorCode.DUPLICATE_NONCE) == {"type": "ERROR", "code": "DUPLICATE_NONCE"}
    assert WS_CLOSE_CODES["DUPLICATE_NONCE"] == 4008
    assert sorted(WS_CLOSE_CODES.values()) == list(range(4001, 4009))


def test_the_validated_payload_comes_out_typed_and_the_signable_stays_as_received():
    payload = {
        "type": "QUERY_EVENTS",
        "filter": {"encrypted_tags": [TAG], "after_timestamp": 5.0, "unprocessed_only": None},
        "pagination": {"page": 2, "page_size": 7},
    }
    cmd = parse_command(raw(envelope(payload)))
    assert cmd.body == QueryEvents(
        filter=EventFilter(after_timestamp=5, encrypted_tags=(TAG,)), page=Pagination(page=2, page_size=7)
    )
    assert cmd.signable["payload"] is cmd.payload and cmd.payload["filter"]["after_timestamp"] == 5.0
    save = parse_command(raw(envelope({"type": "SAVE_EVENTS", "events": [EVENT]}))).body
    assert save == SaveEvents((EventToSave(ALICE_DID, MEDIATOR, None, 1699123456000, "blob", (TAG,)),))
    pending = parse_command(raw(envelope({"type": "QUERY_PENDING_EVENTS"}))).body
    assert pending == QueryPendingEvents(PendingFilter(None), Pagination())
    assert parse_command(raw(envelope("blob", "TWO_WAY_PRIVATE"))).body == "blob"
