"""Record DIDComm v1 (RFC 0019) envelopes made by Aries Askar, the crypto library under ACA-Py and Credo.

Run in a separate venv (aries-askar is not a product dependency):

    python3.11 -m venv /tmp/askar-venv && /tmp/askar-venv/bin/pip install aries-askar==0.5.0 PyNaCl cryptography
    PYTHONPATH=. /tmp/askar-venv/bin/python -m tests.interop.record_askar_v1

`askar_pack`/`askar_unpack` follow ACA-Py 1.7's `acapy_agent/askar/didcomm/v1.py` step by step on
Askar's primitives. Writes tests/interop/fixtures/askar_v1_0.5.0.json: fixed test seeds (used nowhere
else), the plaintext, Askar's envelopes (replayed by tests/didcomm/test_envelope_v1.py), and
envelopes made by apps/didcomm/core/envelope_v1.py that Askar opened here at record time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aries_askar import Key, KeyAlg, crypto_box
from aries_askar.bindings import key_get_secret_bytes

from apps.didcomm.core import envelope_v1
from apps.didcomm.core.keys import ED25519, PrivateKey
from apps.wire.encoding import b58decode, b58encode, b64decode, b64url_nopad

OUT = Path(__file__).resolve().parent / "fixtures" / "askar_v1_0.5.0.json"
PLAINTEXT = {"@type": "https://didcomm.org/trust_ping/1.0/ping", "@id": "kat-1", "response_requested": True}


def seed(name: str) -> bytes:
    return hashlib.sha256(f"didcomm-v1-kat:{name}".encode()).digest()


def askar_pack(to_verkeys: list[str], from_key: Key | None, message: bytes) -> dict:
    cek = Key.generate(KeyAlg.C20P)
    cek_b = key_get_secret_bytes(cek._handle)
    sender_vk = b58encode(from_key.get_public_bytes()).encode("utf-8") if from_key else None
    sender_xk = from_key.convert_key(KeyAlg.X25519) if from_key else None
    recipients = []
    for target_vk in to_verkeys:
        target_xk = Key.from_public_bytes(KeyAlg.ED25519, b58decode(target_vk)).convert_key(KeyAlg.X25519)
        if sender_vk:
            enc_sender = crypto_box.crypto_box_seal(target_xk, sender_vk)
            nonce = crypto_box.random_nonce()
            enc_cek = crypto_box.crypto_box(target_xk, sender_xk, cek_b, nonce)
            header = {"kid": target_vk, "sender": b64url_nopad(bytes(enc_sender)), "iv": b64url_nopad(bytes(nonce))}
            recipients.append({"encrypted_key": b64url_nopad(bytes(enc_cek)), "header": header})
        else:
            enc_cek = crypto_box.crypto_box_seal(target_xk, cek_b)
            recipients.append({"encrypted_key": b64url_nopad(bytes(enc_cek)), "header": {"kid": target_vk}})
    protected = {
        "enc": "xchacha20poly1305_ietf",
        "typ": "JWM/1.0",
        "alg": "Authcrypt" if from_key else "Anoncrypt",
        "recipients": recipients,
    }
    protected_b64 = b64url_nopad(json.dumps(protected).encode())
    enc = cek.aead_encrypt(message, aad=protected_b64.encode())
    ciphertext, tag, nonce = enc.parts
    return {
        "protected": protected_b64,
        "iv": b64url_nopad(bytes(nonce)),
        "ciphertext": b64url_nopad(bytes(ciphertext)),
        "tag": b64url_nopad(bytes(tag)),
    }


def askar_unpack(envelope: dict, keys: dict[str, Key]) -> tuple[bytes, str, str | None]:
    protected = json.loads(b64decode(envelope["protected"]))
    for recipient in protected["recipients"]:
        key = keys.get(recipient["header"]["kid"])
        if key is None:
            continue
        recip_x = key.convert_key(KeyAlg.X25519)
        header = recipient["header"]
        if "sender" in header:
            sender_vk = bytes(crypto_box.crypto_box_seal_open(recip_x, b64decode(header["sender"]))).decode()
            sender_x = Key.from_public_bytes(KeyAlg.ED25519, b58decode(sender_vk)).convert_key(KeyAlg.X25519)
            cek = crypto_box.crypto_box_open(
                recip_x, sender_x, b64decode(recipient["encrypted_key"]), b64decode(header["iv"])
            )
        else:
            sender_vk = None
            cek = crypto_box.crypto_box_seal_open(recip_x, b64decode(recipient["encrypted_key"]))
        message = Key.from_secret_bytes(KeyAlg.C20P, bytes(cek)).aead_decrypt(
            b64decode(envelope["ciphertext"]),
            nonce=b64decode(envelope["iv"]),
            tag=b64decode(envelope["tag"]),
            aad=envelope["protected"].encode(),
        )
        return bytes(message), header["kid"], sender_vk
    raise ValueError("no key")


def main() -> None:
    names = ["alice", "bob", "carol"]
    askar_keys = {n: Key.from_secret_bytes(KeyAlg.ED25519, seed(n)) for n in names}
    verkeys = {n: b58encode(askar_keys[n].get_public_bytes()) for n in names}
    ours = {n: PrivateKey.from_secret(ED25519, seed(n)) for n in names}
    assert all(b58encode(ours[n].public.raw) == verkeys[n] for n in names)
    message = json.dumps(PLAINTEXT).encode()
    askar = {
        "authcrypt_alice_to_bob": askar_pack([verkeys["bob"]], askar_keys["alice"], message),
        "anoncrypt_to_bob": askar_pack([verkeys["bob"]], None, message),
        "authcrypt_alice_to_carol_and_bob": askar_pack(
            [verkeys["carol"], verkeys["bob"]], askar_keys["alice"], message
        ),
    }
    by_verkey = {verkeys[n]: askar_keys[n] for n in names}
    opened_by_askar = {}
    for name, env in {
        "authcrypt_bob_to_alice": envelope_v1.pack(message, to_verkeys=[verkeys["alice"]], sender=ours["bob"]),
        "anoncrypt_to_alice": envelope_v1.pack(message, to_verkeys=[verkeys["alice"]]),
        "authcrypt_bob_to_carol_and_alice": envelope_v1.pack(
            message, to_verkeys=[verkeys["carol"], verkeys["alice"]], sender=ours["bob"]
        ),
    }.items():
        plain, recip, sender = askar_unpack(env, {verkeys["alice"]: by_verkey[verkeys["alice"]]})
        assert plain == message and recip == verkeys["alice"]
        assert sender == (verkeys["bob"] if "authcrypt" in name else None)
        opened_by_askar[name] = {"envelope": env, "askar_recipient": recip, "askar_sender": sender}
    OUT.write_text(
        json.dumps(
            {
                "source": "aries-askar 0.5.0 (PyPI), ACA-Py 1.7 acapy_agent/askar/didcomm/v1.py steps",
                "seeds": {n: seed(n).hex() for n in names},
                "verkeys": verkeys,
                "plaintext": PLAINTEXT,
                "plaintext_bytes": message.decode(),
                "askar": askar,
                "ours_opened_by_askar": opened_by_askar,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
