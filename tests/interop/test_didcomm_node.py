"""didcomm-node 0.4.1 (npm; the Rust `didcomm` crate as WASM) packs and unpacks against our JWE code, for real.

Each test runs `node tests/interop/node/didcomm_peer.js` as a subprocess. Install it with
scripts/ensure_extra_didcomm_node.sh (run by scripts/ensure_services.sh).
"""

from __future__ import annotations

import json

import pytest

from apps.didcomm.core import jwe
from apps.didcomm.core.did_peer import peer2_create
from apps.didcomm.core.keys import ED25519, P256, X25519, PrivateKey
from apps.didcomm.core.message import parse_plaintext
from apps.didcomm.core.resolver import key_agreement_key
from tests.interop import didcomm_node
from tests.interop.didcomm_node import Party, mediator, message

NODE_ANON_ENCS = {
    "A256cbcHs512EcdhEsA256kw": "A256CBC-HS512",
    "A256gcmEcdhEsA256kw": "A256GCM",
    "Xc20pEcdhEsA256kw": "XC20P",
}


@pytest.fixture(scope="module", autouse=True)
def _installed():
    assert didcomm_node.installed_version() == didcomm_node.VERSION, "run scripts/ensure_extra_didcomm_node.sh"


def ok(result: dict) -> dict:
    assert result["ok"], result.get("error")
    return result


def test_we_decrypt_didcomm_node_anoncrypt_to_our_mediator_key_with_every_enc():
    med, alice = mediator(), Party.create()
    jobs = [
        {"op": "pack", "message": message(None, med), "to": med.did, "from": None, "options": {"enc_alg_anon": alg}}
        for alg in NODE_ANON_ENCS
    ]
    results = didcomm_node.run(jobs, parties=[med, alice], secrets_of=[alice])
    for alg, result in zip(NODE_ANON_ENCS, results, strict=True):
        out = jwe.decrypt(ok(result)["packed"], private_key_for=med.secrets().get)
        assert (out.alg, out.enc, out.recipient_kid, out.sender_kid) == (
            "ECDH-ES+A256KW",
            NODE_ANON_ENCS[alg],
            med.did + "#key-2",
            None,
        )
        assert json.loads(out.plaintext) == message(None, med)


@pytest.mark.parametrize("crv", [X25519, P256])
def test_we_decrypt_didcomm_node_authcrypt_and_resolve_the_sender_from_skid(crv):
    bob, alice = Party.create(crv), Party.create(crv)
    [result] = didcomm_node.run(
        [{"op": "pack", "message": message(alice, bob), "to": bob.did, "from": alice.did}],
        parties=[alice, bob],
        secrets_of=[alice],
    )
    out = jwe.decrypt(ok(result)["packed"], private_key_for=bob.secrets().get, sender_key_for=key_agreement_key)
    assert (out.alg, out.enc, out.sender_kid, out.recipient_kid) == (
        "ECDH-1PU+A256KW",
        "A256CBC-HS512",
        alice.did + "#key-1",
        bob.did + "#key-1",
    )
    assert parse_plaintext(out.plaintext).from_ == alice.did


