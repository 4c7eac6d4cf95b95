"""Ed25519, X25519 and AES-256-GCM as DCTRL-0002 uses them: failures are clean, never exceptions."""

from __future__ import annotations

import base64
import os

import pytest

from apps.wire.crypto import (
    CryptoFailure,
    Ed25519KeyPair,
    X25519KeyPair,
    aes_gcm_decrypt,
    aes_gcm_encrypt,
    ed25519_verify,
    encrypt_tag,
    sign_json_object,
    verify_json_object,
    x25519,
)
from apps.wire.encoding import b64decode

from .test_vectors import ED_SEED, SHARED_SECRET

KEY = bytes.fromhex(SHARED_SECRET)

# Points of small order on Curve25519 (RFC 7748 §7): X25519 with them is all zeros.
LOW_ORDER = [
    bytes(32),
    b"\x01" + bytes(31),
    bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    bytes.fromhex("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
]


@pytest.mark.parametrize("public", LOW_ORDER)
def test_x25519_refuses_low_order_points(public):
    with pytest.raises(CryptoFailure):
        x25519(os.urandom(32), public)


@pytest.mark.parametrize("private,public", [(b"x" * 31, b"y" * 32), (b"x" * 32, b"y" * 33), (b"", b"")])
def test_x25519_refuses_keys_that_are_not_32_bytes(private, public):
    with pytest.raises(CryptoFailure):
        x25519(private, public)


def test_random_x25519_pairs_agree():
    a, b = X25519KeyPair.generate(), X25519KeyPair.generate()
    assert x25519(a.private, b.public) == x25519(b.private, a.public)


def test_aes_gcm_uses_a_fresh_nonce_each_time_and_round_trips():
    blobs = {aes_gcm_encrypt(KEY, b"same plaintext") for _ in range(20)}
    assert len(blobs) == 20
    for blob in blobs:
        assert aes_gcm_decrypt(KEY, blob) == b"same plaintext"
        assert len(b64decode(blob)) == 12 + len(b"same plaintext") + 16


def test_aes_gcm_refuses_any_flipped_bit():
    raw = bytearray(base64.b64decode(aes_gcm_encrypt(KEY, b'{"hello":"world"}')))
    for i in range(len(raw)):
        tampered = bytearray(raw)
        tampered[i] ^= 0x01
        with pytest.raises(CryptoFailure):
            aes_gcm_decrypt(KEY, base64.b64encode(bytes(tampered)).decode())


@pytest.mark.parametrize(
    "key,blob",
    [
        (KEY, "not base64!"),
        (KEY, base64.b64encode(bytes(27)).decode()),  # shorter than nonce + tag
        (KEY, ""),
        (b"\x42" * 32, "AAECAwQFBgcICQoLRfzcBYlP72hMbRhm/UfgHDpoBJYNGUlycAbNgMv/ypaS"),  # wrong key
        (b"short key", "AAECAwQFBgcICQoLRfzcBYlP72hMbRhm/UfgHDpoBJYNGUlycAbNgMv/ypaS"),
    ],
    ids=["not-base64", "too-short", "empty", "wrong-key", "short-key"],
)
def test_aes_gcm_decrypt_refuses_malformed_or_foreign_blobs(key, blob):
    with pytest.raises(CryptoFailure):
        aes_gcm_decrypt(key, blob)


def test_the_url_safe_form_of_a_blob_also_decrypts():
    blob = "AAECAwQFBgcICQoLRfzcBYlP72hMbRhm/UfgHDpoBJYNGUlycAbNgMv/ypaS"
    assert aes_gcm_decrypt(KEY, blob.replace("/", "_").replace("+", "-").rstrip("=")) == b'{"hello":"world"}'


def test_signatures_are_deterministic_and_standard_padded_base64():
    kp = Ed25519KeyPair.from_seed(ED_SEED)
    sig = sign_json_object({"a": 1}, kp)
    assert sig == sign_json_object({"a": 1.0}, kp)  # 1.0 canonicalises to 1
    assert len(sig) == 88 and sig.endswith("==")


@pytest.mark.parametrize("signature", [None, 5, "", "A" * 101, base64.b64encode(bytes(63)).decode(), "%%%", ["x"]])
def test_verify_json_object_is_false_for_malformed_signatures(signature):
    kp = Ed25519KeyPair.from_seed(ED_SEED)
    assert verify_json_object({"a": 1}, signature, kp.public) is False


def test_verify_json_object_is_false_for_objects_that_cannot_be_canonicalised():
    kp = Ed25519KeyPair.from_seed(ED_SEED)
    assert verify_json_object({"a": float("nan")}, sign_json_object({"a": 1}, kp), kp.public) is False
    assert verify_json_object({"a": "\ud800"}, sign_json_object({"a": 1}, kp), kp.public) is False


def test_ed25519_verify_is_false_for_wrong_lengths_and_wrong_keys():
    kp = Ed25519KeyPair.from_seed(ED_SEED)
    sig = kp.sign(b"m")
    assert ed25519_verify(kp.public, b"m", sig)
    assert not ed25519_verify(kp.public[:31], b"m", sig)
    assert not ed25519_verify(kp.public, b"m", sig[:63])
    assert not ed25519_verify(Ed25519KeyPair.generate().public, b"m", sig)
    assert not ed25519_verify(bytes(32), b"m", sig)


def test_encrypted_tags_are_deterministic_per_key_and_hash_the_utf8_bytes():
    kp, other = Ed25519KeyPair.from_seed(ED_SEED), Ed25519KeyPair.generate()
    assert encrypt_tag("chat.é", kp) == encrypt_tag("chat.é", kp)
    assert encrypt_tag("chat.é", kp) != encrypt_tag("chat.é", other)
    assert ed25519_verify(kp.public, "chat.é".encode(), b64decode(encrypt_tag("chat.é", kp)))
