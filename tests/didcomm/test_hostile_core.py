"""The core's parsers refuse hostile input with their own typed errors (never RecursionError,
TypeError or UnicodeError, which the front doors could only answer as a defect of ours)."""

from __future__ import annotations

import pytest

from apps.didcomm.core import did_peer, diddoc, message, message_v1
from apps.didcomm.core.errors import InvalidDid, InvalidKey, MalformedEnvelope, MalformedMessage
from apps.didcomm.core.keys import multibase_decode
from apps.didcomm.core.resolver import resolve_did
from apps.wire.encoding import EncodingError, b58decode, b58encode, b64url_nopad

DEEP = b"[" * 100_000


def test_deep_json_is_refused_as_malformed_by_every_parser():
    with pytest.raises(MalformedEnvelope):
        message.parse_json_object(DEEP)
    with pytest.raises(MalformedEnvelope):
        message.parse_plaintext(DEEP)
    with pytest.raises(MalformedMessage):
        message_v1.parse(DEEP)
    attachment = {"data": {"base64": "e30", "jws": {"protected": b64url_nopad(DEEP), "signature": "AA"}}}
    with pytest.raises(MalformedMessage):
        message_v1.verify_attachment(attachment)


@pytest.mark.parametrize(
    "text",
    [b'{"id":"1","type":"t","body":{},"id":"2"}', b'{"id":"1","body":{"n":NaN}}', b'{"id":"\\ud800"}',
     b'{"n":1' + b"0" * 80 + b"}", b"\xef\xbb\xbf{}", '{"id":"1"}'.encode("utf-16")],
)  # fmt: skip
def test_json_that_canonical_json_cannot_carry_is_refused_as_for_decentrl(text):
    """One parser for both protocols (wire.canonical.loads_strict): a repeated key, NaN, a lone
    surrogate, an oversized number, a byte-order mark or another encoding than UTF-8."""
    with pytest.raises(MalformedEnvelope, match="not JSON"):
        message.parse_json_object(text)
    with pytest.raises(MalformedMessage, match="not JSON"):
        message_v1.parse(text)


@pytest.mark.parametrize(
    "document",
    [{"alsoKnownAs": 5}, {"verificationMethod": 5}, {"verificationMethod": [{"id": "#k", "type": ["x"], "publicKeyBase58": "abc"}]},
     {"verificationMethod": [{"id": "#k", "type": "Ed25519VerificationKey2018", "publicKeyBase58": 7}]}],
)  # fmt: skip
def test_a_did_peer_4_document_of_the_wrong_shape_does_not_resolve(document):
    with pytest.raises(InvalidDid if "alsoKnownAs" in document or document["verificationMethod"] == 5 else InvalidKey):
        resolve_did(did_peer.peer4_create(document))


def test_a_verification_method_whose_type_is_not_a_string_has_no_key():
    with pytest.raises(InvalidKey):
        diddoc.verification_method_key({"type": {"a": 1}, "publicKeyBase58": "abc"})


def test_base58_longer_than_a_key_is_refused_before_decoding_unless_allowed():
    with pytest.raises(EncodingError, match="too long"):
        b58decode("2" * 1_000_000)
    with pytest.raises(InvalidKey, match="not a base58btc multibase value") as refused:
        multibase_decode("z" + "2" * 1_000_000)
    assert str(refused.value.__cause__) == "base58 text too long"
    assert b58decode("2" * 128) == b58decode("2" * 128, max_chars=10**6)
    with pytest.raises(EncodingError, match="too long"):
        b58decode("2" * 129)
    data = bytes(range(256)) * 20  # a did:peer:4-sized value, with leading zero bytes kept
    assert b58decode(b58encode(b"\0\0" + data), max_chars=10_000) == b"\0\0" + data
    assert multibase_decode("z" + b58encode(data), max_chars=10_000) == data
