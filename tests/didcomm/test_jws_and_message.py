"""EdDSA JWS sign/verify and plaintext message parsing, with their errors."""

from __future__ import annotations

import json

import pytest

from apps.didcomm.core import errors, jws
from apps.didcomm.core.keys import ED25519, X25519, PrivateKey
from apps.didcomm.core.message import ENCRYPTED, PLAINTEXT, SIGNED, envelope_kind, parse_plaintext
from apps.wire.encoding import b64url_nopad


def test_a_signed_message_verifies_and_a_changed_payload_does_not():
    key = PrivateKey.generate(ED25519)
    signed = jws.sign(b'{"id":"1","type":"t","body":{}}', kid="did:example:a#key-1", key=key)
    lookup = {"did:example:a#key-1": key.public}.get
    assert jws.verify(signed, public_key_for=lookup) == jws.Verified(
        b'{"id":"1","type":"t","body":{}}', ("did:example:a#key-1",)
    )
    with pytest.raises(errors.InvalidSignature) as exc:
        jws.verify({**signed, "payload": b64url_nopad(b'{"id":"2"}')}, public_key_for=lookup)
    assert (str(exc.value), exc.value.code, exc.value.problem_code) == (
        "signature does not verify",
        "invalid_signature",
        "e.p.trust.crypto",
    )


def test_a_signature_by_an_unknown_or_non_ed25519_key_is_invalid():
    key = PrivateKey.generate(ED25519)
    signed = jws.sign(b"{}", kid="did:example:a#key-1", key=key)
    with pytest.raises(errors.InvalidSignature, match="does not resolve"):
        jws.verify(signed, public_key_for=lambda kid: None)
    with pytest.raises(errors.InvalidSignature, match="not Ed25519"):
        jws.verify(signed, public_key_for=lambda kid: PrivateKey.generate(X25519).public)


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"payload": "e30", "signatures": []},
        {"payload": "e30", "signatures": [{"protected": "!!", "signature": "AA"}]},
    ],
)
def test_malformed_jws_is_malformed(bad):
    with pytest.raises(errors.MalformedEnvelope):
        jws.verify(bad, public_key_for=lambda kid: None)


def test_envelope_kind_tells_the_three_forms_apart():
    assert [envelope_kind(o) for o in ({"ciphertext": ""}, {"payload": "", "signatures": []}, {"id": "1"})] == [
        ENCRYPTED,
        SIGNED,
        PLAINTEXT,
    ]


def test_a_plaintext_message_keeps_its_headers_and_return_route():
    msg = parse_plaintext(
        json.dumps(
            {
                "id": "1",
                "typ": "application/didcomm-plain+json",
                "type": "https://didcomm.org/messagepickup/3.0/delivery-request",
                "from": "did:example:a",
                "to": ["did:example:m"],
                "body": {"limit": 10},
                "return_route": "all",
                "created_time": 1767225600,
                "attachments": [],
            }
        )
    )
    assert (msg.type, msg.body, msg.from_, msg.to, msg.return_route, msg.created_time) == (
        "https://didcomm.org/messagepickup/3.0/delivery-request",
        {"limit": 10},
        "did:example:a",
        ("did:example:m",),
        "all",
        1767225600,
    )


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"type": "t", "body": {}}, "id is required"),
        ({"id": "1", "body": {}}, "type is required"),
        ({"id": "1", "type": "t", "body": []}, "body must be an object"),
        ({"id": "1", "type": "t", "typ": "application/json"}, "typ is not application/didcomm-plain+json"),
        ({"id": "1", "type": "t", "to": "did:example:b"}, "to must be a list of DIDs"),
        ({"id": "1", "type": "t", "created_time": "now"}, "created_time has the wrong type"),
        ({"id": "1", "type": "t", "created_time": True}, "created_time has the wrong type"),
        ({"id": "1", "type": "t", "attachments": [1]}, "attachments must be a list of objects"),
    ],
)
def test_malformed_plaintext_messages_are_named(obj, message):
    with pytest.raises(errors.MalformedMessage) as exc:
        parse_plaintext(obj)
    assert (str(exc.value), exc.value.code, exc.value.problem_code) == (message, "malformed_message", "e.p.msg")


def test_a_plaintext_that_is_not_a_json_object_is_a_malformed_envelope():
    with pytest.raises(errors.MalformedEnvelope):
        parse_plaintext(b"[]")
