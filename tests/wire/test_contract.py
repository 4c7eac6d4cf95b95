"""Communication contracts in reading R1 (docs/protocol-readings.md §4): build, accept, verify, tamper."""

from __future__ import annotations

import copy
import hashlib
import json
import time

import pytest

from apps.wire import contract as wc
from apps.wire.client import Identity
from apps.wire.crypto import X25519KeyPair, sign_json_object, x25519
from apps.wire.did import DidError, parse_decentrl
from apps.wire.encoding import b64decode, b64encode

MEDIATOR = "did:web:a.mediator.test"
NOW = int(time.time())


@pytest.fixture
def alice() -> Identity:
    return Identity.create("alice", MEDIATOR)


@pytest.fixture
def bob() -> Identity:
    return Identity.create("bob", MEDIATOR)


def _request(a: Identity, b: Identity, expires_at: int = NOW + 3600) -> wc.ContractRequest:
    return wc.build_request(
        requestor_did=a.did,
        recipient_did=b.did,
        recipient_prekey=b.prekey.public,
        signing=a.signing,
        expires_at=expires_at,
    )


@pytest.fixture
def signed(alice, bob) -> dict:
    req = _request(alice, bob)
    contract, _ = wc.accept_request(req.request, bob.signing)
    return contract


def test_request_terms_are_r1_without_the_recipient_key(alice, bob):
    req = _request(alice, bob)
    assert set(req.request) == {"communication_contract", "requestor_signature"}
    assert req.request["communication_contract"] == {
        "requestor_did": alice.did,
        "recipient_did": bob.did,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
        "expires_at": NOW + 3600,
    }
    assert len(b64decode(req.ephemeral_public_b64)) == 32
    assert wc.verify_request_signature(req.request, parse_decentrl(alice.did))
    assert not wc.verify_request_signature(req.request, parse_decentrl(bob.did))


def test_the_recipient_decrypts_the_request_with_its_pre_key_and_nobody_else_does(alice, bob):
    req = _request(alice, bob)
    assert wc.decrypt_request(req.encrypted, req.ephemeral_public_b64, bob.prekey.private) == req.request
    with pytest.raises(wc.ContractInvalid):
        wc.decrypt_request(req.encrypted, req.ephemeral_public_b64, alice.prekey.private)
    with pytest.raises(wc.ContractInvalid):
        wc.decrypt_request(req.encrypted, b64encode(X25519KeyPair.generate().public), bob.prekey.private)
    with pytest.raises(wc.ContractInvalid):
        wc.decrypt_request("bm90IGEgYmxvYg==", req.ephemeral_public_b64, bob.prekey.private)
    with pytest.raises(wc.ContractInvalid):
        wc.decrypt_request(req.encrypted, "c2hvcnQ=", bob.prekey.private)


def test_the_request_key_is_x25519_of_the_ephemeral_and_the_pre_key_without_kdf(alice, bob):
    req = _request(alice, bob)
    key = x25519(bob.prekey.private, req.ephemeral.public)
    assert key == x25519(req.ephemeral.private, bob.prekey.public)
    from apps.wire.crypto import aes_gcm_decrypt

    assert json.loads(aes_gcm_decrypt(key, req.encrypted)) == req.request


def test_accepting_adds_the_recipient_key_and_both_signatures_verify(alice, bob, signed):
    terms = signed["communication_contract"]
    assert set(signed) == {"communication_contract", "requestor_signature", "recipient_signature"}
    assert set(terms) == {
        "requestor_did",
        "recipient_did",
        "requestor_ephemeral_public_key",
        "recipient_ephemeral_public_key",
        "expires_at",
    }
    info = wc.verify_signed_contract(signed, parse_decentrl, now_s=NOW)
    assert info == wc.ContractInfo(
        requestor_did=alice.did, recipient_did=bob.did, expires_at=NOW + 3600, contract_hash=wc.contract_hash(terms)
    )
    assert info.other_party(alice.did) == bob.did and info.other_party(bob.did) == alice.did
    assert info.has_party(alice.did) and not info.has_party(MEDIATOR)


def test_requestor_signature_covers_the_terms_without_the_recipient_key(alice, bob, signed):
    terms = signed["communication_contract"]
    without = {k: v for k, v in terms.items() if k != "recipient_ephemeral_public_key"}
    assert signed["requestor_signature"] == sign_json_object(without, alice.signing)
    assert signed["recipient_signature"] == sign_json_object(terms, bob.signing)


