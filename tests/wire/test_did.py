"""did:decentrl parsing and construction (DCTRL-0001) and did:web helpers for mediators."""

from __future__ import annotations

import os

import pytest

from apps.wire.crypto import Ed25519KeyPair, X25519KeyPair
from apps.wire.did import (
    DID_CONTEXT,
    DidError,
    decentrl_did,
    decentrl_document,
    host_for_web_did,
    mediator_document,
    parse_decentrl,
    parse_mediator_document,
    web_did_for_host,
)
from apps.wire.encoding import ED25519_PUB, X25519_PUB, b64encode, b64url_nopad, multikey_encode

from .test_vectors import ALICE_DID, ED_PUB, MEDIATOR, PREKEY_SEGMENT, SIGNING_SEGMENT, X_ALICE_PUB

ALIAS_SEG = "YWxpY2U"
MEDIATOR_SEG = "ZGlkOndlYjptZWRpYXRvci5kZWNlbnRybC5pbw"


def _did(*segments: str) -> str:
    return "did:decentrl:" + ":".join(segments)


def test_construction_and_parsing_round_trip_with_unicode_alias_and_ported_mediator():
    signing, pre = Ed25519KeyPair.generate(), X25519KeyPair.generate()
    did = decentrl_did("Zoë 🚀", signing.public, pre.public, "did:web:localhost%3A8000")
    r = parse_decentrl(did)
    assert (r.alias, r.signing_key, r.pre_key, r.mediator_did) == (
        "Zoë 🚀",
        signing.public,
        pre.public,
        "did:web:localhost%3A8000",
    )
    assert r.did == did


def test_alias_and_mediator_segments_are_also_accepted_in_standard_padded_base64():
    did = _did(b64encode(b"alice"), SIGNING_SEGMENT, PREKEY_SEGMENT, b64encode(MEDIATOR.encode()))
    assert did != ALICE_DID
    r = parse_decentrl(did)
    assert (r.alias, r.signing_key, r.mediator_did) == ("alice", ED_PUB, MEDIATOR)


def test_a_fragment_is_stripped_before_resolving():
    assert parse_decentrl(ALICE_DID + "#signing").did == ALICE_DID


@pytest.mark.parametrize(
    "did",
    [
        _did(ALIAS_SEG, SIGNING_SEGMENT, PREKEY_SEGMENT),  # 3 segments
        _did(ALIAS_SEG, SIGNING_SEGMENT, PREKEY_SEGMENT, MEDIATOR_SEG, "x"),  # 5 segments
        _did("", SIGNING_SEGMENT, PREKEY_SEGMENT, MEDIATOR_SEG),  # empty alias
        _did(ALIAS_SEG, "", PREKEY_SEGMENT, MEDIATOR_SEG),
        _did(ALIAS_SEG, SIGNING_SEGMENT, "", MEDIATOR_SEG),
        _did(ALIAS_SEG, SIGNING_SEGMENT, PREKEY_SEGMENT, ""),
        _did(b64url_nopad(b"\xff\xfe"), SIGNING_SEGMENT, PREKEY_SEGMENT, MEDIATOR_SEG),  # alias not UTF-8
        _did("YW*pY2U", SIGNING_SEGMENT, PREKEY_SEGMENT, MEDIATOR_SEG),  # alias not base64
        _did(ALIAS_SEG, SIGNING_SEGMENT, PREKEY_SEGMENT, b64url_nopad(b"web:mediator.decentrl.io")),  # no did:
        _did(ALIAS_SEG, SIGNING_SEGMENT, PREKEY_SEGMENT, b64url_nopad(b"\xc3")),  # mediator not UTF-8
        _did(ALIAS_SEG, PREKEY_SEGMENT, SIGNING_SEGMENT, MEDIATOR_SEG),  # key prefixes swapped
        _did(ALIAS_SEG, SIGNING_SEGMENT, SIGNING_SEGMENT, MEDIATOR_SEG),  # signing key as pre-key
        _did(ALIAS_SEG, SIGNING_SEGMENT[:-1], PREKEY_SEGMENT, MEDIATOR_SEG),  # wrong key length
        _did(ALIAS_SEG, "zFVen3X669xLzsi6N2V91DoiyzHzg1uAgqiT8jZ9nS96Z", PREKEY_SEGMENT, MEDIATOR_SEG),  # no multicodec
        "did:web:mediator.decentrl.io",
        "did:decentral:" + ALICE_DID[len("did:decentrl:") :],
        "DID:DECENTRL:" + ALICE_DID[len("did:decentrl:") :],
        "",
        ALICE_DID[:-2] + "x" * 3000,  # over the length cap
    ],
)
def test_dids_that_do_not_parse_raise_did_error(did):
    with pytest.raises(DidError):
        parse_decentrl(did)


