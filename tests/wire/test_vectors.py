"""Known-answer tests: every derived vector of dctrl-0001.md §8 and dctrl-0002.md §11."""

from __future__ import annotations

import base64
import hashlib

from apps.wire.canonical import canonical_bytes
from apps.wire.crypto import (
    Ed25519KeyPair,
    X25519KeyPair,
    aes_gcm_decrypt,
    aes_gcm_encrypt,
    encrypt_tag,
    sign_json_object,
    verify_json_object,
    x25519,
)
from apps.wire.did import decentrl_did, parse_decentrl
from apps.wire.encoding import ED25519_PUB, X25519_PUB, b58encode, b64url_nopad, multikey_encode
from apps.wire.envelope import parse_command

# RFC 8032 §7.1 test 1 and RFC 7748 §6.1 keys
ED_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
ED_PUB = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
X_ALICE_PRIV = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
X_ALICE_PUB = bytes.fromhex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
X_BOB_PRIV = bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
X_BOB_PUB = bytes.fromhex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
MEDIATOR = "did:web:mediator.decentrl.io"

SIGNING_SEGMENT = "z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw"
PREKEY_SEGMENT = "z6LSkdrX4EvewpktHBjvNxRDogPdC5iVF8LT3LPKefGAgi89"
ALICE_DID = (
    "did:decentrl:YWxpY2U:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw:"
    "z6LSkdrX4EvewpktHBjvNxRDogPdC5iVF8LT3LPKefGAgi89:ZGlkOndlYjptZWRpYXRvci5kZWNlbnRybC5pbw"
)
NONCE = "550e8400-e29b-41d4-a716-446655440000"
TS = 1699123456000

COMMAND_CANONICAL = (
    '{"header":{"channel":"DIRECT_AUTHENTICATED","nonce":"550e8400-e29b-41d4-a716-446655440000",'
    '"recipient_did":"did:web:mediator.decentrl.io","sender_did":"' + ALICE_DID + '",'
    '"sender_signing_key_id":"' + ALICE_DID + '#signing","timestamp":1699123456000},'
    '"payload":{"pagination":{"page":0,"page_size":10},"type":"QUERY_PENDING_EVENTS"}}'
)
COMMAND_SHA256 = "aca9b0aa621970943319142251f00c7620139a71dbf8d9bf30b31061bd2abac6"
COMMAND_SIG = "iQ8K1mE121WzMLH9OOKcDlg8huxDsCDPjCFMKV7piUYuIahTbB+ehBeWL4oakyq3f1aIvoaFSWB9zDEkGH6jBg=="
COMMAND_SIG_URL = "iQ8K1mE121WzMLH9OOKcDlg8huxDsCDPjCFMKV7piUYuIahTbB-ehBeWL4oakyq3f1aIvoaFSWB9zDEkGH6jBg"
AUTH_SIG = "n5JVBMy5Aj0+5wkGoi0EaXF15Duj7v6bFNdanlxk8sqZA9PGq6GFbGtAW/6/njHPQjjOmlEhFrmM07imYKMPCA=="
TAG_CHAT_ABC = "urAYoClLz4qgsq9JbDZ7K2s8rP5Waq054iA7cHO7XP+LGJLQqrooqI5t4rC69sSEGBgJMC170KSeOlFPiKdyBg=="
TAG_CHAT = "3sQIqoZubuh+Phh0Bg91WMZRuZ7++eIJPpLRcrATAYhDNIaVGTZiOnD0Luu9VKaTc+21T5G+2UcnFP71ZwyEDg=="
SHARED_SECRET = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
GCM_BLOB = "AAECAwQFBgcICQoLRfzcBYlP72hMbRhm/UfgHDpoBJYNGUlycAbNgMv/ypaS"


def _signable() -> dict:
    # Built in a scrambled member order on purpose: canonicalisation must sort it.
    return {
        "payload": {"type": "QUERY_PENDING_EVENTS", "pagination": {"page_size": 10, "page": 0}},
        "header": {
            "timestamp": TS,
            "sender_signing_key_id": ALICE_DID + "#signing",
            "sender_did": ALICE_DID,
            "recipient_did": MEDIATOR,
            "nonce": NONCE,
            "channel": "DIRECT_AUTHENTICATED",
        },
    }


def test_rfc_keys_derive_the_published_public_halves():
    assert Ed25519KeyPair.from_seed(ED_SEED).public == ED_PUB
    assert X25519KeyPair.from_private(X_ALICE_PRIV).public == X_ALICE_PUB
    assert X25519KeyPair.from_private(X_BOB_PRIV).public == X_BOB_PUB


