"""Keys, multicodec/multibase, JWK, Ed25519 -> X25519, did:key and DIDComm v1 verkeys."""

from __future__ import annotations

import pytest

from apps.didcomm.core.did_key import (
    did_key_from_key,
    did_key_to_verkey,
    key_from_did_key,
    normalise_verkey,
    resolve_did_key,
    verkey_to_did_key,
)
from apps.didcomm.core.errors import InvalidDid, InvalidKey
from apps.didcomm.core.keys import ED25519, P256, X25519, PrivateKey, PublicKey, varint_decode, varint_encode
from apps.wire.encoding import b58encode

# did:key spec (w3c-ccg/did-method-key) examples: an Ed25519 key and its X25519 key-agreement form, and a P-256 key.
SPEC_ED = "did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH"
SPEC_ED_X25519 = "z6LSbysY2xFMRpGMhb7tFTLMpeuPRaqaWM1yECx2AtzE3KCc"
SPEC_P256 = "did:key:zDnaerDaTF5BXEavCrfRZEk316dpbLsfPDZ3WJ5hRTPFU2169"


def test_varints_round_trip_the_multicodec_codes():
    assert varint_encode(0xED) == b"\xed\x01"
    assert varint_encode(0x1200) == b"\x80\x24"
    assert varint_decode(b"\x80\x24rest") == (0x1200, 2)


def test_the_spec_ed25519_did_key_resolves_with_its_x25519_key_agreement_form():
    doc = resolve_did_key(SPEC_ED)
    assert [vm.key.multibase for vm in doc.authentication] == ["z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH"]
    assert [vm.key.multibase for vm in doc.key_agreement] == [SPEC_ED_X25519]
    assert [vm.id for vm in doc.key_agreement] == [f"{SPEC_ED}#{SPEC_ED_X25519}"]


def test_a_p256_did_key_decodes_to_a_compressed_point_and_back():
    key = key_from_did_key(SPEC_P256)
    assert (key.crv, len(key.raw), key.raw[0] in (2, 3)) == (P256, 33, True)
    assert did_key_from_key(key) == SPEC_P256
    assert PublicKey.from_jwk(key.to_jwk()) == key
    assert resolve_did_key(SPEC_P256).key_agreement[0].key == key


def test_x25519_did_keys_start_z6LS_and_ed25519_z6Mk():
    x, e = PrivateKey.generate(X25519).public, PrivateKey.generate(ED25519).public
    assert did_key_from_key(x).startswith("did:key:z6LS") and did_key_from_key(e).startswith("did:key:z6Mk")
    assert key_from_did_key(did_key_from_key(x)) == x


def test_ed25519_private_and_public_conversions_to_x25519_agree():
    ed = PrivateKey.generate(ED25519)
    assert ed.to_x25519().public == ed.public.to_x25519()
    peer = PrivateKey.generate(X25519)
    assert ed.to_x25519().exchange(peer.public) == peer.exchange(ed.public.to_x25519())


def test_verkeys_and_did_keys_normalise_to_one_form():
    ed = PrivateKey.generate(ED25519).public
    verkey, did = b58encode(ed.raw), did_key_from_key(ed)
    assert verkey_to_did_key(verkey) == did
    assert did_key_to_verkey(did) == verkey
    assert {normalise_verkey(verkey), normalise_verkey(did), normalise_verkey(f"{did}#{did[8:]}")} == {verkey}


def test_private_jwks_round_trip_and_their_repr_hides_the_secret():
    for crv in (ED25519, X25519, P256):
        key = PrivateKey.generate(crv)
        assert PrivateKey.from_jwk(key.to_jwk()) == key
        assert key.to_jwk()["d"] not in repr(key)


@pytest.mark.parametrize(
    "bad",
    [
        "did:web:example.com",
        "did:key:6Mkfoo",
        "did:key:z111",
        f"{SPEC_ED}#z6MkOther",
        "did:key:z" + b58encode(b"\x01\x02" + bytes(32)),
    ],
)
def test_it_rejects_what_is_not_a_supported_did_key(bad):
    with pytest.raises(InvalidDid) as exc:
        key_from_did_key(bad)
    assert (exc.value.code, exc.value.problem_code) == ("invalid_did", "e.p.did.malformed")


@pytest.mark.parametrize(
    "jwk",
    [
        {"kty": "OKP", "crv": "X25519", "x": "AAAA"},
        {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"},
        {"kty": "RSA", "n": "AA", "e": "AQAB"},
        "not an object",
    ],
)
def test_it_rejects_bad_jwks(jwk):
    with pytest.raises(InvalidKey) as exc:
        PublicKey.from_jwk(jwk)
    assert exc.value.code == "invalid_key"


def test_a_p256_jwk_whose_point_is_off_the_curve_is_rejected():
    good = PrivateKey.generate(P256).public.to_jwk()
    with pytest.raises(InvalidKey):
        PublicKey.from_jwk({**good, "y": good["x"]})


def test_a_verkey_that_is_not_32_bytes_of_base58_is_rejected():
    with pytest.raises(InvalidKey):
        verkey_to_did_key("0OIl")
    with pytest.raises(InvalidKey):
        verkey_to_did_key(b58encode(bytes(31)))


def test_x25519_agreement_matches_rfc7748_and_refuses_low_order_points():
    # RFC 7748 §6.1: Alice's private key, Bob's public key, their shared secret.
    alice = PrivateKey.from_secret(
        X25519, bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    )
    assert alice.public.raw.hex() == "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    bob = PublicKey(X25519, bytes.fromhex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"))
    assert alice.exchange(bob).hex() == "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    for low_order in (bytes(32), (1).to_bytes(32, "little")):
        with pytest.raises(InvalidKey, match="X25519 key agreement failed"):
            alice.exchange(PublicKey(X25519, low_order))