@pytest.mark.parametrize("alg", ["Xc20pEcdhEsA256kw", "A256cbcHs512EcdhEsA256kw"])
def test_a_didcomm_node_forward_opens_to_routing_2_forward_with_the_inner_envelope_intact(alg):
    med, alice, bob = mediator(), Party.create(), Party.create()
    [packed] = didcomm_node.run(
        [{"op": "pack", "message": message(alice, bob), "to": bob.did, "from": alice.did}],
        parties=[med, alice, bob],
        secrets_of=[alice],
    )
    [fwd] = didcomm_node.run(
        [
            {
                "op": "forward",
                "packed": ok(packed)["packed"],
                "to": bob.did,
                "routing_keys": [med.did + "#key-2"],
                "enc_alg_anon": alg,
            }
        ],
        parties=[med, alice, bob],
        secrets_of=[],
    )
    outer = jwe.decrypt(ok(fwd)["packed"], private_key_for=med.secrets().get)
    assert (outer.alg, outer.enc) == ("ECDH-ES+A256KW", NODE_ANON_ENCS[alg])
    forward = parse_plaintext(outer.plaintext)
    assert forward.type == "https://didcomm.org/routing/2.0/forward"
    assert forward.body == {"next": bob.did}
    inner = forward.attachments[0]["data"]["json"]
    assert inner == json.loads(packed["packed"])
    # the recipient (didcomm-node again) opens what the mediator would store, byte for byte
    [opened] = didcomm_node.run(
        [{"op": "unpack", "packed": json.dumps(inner)}], parties=[med, alice, bob], secrets_of=[bob]
    )
    assert ok(opened)["message"]["body"] == {"response_requested": True}
    assert opened["metadata"]["encrypted_from_kid"] == alice.did + "#key-1"


def test_didcomm_node_unpacks_our_authcrypt_and_names_the_mediator_as_sender():
    med, alice = mediator(), Party.create()
    reply = message(med, alice, {"routing_did": med.did})
    packed = jwe.encrypt(
        json.dumps(reply).encode(),
        to=[(alice.agreement_kid, alice.agreement.public)],
        sender=(med.agreement_kid, med.agreement),
    )
    [result] = didcomm_node.run(
        [{"op": "unpack", "packed": json.dumps(packed)}], parties=[med, alice], secrets_of=[alice]
    )
    assert ok(result)["message"]["body"] == {"routing_did": med.did}
    meta = result["metadata"]
    assert (meta["encrypted"], meta["authenticated"], meta["anonymous_sender"]) == (True, True, False)
    assert (meta["encrypted_from_kid"], meta["encrypted_to_kids"]) == (med.did + "#key-2", [alice.did + "#key-1"])
    assert meta["enc_alg_auth"] == "A256cbcHs512Ecdh1puA256kw"


@pytest.mark.parametrize("enc", ["A256CBC-HS512", "A256GCM", "XC20P"])
def test_didcomm_node_unpacks_our_anoncrypt_with_every_enc(enc):
    alice = Party.create()
    packed = jwe.encrypt(
        json.dumps(message(None, alice)).encode(), to=[(alice.agreement_kid, alice.agreement.public)], enc=enc
    )
    [result] = didcomm_node.run([{"op": "unpack", "packed": json.dumps(packed)}], parties=[alice], secrets_of=[alice])
    assert ok(result)["message"]["id"] == message(None, alice)["id"]
    meta = result["metadata"]
    assert (meta["authenticated"], meta["anonymous_sender"]) == (False, True)
    assert meta["enc_alg_anon"] == {v: k for k, v in NODE_ANON_ENCS.items()}[enc]


def test_didcomm_node_unpacks_our_envelope_to_several_recipient_keys_of_one_did_as_each():
    # DIDComm v2: one envelope for all key-agreement keys of the recipient DID (here an X25519 pair).
    first, second, auth = PrivateKey.generate(X25519), PrivateKey.generate(X25519), PrivateKey.generate(ED25519)
    did = peer2_create([("E", first.public), ("E", second.public), ("V", auth.public)])
    holder_a, holder_b = Party(did, first, auth), Party(did, second, auth)
    med = mediator()
    packed = jwe.encrypt(
        b'{"id":"m1","type":"https://didcomm.org/trust-ping/2.0/ping","body":{}}',
        to=[(did + "#key-1", first.public), (did + "#key-2", second.public)],
        sender=(med.agreement_kid, med.agreement),
    )
    for holder in (holder_a, holder_b):
        [result] = didcomm_node.run(
            [{"op": "unpack", "packed": json.dumps(packed)}], parties=[med, holder], secrets_of=[holder]
        )
        assert ok(result)["message"]["id"] == "m1"
        assert result["metadata"]["encrypted_to_kids"] == [did + "#key-1", did + "#key-2"]
