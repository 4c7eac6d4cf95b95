"""The DIDComm v2 spec's Appendix C messages (third-party bytes) decrypt and verify with our code."""

from __future__ import annotations

import json

import pytest

from apps.didcomm.core import jwe, jws
from apps.didcomm.core.errors import UnsupportedAlgorithm
from apps.didcomm.core.keys import PublicKey
from apps.didcomm.core.message import parse_plaintext

BOB_X25519 = [f"did:example:bob#key-x25519-{i}" for i in range(1, 5)]


def _plain(spec, *, thid=True):
    """The spec's plaintext message; some of its encrypted vectors were made from it without `thid`."""
    plain = dict(spec["vectors"]["plaintext"]["TEST_PLAINTEXT_DIDCOMM_MESSAGE_SIMPLE"])
    if not thid:
        del plain["thid"]
    return plain


@pytest.mark.parametrize(
    ("name", "enc", "kid", "kids", "thid"),
    [
        ("TEST_ENCRYPTED_DIDCOMM_MESSAGE_ANON_XC20P_1", "XC20P", BOB_X25519[0], BOB_X25519, True),
        ("TEST_ENCRYPTED_DIDCOMM_MESSAGE_ANON_XC20P_2", "XC20P", "did:example:bob#key-p256-1", None, False),
        ("TEST_ENCRYPTED_DIDCOMM_MESSAGE_ANON_A256CBC", "A256CBC-HS512", "did:example:bob#key-p384-1", None, False),
        ("TEST_ENCRYPTED_DIDCOMM_MESSAGE_ANON_A256GCM", "A256GCM", "did:example:bob#key-p521-1", None, False),
    ],
)
def test_it_decrypts_the_spec_anoncrypt_messages(spec, name, enc, kid, kids, thid):
    out = jwe.decrypt(spec["vectors"]["anoncrypt"][name], private_key_for=spec["private"].get)
    assert (out.alg, out.enc, out.recipient_kid, out.sender_kid) == ("ECDH-ES+A256KW", enc, kid, None)
    if kids:
        assert out.recipient_kids == tuple(kids)
    assert json.loads(out.plaintext) == _plain(spec, thid=thid)


@pytest.mark.parametrize("kid", BOB_X25519[1:3])
def test_it_picks_its_own_recipient_among_several(spec, kid):
    only = {kid: spec["private"][kid]}
    out = jwe.decrypt(
        spec["vectors"]["anoncrypt"]["TEST_ENCRYPTED_DIDCOMM_MESSAGE_ANON_XC20P_1"], private_key_for=only.get
    )
    assert out.recipient_kid == kid
    assert json.loads(out.plaintext) == _plain(spec)


def test_it_decrypts_the_spec_authcrypt_x25519_message_and_names_the_sender(spec):
    out = jwe.decrypt(
        spec["vectors"]["authcrypt"]["TEST_ENCRYPTED_DIDCOMM_MESSAGE_AUTH_X25519"],
        private_key_for=spec["private"].get,
        sender_key_for=spec["public"].get,
    )
    assert (out.alg, out.enc, out.sender_kid) == ("ECDH-1PU+A256KW", "A256CBC-HS512", "did:example:alice#key-x25519-1")
    assert out.recipient_kids == tuple(BOB_X25519)
    assert json.loads(out.plaintext) == _plain(spec)


def test_it_decrypts_the_spec_authcrypt_p256_message_then_verifies_the_signed_one_inside(spec):
    vectors = spec["vectors"]["authcrypt"]
    out = jwe.decrypt(
        vectors["TEST_ENCRYPTED_DIDCOMM_MESSAGE_AUTH_P256"],
        private_key_for=spec["private"].get,
        sender_key_for=spec["public"].get,
    )
    assert out.sender_kid == "did:example:alice#key-p256-1"
    inner = json.loads(out.plaintext)
    assert inner == vectors["TEST_ENCRYPTED_DIDCOMM_MESSAGE_AUTH_P256_SIGNED"]
    verified = jws.verify(inner, public_key_for=spec["public"].get)
    assert verified.signer_kids == ("did:example:alice#key-1",)
    assert json.loads(verified.payload) == _plain(spec, thid=False)


def test_it_unwraps_the_spec_anoncrypt_of_authcrypt_of_signed_p521_message(spec):
    vectors = spec["vectors"]["authcrypt"]
    outer = jwe.decrypt(vectors["TEST_ENCRYPTED_DIDCOMM_MESSAGE_AUTH_P521"], private_key_for=spec["private"].get)
    assert (outer.alg, outer.enc) == ("ECDH-ES+A256KW", "XC20P")
    middle = jwe.decrypt(outer.plaintext, private_key_for=spec["private"].get, sender_key_for=spec["public"].get)
    assert (middle.alg, middle.sender_kid) == ("ECDH-1PU+A256KW", "did:example:alice#key-p521-1")
    verified = jws.verify(json.loads(middle.plaintext), public_key_for=spec["public"].get)
    assert json.loads(verified.payload) == _plain(spec, thid=False)


def test_it_verifies_the_spec_eddsa_signed_message(spec):
    verified = jws.verify(
        spec["vectors"]["signed"]["TEST_SIGNED_DIDCOMM_MESSAGE_ALICE_KEY_1"], public_key_for=spec["public"].get
    )
    assert verified.signer_kids == ("did:example:alice#key-1",)
    assert parse_plaintext(verified.payload).raw == _plain(spec)


@pytest.mark.parametrize("name", ["TEST_SIGNED_DIDCOMM_MESSAGE_ALICE_KEY_2", "TEST_SIGNED_DIDCOMM_MESSAGE_ALICE_KEY_3"])
def test_it_refuses_the_spec_es256_and_es256k_signatures_as_unsupported(spec, name):
    with pytest.raises(UnsupportedAlgorithm):
        jws.verify(spec["vectors"]["signed"][name], public_key_for=spec["public"].get)


def test_the_spec_plaintext_parses_with_every_header(spec):
    msg = parse_plaintext(json.dumps(_plain(spec)))
    assert (msg.id, msg.thid, msg.type, msg.from_, msg.to) == (
        "1234567890",
        "1234567890",
        "http://example.com/protocols/lets_do_lunch/1.0/proposal",
        "did:example:alice",
        ("did:example:bob",),
    )
    assert (msg.created_time, msg.expires_time, msg.body) == (
        1516269022,
        1516385931,
        {"messagespecificattribute": "and its value"},
    )


def test_the_spec_x25519_multibase_key_matches_its_jwk_twin(spec):
    # Bob's key-x25519-4 is published as multibase; it must be the same curve/length form we decode.
    key = PublicKey.from_multibase(spec["vectors"]["public_keys"]["did:example:bob#key-x25519-4"]["multibase"])
    assert key.crv == "X25519" and len(key.raw) == 32
