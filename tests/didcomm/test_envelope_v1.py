"""DIDComm v1 envelopes (RFC 0019): Askar's recorded envelopes open with our code, ours opened with Askar
(recorded by tests/interop/record_askar_v1.py), round trips, and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.didcomm.core import envelope_v1
from apps.didcomm.core.errors import (
    MalformedEnvelope,
    UndecryptableEnvelope,
    UnknownRecipientKey,
    UnsupportedAlgorithm,
)
from apps.didcomm.core.keys import ED25519, PrivateKey
from apps.wire.encoding import b58encode, b64decode, b64url_nopad

FIXTURE = json.loads((Path(__file__).parents[1] / "interop" / "fixtures" / "askar_v1_0.5.0.json").read_text())
KEYS = {n: PrivateKey.from_secret(ED25519, bytes.fromhex(s)) for n, s in FIXTURE["seeds"].items()}
VERKEYS = FIXTURE["verkeys"]
MESSAGE = FIXTURE["plaintext_bytes"].encode()


def holder(*names: str):
    table = {VERKEYS[n]: KEYS[n] for n in names}
    return table.get


def test_the_fixture_keys_are_the_verkeys_askar_derived():
    assert {n: b58encode(k.public.raw) for n, k in KEYS.items()} == VERKEYS


def test_askar_authcrypt_opens_with_the_sender_verkey():
    env = FIXTURE["askar"]["authcrypt_alice_to_bob"]
    assert json.loads(b64decode(env["protected"]))["alg"] == "Authcrypt"
    assert len(b64decode(env["iv"])) == 12  # Askar's C20P: the IETF cipher despite the `enc` name
    out = envelope_v1.unpack(env, private_key_for=holder("bob"))
    assert out == envelope_v1.Unpacked(MESSAGE, VERKEYS["bob"], VERKEYS["alice"])
    assert json.loads(out.message) == FIXTURE["plaintext"]


def test_askar_anoncrypt_opens_without_a_sender():
    out = envelope_v1.unpack(FIXTURE["askar"]["anoncrypt_to_bob"], private_key_for=holder("bob"))
    assert out == envelope_v1.Unpacked(MESSAGE, VERKEYS["bob"], None)


def test_a_multi_recipient_envelope_opens_for_the_second_recipient():
    env = FIXTURE["askar"]["authcrypt_alice_to_carol_and_bob"]
    assert envelope_v1.unpack(env, private_key_for=holder("bob")).recipient_verkey == VERKEYS["bob"]
    assert envelope_v1.unpack(env, private_key_for=holder("carol")).recipient_verkey == VERKEYS["carol"]


@pytest.mark.parametrize("name", sorted(FIXTURE["ours_opened_by_askar"]))
def test_our_envelopes_that_askar_opened_open_with_our_code(name):
    entry = FIXTURE["ours_opened_by_askar"][name]
    out = envelope_v1.unpack(entry["envelope"], private_key_for=holder("alice"))
    assert (out.message, out.recipient_verkey, out.sender_verkey) == (
        MESSAGE,
        entry["askar_recipient"],
        entry["askar_sender"],
    )


def test_pack_has_the_rfc_0019_shape():
    env = envelope_v1.pack(b"{}", to_verkeys=[VERKEYS["bob"]], sender=KEYS["alice"])
    assert sorted(env) == ["ciphertext", "iv", "protected", "tag"]
    protected = json.loads(b64decode(env["protected"]))
    assert {k: protected[k] for k in ("enc", "typ", "alg")} == {
        "enc": "xchacha20poly1305_ietf",
        "typ": "JWM/1.0",
        "alg": "Authcrypt",
    }
    [recipient] = protected["recipients"]
    assert sorted(recipient["header"]) == ["iv", "kid", "sender"]
    assert recipient["header"]["kid"] == VERKEYS["bob"]
    anon = json.loads(b64decode(envelope_v1.pack(b"{}", to_verkeys=[VERKEYS["bob"]])["protected"]))
    assert anon["alg"] == "Anoncrypt" and anon["recipients"][0]["header"] == {"kid": VERKEYS["bob"]}


def test_is_v1_tells_an_rfc_0019_envelope_from_a_didcomm_v2_jwe():
    assert envelope_v1.is_v1(FIXTURE["askar"]["anoncrypt_to_bob"])
    v2 = {"protected": b64url_nopad(b'{"alg":"ECDH-ES+A256KW","enc":"XC20P"}'), "ciphertext": "x", "recipients": []}
    assert not envelope_v1.is_v1(v2)
    assert not envelope_v1.is_v1({"protected": "%%%", "ciphertext": "x"})
    # Without top-level recipients the protected header decides ...
    assert not envelope_v1.is_v1({k: v for k, v in v2.items() if k != "recipients"})
    # ... and with them the envelope is a v2 JWE whatever its header says (RFC 0019 has none there).
    assert not envelope_v1.is_v1({**FIXTURE["askar"]["anoncrypt_to_bob"], "recipients": []})


def test_a_24_byte_iv_is_opened_as_xchacha20():
    from nacl import bindings

    env = envelope_v1.pack(MESSAGE, to_verkeys=[VERKEYS["bob"]])
    cek = bindings.crypto_box_seal_open(
        b64decode(json.loads(b64decode(env["protected"]))["recipients"][0]["encrypted_key"]),
        KEYS["bob"].to_x25519().public.raw,
        KEYS["bob"].to_x25519().secret,
    )
    iv = bytes(range(24))
    sealed = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(MESSAGE, env["protected"].encode(), iv, cek)
    env.update(iv=b64url_nopad(iv), ciphertext=b64url_nopad(sealed[:-16]), tag=b64url_nopad(sealed[-16:]))
    assert envelope_v1.unpack(env, private_key_for=holder("bob")).message == MESSAGE


def test_a_tampered_tag_is_undecryptable():
    env = dict(FIXTURE["askar"]["authcrypt_alice_to_bob"])
    tag = bytearray(b64decode(env["tag"]))
    tag[0] ^= 1
    env["tag"] = b64url_nopad(bytes(tag))
    with pytest.raises(UndecryptableEnvelope, match="content does not decrypt"):
        envelope_v1.unpack(env, private_key_for=holder("bob"))


def test_a_swapped_protected_header_is_undecryptable():
    env = dict(FIXTURE["askar"]["anoncrypt_to_bob"])
    header = json.loads(b64decode(env["protected"]))
    env["protected"] = b64url_nopad(json.dumps({**header, "typ": "JWM/1.0 "}).encode())
    with pytest.raises(UndecryptableEnvelope):
        envelope_v1.unpack(env, private_key_for=holder("bob"))


def test_an_envelope_for_someone_else_is_unknown_recipient():
    with pytest.raises(UnknownRecipientKey):
        envelope_v1.unpack(FIXTURE["askar"]["anoncrypt_to_bob"], private_key_for=holder("carol"))


def test_the_wrong_key_under_a_right_kid_does_not_unwrap():
    with pytest.raises(UndecryptableEnvelope, match="does not unwrap"):
        envelope_v1.unpack(FIXTURE["askar"]["anoncrypt_to_bob"], private_key_for=lambda kid: KEYS["carol"])


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"alg": "ECDH-ES"}, UnsupportedAlgorithm),
        ({"recipients": []}, MalformedEnvelope),
        ({"recipients": [{"encrypted_key": "AA"}]}, MalformedEnvelope),
        ({"recipients": [{"header": {"kid": 5}}]}, MalformedEnvelope),
    ],
)
def test_bad_protected_headers_are_refused(change, error):
    env = dict(FIXTURE["askar"]["anoncrypt_to_bob"])
    header = json.loads(b64decode(env["protected"]))
    env["protected"] = b64url_nopad(json.dumps({**header, **change}).encode())
    with pytest.raises(error):
        envelope_v1.unpack(env, private_key_for=holder("bob"))


def test_an_anoncrypt_recipient_with_a_sender_is_malformed():
    env = dict(FIXTURE["askar"]["anoncrypt_to_bob"])
    header = json.loads(b64decode(env["protected"]))
    header["recipients"][0]["header"]["sender"] = "AAAA"
    env["protected"] = b64url_nopad(json.dumps(header).encode())
    with pytest.raises(MalformedEnvelope, match="carry no sender"):
        envelope_v1.unpack(env, private_key_for=holder("bob"))


def test_a_bad_iv_length_is_malformed():
    env = {**FIXTURE["askar"]["anoncrypt_to_bob"], "iv": b64url_nopad(bytes(16))}
    with pytest.raises(MalformedEnvelope, match="iv must be 12 or 24 bytes"):
        envelope_v1.unpack(env, private_key_for=holder("bob"))
