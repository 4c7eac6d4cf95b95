"""did:peer:2 create/resolve and did:peer:4 resolve, against the peer DID method spec's own examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.didcomm.core.did_peer import (
    encode_service,
    mediator_legacy_did,
    mediator_peer_did,
    peer2_create,
    peer2_document_json,
    peer4_create,
    peer4_document_json,
    peer4_short_form,
)
from apps.didcomm.core.errors import InvalidDid, UnsupportedDidMethod
from apps.didcomm.core.keys import ED25519, X25519, PrivateKey, PublicKey
from apps.didcomm.core.resolver import authentication_key, key_agreement_key, resolve_did
from apps.wire.encoding import b64url_nopad

SPEC = json.loads((Path(__file__).parent / "vectors" / "peer_did_spec_examples.json").read_text())
P2 = SPEC["peer2"]


def test_it_creates_the_spec_did_peer_2_from_its_keys_and_services():
    keys = [(purpose, PublicKey.from_multibase(mb)) for purpose, mb in P2["keys"]]
    assert peer2_create(keys, P2["services_input"]) == P2["did"]


def test_it_resolves_the_spec_did_peer_2_to_the_spec_document():
    assert peer2_document_json(P2["did"]) == P2["document"]
    doc = resolve_did(P2["did"])
    assert [vm.id for vm in doc.key_agreement] == [P2["did"] + "#key-2"]
    assert [vm.id for vm in doc.authentication] == [P2["did"] + "#key-1"]
    assert [(e.id, e.uri, e.accept, e.routing_keys) for e in doc.didcomm_endpoints()] == [
        ("#service", "http://example.com/didcomm", ("didcomm/v2",), ("did:example:123456789abcdefghi#key-1",)),
        ("#service-1", "http://example.com/another", ("didcomm/v2",), ("did:example:123456789abcdefghi#key-2",)),
    ]


@pytest.mark.parametrize(
    "kid",
    [
        "#key-2",
        P2["did"] + "#key-2",
        "#z6LSg8zQom395jKLrGiBNruB9MM6V8PWuf2FpEy4uRFiqQBR",
        P2["did"] + "#6LSg8zQom395jKLrGiBNruB9MM6V8PWuf2FpEy4uRFiqQBR",
    ],
)
def test_a_key_is_found_by_key_n_id_or_by_multibase_fingerprint(kid):
    vm = resolve_did(P2["did"]).find(kid, "keyAgreement")
    assert vm is not None and vm.key.multibase == "z6LSg8zQom395jKLrGiBNruB9MM6V8PWuf2FpEy4uRFiqQBR"


@pytest.mark.parametrize("kid", ["#6LSg8zQo", P2["did"] + "#6LSg8zQo"])
def test_a_key_is_found_by_the_short_id_peerdid_0_5_gives_it(kid):
    """SICPA peerdid 0.5 names a key `#` + the first 8 characters of its fingerprint, `z` left out."""
    vm = resolve_did(P2["did"]).find(kid, "keyAgreement")
    assert vm is not None and vm.key.multibase == "z6LSg8zQom395jKLrGiBNruB9MM6V8PWuf2FpEy4uRFiqQBR"


def test_a_short_key_id_is_found_only_in_its_relationship_and_only_at_8_characters():
    doc = resolve_did(P2["did"])
    assert doc.find(P2["did"] + "#6Mkj3PUd", "authentication").key.multibase.startswith("z6Mkj3PUd")
    assert doc.find(P2["did"] + "#6Mkj3PUd", "keyAgreement") is None
    assert doc.find(P2["did"] + "#6LSg8zQ", "keyAgreement") is None
    assert doc.find(P2["did"] + "#6LSg8zQom", "keyAgreement") is None


def test_an_ambiguous_short_key_id_names_no_key():
    """Two keys of one document starting with the same 8 fingerprint characters: the short id names neither."""
    key = PrivateKey.generate(X25519).public
    did = f"did:peer:2.E{key.multibase}.E{key.multibase}"
    doc = resolve_did(did)
    assert doc.find(f"{did}#key-2", "keyAgreement").key == key
    assert doc.find(f"{did}#{key.multibase[1:9]}", "keyAgreement") is None
    assert doc.find(f"{did}#{key.multibase[1:]}", "keyAgreement") is not None  # the whole fingerprint still does


def test_the_resolver_lookups_take_a_key_only_from_its_relationship():
    assert key_agreement_key(P2["did"] + "#key-2").multibase == "z6LSg8zQom395jKLrGiBNruB9MM6V8PWuf2FpEy4uRFiqQBR"
    assert key_agreement_key(P2["did"] + "#key-1") is None  # the V key is not a key-agreement key
    assert authentication_key(P2["did"] + "#key-1").multibase == "z6Mkj3PUd1WjvaDhNZhhhXQdz5UnZXmS7ehtx8bsPpD47kKc"
    assert key_agreement_key("did:web:example.com#key-1") is None
    assert key_agreement_key("did:peer:2.Xbroken#key-1") is None


def test_our_mediator_did_is_v_then_e_then_the_http_service_then_the_ws_one():
    auth, agree = PrivateKey.generate(ED25519).public, PrivateKey.generate(X25519).public
    did = mediator_peer_did(
        authentication=auth, agreement=agree, http_uri="https://t.example/didcomm", ws_uri="wss://t.example/ws"
    )
    svc = lambda uri: b64url_nopad(f'{{"t":"dm","s":{{"uri":"{uri}","a":["didcomm/v2"]}}}}'.encode())  # noqa: E731
    assert (
        did
        == f"did:peer:2.V{auth.multibase}.E{agree.multibase}.S{svc('https://t.example/didcomm')}.S{svc('wss://t.example/ws')}"
    )
    doc = resolve_did(did)
    assert doc.find(did + "#key-2", "keyAgreement").key == agree
    assert doc.find(did + "#key-1", "authentication").key == auth
    assert [(e.id, e.uri) for e in doc.didcomm_endpoints()] == [
        ("#service", "https://t.example/didcomm"),
        ("#service-1", "wss://t.example/ws"),
    ]


def test_our_legacy_mediator_did_has_the_same_keys_and_one_string_form_http_service():
    auth, agree = PrivateKey.generate(ED25519).public, PrivateKey.generate(X25519).public
    did = mediator_legacy_did(authentication=auth, agreement=agree, http_uri="https://t.example/didcomm")
    svc = '{"t":"dm","s":"https://t.example/didcomm","r":[],"a":["didcomm/v2"],"recipientKeys":[]}'
    assert did == f"did:peer:2.V{auth.multibase}.E{agree.multibase}.S{b64url_nopad(svc.encode())}"
    doc = resolve_did(did)
    assert doc.find(did + "#key-2", "keyAgreement").key == agree
    assert doc.find(did + "#key-1", "authentication").key == auth
    assert [(e.uri, e.accept, e.routing_keys) for e in doc.didcomm_endpoints()] == [
        ("https://t.example/didcomm", ("didcomm/v2",), ())
    ]


def test_the_older_service_encoding_with_a_string_endpoint_resolves_and_normalises():
    agree = PrivateKey.generate(X25519).public
    body = b64url_nopad(b'{"t":"dm","s":"https://old.example","r":["did:key:z6Mkx#z6Mkx"],"a":["didcomm/v2"]}')
    did = f"did:peer:2.E{agree.multibase}.S{body}"
    doc = resolve_did(did)
    assert doc.json["service"] == [
        {
            "type": "DIDCommMessaging",
            "serviceEndpoint": "https://old.example",
            "routingKeys": ["did:key:z6Mkx#z6Mkx"],
            "accept": ["didcomm/v2"],
            "id": "#service",
        }
    ]
    [endpoint] = doc.didcomm_endpoints()
    assert (endpoint.uri, endpoint.routing_keys, endpoint.accept) == (
        "https://old.example",
        ("did:key:z6Mkx#z6Mkx",),
        ("didcomm/v2",),
    )


def test_an_empty_service_array_segment_as_the_identus_sdk_emits_resolves_to_no_service():
    agree, auth = PrivateKey.generate(X25519).public, PrivateKey.generate(ED25519).public
    did = f"did:peer:2.E{agree.multibase}.V{auth.multibase}.SW10"
    doc = resolve_did(did)
    assert doc.json["service"] == [] and doc.didcomm_endpoints() == []
    assert doc.find(did + "#key-1", "keyAgreement").key == agree


def test_the_identus_recipient_service_naming_the_mediator_did_round_trips():
    med = "did:peer:2.Vz6Mkj3PUd1WjvaDhNZhhhXQdz5UnZXmS7ehtx8bsPpD47kKc"
    assert encode_service({"t": "dm", "s": {"uri": med, "r": [], "a": []}}) == b64url_nopad(
        ('{"t":"dm","s":{"uri":"' + med + '","r":[],"a":[]}}').encode()
    )


@pytest.mark.parametrize(
    "bad",
    [
        "did:peer:2",
        "did:peer:2.Xz6Mkj3PUd1WjvaDhNZhhhXQdz5UnZXmS7ehtx8bsPpD47kKc",
        "did:peer:2.Vz6Mkbad",
        "did:peer:2.S!!!",
        "did:peer:2.S" + b64url_nopad(b"[1]"),
        "did:peer:2." + "V" * 20_000,
    ],
)
def test_it_rejects_malformed_did_peer_2(bad):
    with pytest.raises(InvalidDid):
        resolve_did(bad)


def test_it_resolves_the_spec_did_peer_4_long_form():
    p4 = SPEC["peer4"]
    doc_json = peer4_document_json(p4["did"])
    assert doc_json["id"] == p4["did"] and doc_json["alsoKnownAs"] == [p4["short"]]
    for name in ("verificationMethod", "service", "authentication", "keyAgreement"):
        assert doc_json[name] == p4[name]
    doc = resolve_did(p4["did"])
    assert (
        doc.find(p4["short"] + "#6LSqPZfn", "keyAgreement").key.multibase
        == "z6LSqPZfn9krvgXma2icTMKf2uVcYhKXsudCmPoUzqGYW24U"
    )
    assert peer4_short_form(p4["did"]) == p4["short"]


def test_did_peer_4_create_and_resolve_round_trip():
    agree = PrivateKey.generate(X25519).public
    did = peer4_create(
        {
            "verificationMethod": [{"id": "#key-0", "type": "Multikey", "publicKeyMultibase": agree.multibase}],
            "keyAgreement": ["#key-0"],
        }
    )
    assert resolve_did(did).key_agreement[0].key == agree


def test_a_did_peer_4_whose_document_does_not_match_its_hash_is_rejected():
    p4 = SPEC["peer4"]["did"]
    other = peer4_create({"service": []}).split(":")[3]
    with pytest.raises(InvalidDid) as exc:
        resolve_did(p4.rsplit(":", 1)[0] + ":" + other)
    assert str(exc.value) == "did:peer:4 hash does not match its document"


def test_a_short_form_did_peer_4_needs_its_long_form():
    with pytest.raises(InvalidDid):
        resolve_did(SPEC["peer4"]["short"])


def test_other_did_methods_are_unsupported():
    with pytest.raises(UnsupportedDidMethod) as exc:
        resolve_did("did:web:example.com")
    assert (exc.value.code, exc.value.problem_code) == ("unsupported_did_method", "e.p.did.unresolvable")