def test_contract_hash_is_sha256_of_the_canonical_terms(signed):
    terms = signed["communication_contract"]
    # All members are ASCII strings and integers, so Python's sorted compact dump is canonical here.
    expected = hashlib.sha256(json.dumps(terms, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert wc.contract_hash(terms) == expected
    assert wc.contract_hash(dict(reversed(list(terms.items())))) == expected
    assert len(expected) == 64 and expected == expected.lower()


def test_both_sides_derive_the_same_root_secret(alice, bob):
    req = _request(alice, bob)
    contract, bob_eph = wc.accept_request(req.request, bob.signing)
    terms = contract["communication_contract"]
    a_key = wc.root_secret(req.ephemeral.private, terms["recipient_ephemeral_public_key"])
    b_key = wc.root_secret(bob_eph.private, terms["requestor_ephemeral_public_key"])
    assert a_key == b_key and len(a_key) == 32


def _other_did() -> str:
    return Identity.create("mallory", MEDIATOR).did


TAMPERS = {
    "requestor_did": lambda t: t.__setitem__("requestor_did", _other_did()),
    "recipient_did": lambda t: t.__setitem__("recipient_did", _other_did()),
    "requestor_ephemeral_public_key": lambda t: t.__setitem__(
        "requestor_ephemeral_public_key", b64encode(X25519KeyPair.generate().public)
    ),
    "recipient_ephemeral_public_key": lambda t: t.__setitem__(
        "recipient_ephemeral_public_key", b64encode(X25519KeyPair.generate().public)
    ),
    "expires_at": lambda t: t.__setitem__("expires_at", t["expires_at"] + 1),
    "extra member": lambda t: t.__setitem__("note", "added later"),
}


@pytest.mark.parametrize("field", sorted(TAMPERS))
def test_tampering_any_term_breaks_verification(signed, field):
    bad = copy.deepcopy(signed)
    TAMPERS[field](bad["communication_contract"])
    with pytest.raises(wc.ContractSignaturesInvalid):
        wc.verify_signed_contract(bad, parse_decentrl, now_s=NOW)


@pytest.mark.parametrize("which", ["requestor_signature", "recipient_signature"])
def test_swapping_or_corrupting_a_signature_breaks_verification(signed, which):
    other = "recipient_signature" if which == "requestor_signature" else "requestor_signature"
    for value in (signed[other], "A" * 88, "", None, 5, "!!"):
        bad = copy.deepcopy(signed)
        bad[which] = value
        with pytest.raises(wc.ContractSignaturesInvalid):
            wc.verify_signed_contract(bad, parse_decentrl, now_s=NOW)
    bad = copy.deepcopy(signed)
    del bad[which]
    with pytest.raises(wc.ContractSignaturesInvalid):
        wc.verify_signed_contract(bad, parse_decentrl, now_s=NOW)


def test_signature_in_url_safe_unpadded_form_still_verifies(signed):
    relaxed = copy.deepcopy(signed)
    for k in ("requestor_signature", "recipient_signature"):
        relaxed[k] = relaxed[k].replace("+", "-").replace("/", "_").rstrip("=")
    assert wc.verify_signed_contract(relaxed, parse_decentrl, now_s=NOW).contract_hash == wc.contract_hash(
        signed["communication_contract"]
    )


def test_unknown_members_signed_by_both_parties_are_carried_and_verify(alice, bob):
    req = _request(alice, bob)
    req.request["communication_contract"]["purpose"] = "chat"
    req.request["requestor_signature"] = sign_json_object(req.request["communication_contract"], alice.signing)
    contract, _ = wc.accept_request(req.request, bob.signing)
    assert contract["communication_contract"]["purpose"] == "chat"
    wc.verify_signed_contract(contract, parse_decentrl, now_s=NOW)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t.__setitem__("recipient_did", t["requestor_did"]),  # equal DIDs
        lambda t: t.__setitem__("requestor_ephemeral_public_key", b64encode(b"x" * 31)),
        lambda t: t.__setitem__("recipient_ephemeral_public_key", b64encode(b"x" * 33)),
        lambda t: t.__setitem__("recipient_ephemeral_public_key", "not base64!"),
        lambda t: t.__setitem__("requestor_ephemeral_public_key", 12),
        lambda t: t.pop("recipient_ephemeral_public_key"),
        lambda t: t.__setitem__("expires_at", NOW),  # not in the future
        lambda t: t.__setitem__("expires_at", NOW - 10),
        lambda t: t.__setitem__("expires_at", NOW + 0.5),
        lambda t: t.__setitem__("expires_at", True),
        lambda t: t.__setitem__("expires_at", str(NOW + 100)),
        lambda t: t.__setitem__("expires_at", 2**60),
        lambda t: t.pop("expires_at"),
        lambda t: t.__setitem__("requestor_did", ""),
        lambda t: t.__setitem__("recipient_did", None),
        lambda t: t.__setitem__("recipient_did", "did:decentrl:not:a:valid:did"),  # does not resolve
        lambda t: t.__setitem__("note", float("nan")),  # not canonicalisable
    ],
)
def test_malformed_contracts_are_invalid_not_signature_failures(signed, mutate):
    bad = copy.deepcopy(signed)
    mutate(bad["communication_contract"])
    with pytest.raises(wc.ContractInvalid):
        wc.verify_signed_contract(bad, parse_decentrl, now_s=NOW)


@pytest.mark.parametrize("value", [None, [], "x", {"communication_contract": "x"}, {}])
def test_a_signed_contract_that_is_not_an_object_is_invalid(value):
    with pytest.raises(wc.ContractInvalid):
        wc.verify_signed_contract(value, parse_decentrl, now_s=NOW)


def test_an_integral_float_expiry_counts_as_an_integer(alice, bob):
    req = _request(alice, bob, expires_at=NOW + 100)
    req.request["communication_contract"]["expires_at"] = float(NOW + 100)
    info = wc.check_terms(req.request["communication_contract"], with_recipient_key=False, now_s=NOW)
    assert info.expires_at == NOW + 100


def test_a_party_that_does_not_resolve_is_invalid(signed):
    def resolver(did: str):
        raise DidError("nope")

    with pytest.raises(wc.ContractInvalid):
        wc.verify_signed_contract(signed, resolver, now_s=NOW)