def test_did_segments_match_the_vector():
    assert multikey_encode(ED25519_PUB, ED_PUB) == SIGNING_SEGMENT
    assert multikey_encode(X25519_PUB, X_ALICE_PUB) == PREKEY_SEGMENT
    assert b64url_nopad(b"alice") == "YWxpY2U"
    assert b64url_nopad(MEDIATOR.encode()) == "ZGlkOndlYjptZWRpYXRvci5kZWNlbnRybC5pbw"


def test_full_did_matches_the_vector_and_resolves_back():
    assert decentrl_did("alice", ED_PUB, X_ALICE_PUB, MEDIATOR) == ALICE_DID
    r = parse_decentrl(ALICE_DID)
    assert (r.alias, r.signing_key, r.pre_key, r.mediator_did) == ("alice", ED_PUB, X_ALICE_PUB, MEDIATOR)
    assert r.signing_key_for(ALICE_DID + "#signing") == ED_PUB
    assert r.signing_key_for("#signing") == ED_PUB
    assert r.signing_key_for(ALICE_DID + "#prekey") is None


def test_bob_pre_key_segment_matches_the_vector():
    assert multikey_encode(X25519_PUB, X_BOB_PUB) == "z6LSrfCAhzvNQfJmHrw9Ho2Z2J8K2z2XmChTsD5W5W3MNZyQ"


def test_without_the_multicodec_the_key_does_not_start_z6mk():
    plain = "z" + b58encode(ED_PUB)
    assert plain == "zFVen3X669xLzsi6N2V91DoiyzHzg1uAgqiT8jZ9nS96Z"
    assert not plain.startswith("z6Mk")


def test_command_canonical_bytes_and_sha256():
    raw = canonical_bytes(_signable())
    assert raw == COMMAND_CANONICAL.encode("utf-8")
    assert hashlib.sha256(raw).hexdigest() == COMMAND_SHA256


def test_command_signature_matches_the_vector():
    assert sign_json_object(_signable(), Ed25519KeyPair.from_seed(ED_SEED)) == COMMAND_SIG


def test_command_signature_verifies_in_standard_and_url_safe_unpadded_form():
    assert verify_json_object(_signable(), COMMAND_SIG, ED_PUB)
    assert verify_json_object(_signable(), COMMAND_SIG_URL, ED_PUB)
    assert verify_json_object(_signable(), COMMAND_SIG.rstrip("="), ED_PUB)
    assert verify_json_object(_signable(), COMMAND_SIG_URL + "==", ED_PUB)


def test_the_vector_envelope_parses_and_verifies_over_what_was_received():
    body = '{"signature":"' + COMMAND_SIG_URL + '",' + COMMAND_CANONICAL[1:]
    cmd = parse_command(body.encode("utf-8"))
    assert cmd.type == "QUERY_PENDING_EVENTS"
    assert cmd.header.sender_did == ALICE_DID
    assert cmd.header.timestamp == TS
    assert canonical_bytes(cmd.signable) == COMMAND_CANONICAL.encode("utf-8")
    assert verify_json_object(cmd.signable, cmd.signature, parse_decentrl(cmd.header.sender_did).signing_key)


def test_a_changed_byte_breaks_the_command_signature():
    tampered = _signable()
    tampered["payload"]["pagination"]["page"] = 1
    assert not verify_json_object(tampered, COMMAND_SIG, ED_PUB)
    other = Ed25519KeyPair.from_seed(bytes(32)).public
    assert not verify_json_object(_signable(), COMMAND_SIG, other)


def test_websocket_authenticate_signature_matches_the_vector():
    signable = {"did": ALICE_DID, "signing_key_id": ALICE_DID + "#signing", "timestamp": TS, "nonce": NONCE}
    assert sign_json_object(signable, Ed25519KeyPair.from_seed(ED_SEED)) == AUTH_SIG
    assert verify_json_object(signable, AUTH_SIG, ED_PUB)


def test_encrypted_tags_match_the_vectors():
    kp = Ed25519KeyPair.from_seed(ED_SEED)
    assert encrypt_tag("chat.abc", kp) == TAG_CHAT_ABC
    assert encrypt_tag("chat", kp) == TAG_CHAT


def test_x25519_shared_secret_matches_rfc7748_from_both_sides():
    assert x25519(X_ALICE_PRIV, X_BOB_PUB).hex() == SHARED_SECRET
    assert x25519(X_BOB_PRIV, X_ALICE_PUB).hex() == SHARED_SECRET


def test_aes_gcm_blob_with_fixed_nonce_matches_the_vector():
    key = bytes.fromhex(SHARED_SECRET)
    blob = aes_gcm_encrypt(key, b'{"hello":"world"}', nonce=bytes(range(12)))
    assert blob == GCM_BLOB
    assert aes_gcm_decrypt(key, GCM_BLOB) == b'{"hello":"world"}'
    assert len(base64.b64decode(GCM_BLOB)) == 45
