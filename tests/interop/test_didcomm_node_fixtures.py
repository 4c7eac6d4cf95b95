"""didcomm-node 0.4.1's recorded envelopes (tests/interop/fixtures, made by tests/interop/record_didcomm_node.py) decrypt with our code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.didcomm.core import jwe
from apps.didcomm.core.errors import UndecryptableEnvelope
from apps.didcomm.core.message import parse_plaintext
from apps.didcomm.core.resolver import key_agreement_key
from tests.interop.didcomm_node import Party

DATA = json.loads((Path(__file__).parent / "fixtures" / "didcomm_node_0.4.1.json").read_text())
PARTIES = {name: Party.from_json(p) for name, p in DATA["parties"].items()}


def keys_of(*names: str) -> dict:
    return {k: v for n in names for k, v in PARTIES[n].secrets().items()}


@pytest.mark.parametrize(
    ("name", "enc"),
    [
        ("anoncrypt_Xc20pEcdhEsA256kw", "XC20P"),
        ("anoncrypt_A256gcmEcdhEsA256kw", "A256GCM"),
        ("anoncrypt_A256cbcHs512EcdhEsA256kw", "A256CBC-HS512"),
    ],
)
def test_recorded_didcomm_node_anoncrypt_decrypts(name, enc):
    out = jwe.decrypt(DATA["packed"][name], private_key_for=keys_of("mediator").get)
    assert (out.alg, out.enc, out.recipient_kid) == ("ECDH-ES+A256KW", enc, PARTIES["mediator"].did + "#key-2")
    assert json.loads(out.plaintext) == DATA["plaintexts"][name]


@pytest.mark.parametrize(
    ("name", "sender", "recipient"),
    [("authcrypt_x25519_to_mediator", "alice", "mediator"), ("authcrypt_p256", "alice_p256", "bob_p256")],
)
def test_recorded_didcomm_node_authcrypt_decrypts_with_the_sender_resolved_from_its_did_peer_2(name, sender, recipient):
    out = jwe.decrypt(DATA["packed"][name], private_key_for=keys_of(recipient).get, sender_key_for=key_agreement_key)
    assert (out.alg, out.sender_kid) == ("ECDH-1PU+A256KW", PARTIES[sender].agreement_kid)
    assert json.loads(out.plaintext) == DATA["plaintexts"][name]


def test_recorded_didcomm_node_forward_carries_the_inner_envelope_unchanged():
    out = jwe.decrypt(DATA["packed"]["forward_to_bob_via_mediator"], private_key_for=keys_of("mediator").get)
    forward = parse_plaintext(out.plaintext)
    assert (forward.type, forward.body) == ("https://didcomm.org/routing/2.0/forward", {"next": PARTIES["bob"].did})
    assert forward.from_ is None and forward.to == ()
    assert forward.attachments[0]["data"]["json"] == json.loads(DATA["packed"]["authcrypt_alice_to_bob"])
    assert "id" not in forward.attachments[0]  # didcomm-node's forwards name no attachment id


def test_a_recorded_envelope_with_one_flipped_ciphertext_byte_is_undecryptable():
    env = json.loads(DATA["packed"]["authcrypt_x25519_to_mediator"])
    ct = env["ciphertext"]
    env["ciphertext"] = ("B" if ct[5] != "B" else "C").join([ct[:5], ct[6:]])
    with pytest.raises(UndecryptableEnvelope):
        jwe.decrypt(env, private_key_for=keys_of("mediator").get, sender_key_for=key_agreement_key)