@pytest.mark.parametrize("value", [None, 1, b"did:decentrl:"])
def test_non_strings_do_not_parse(value):
    with pytest.raises(DidError):
        parse_decentrl(value)


def test_decentrl_document_names_signing_prekey_and_mediator():
    doc = decentrl_document(parse_decentrl(ALICE_DID))
    assert doc == {
        "@context": DID_CONTEXT,
        "id": ALICE_DID,
        "controller": ALICE_DID,
        "verificationMethod": [
            {
                "id": ALICE_DID + "#signing",
                "type": "Ed25519VerificationKey2020",
                "controller": ALICE_DID,
                "publicKeyMultibase": SIGNING_SEGMENT,
            }
        ],
        "keyAgreement": [
            {
                "id": ALICE_DID + "#prekey",
                "type": "X25519KeyAgreementKey2020",
                "controller": ALICE_DID,
                "publicKeyMultibase": PREKEY_SEGMENT,
            }
        ],
        "authentication": [ALICE_DID + "#signing"],
        "service": [{"id": "#mediator", "type": "DecentrlMediator", "serviceEndpoint": MEDIATOR}],
    }


@pytest.mark.parametrize(
    "host,did",
    [
        ("localhost:8000", "did:web:localhost%3A8000"),
        ("LocalHost:8000", "did:web:localhost%3A8000"),
        ("127.0.0.1:49152", "did:web:127.0.0.1%3A49152"),
        ("mediator.decentrl.io", "did:web:mediator.decentrl.io"),
    ],
)
def test_web_did_for_host_writes_the_port_colon_as_percent_3a(host, did):
    assert web_did_for_host(host) == did
    assert host_for_web_did(did) == host.lower()


def test_host_for_web_did_ignores_a_path_and_refuses_other_methods():
    assert host_for_web_did("did:web:example.com:users:alice") == "example.com"
    with pytest.raises(DidError):
        host_for_web_did(ALICE_DID)


def test_mediator_document_is_dctrl_0004_shape_and_parses_back():
    did = "did:web:localhost%3A8000"
    doc = mediator_document(did, ED_PUB, X_ALICE_PUB, "http://localhost:8000")
    assert doc["service"] == [
        {"id": "#mediator-service", "type": "DecentrlMediator", "serviceEndpoint": {"uri": "http://localhost:8000"}}
    ]
    assert doc["verificationMethod"][0]["publicKeyMultibase"] == multikey_encode(ED25519_PUB, ED_PUB)
    assert doc["keyAgreement"][0]["publicKeyMultibase"] == multikey_encode(X25519_PUB, X_ALICE_PUB)
    assert doc["authentication"] == [did + "#signing"]
    r = parse_mediator_document(doc)
    assert (r.did, r.signing_key, r.pre_key) == (did, ED_PUB, X_ALICE_PUB)


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"id": "did:web:x", "verificationMethod": [], "keyAgreement": []},
        {
            "id": "did:web:x",
            "verificationMethod": [{"publicKeyMultibase": PREKEY_SEGMENT}],
            "keyAgreement": [{"publicKeyMultibase": PREKEY_SEGMENT}],
        },
        {"id": "did:web:x", "verificationMethod": "nope", "keyAgreement": None},
        {
            "id": 5,
            "verificationMethod": [{"publicKeyMultibase": SIGNING_SEGMENT}],
            "keyAgreement": [{"publicKeyMultibase": PREKEY_SEGMENT}],
        },
        {
            "id": "web:x",
            "verificationMethod": [{"publicKeyMultibase": SIGNING_SEGMENT}],
            "keyAgreement": [{"publicKeyMultibase": PREKEY_SEGMENT}],
        },
        [],
        "did:web:x",
    ],
)
def test_malformed_mediator_documents_are_refused(doc):
    with pytest.raises(DidError):
        parse_mediator_document(doc)


def test_random_keys_never_produce_a_colon_inside_a_segment():
    for _ in range(50):
        did = decentrl_did("a:b", os.urandom(32), os.urandom(32), "did:web:h%3A1")
        assert did.count(":") == 5
        assert parse_decentrl(did).alias == "a:b"
