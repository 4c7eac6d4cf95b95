"""Helpers that drive registration and contracts through a poster (tests/support/entry.py's `Poster`)."""

from __future__ import annotations

import time

from apps.wire import contract as wc
from apps.wire.client import Identity, agree_contract


def register(poster, who: Identity, tenant, *, lifetime_s: int = 86_400) -> dict:
    """Register `who` with `tenant`; returns the signed registration contract."""
    req = wc.build_request(
        requestor_did=who.did,
        recipient_did=tenant.did,
        recipient_prekey=bytes(tenant.prekey_public),
        signing=who.signing,
        expires_at=int(time.time()) + lifetime_s,
    )
    status, body = poster.command(
        who,
        {
            "type": "REQUEST_COMMUNICATION_CONTRACT",
            "encrypted_contract_request": req.encrypted,
            "requestor_ephemeral_public_key": req.ephemeral_public_b64,
        },
        recipient_did=tenant.did,
    )
    assert status == 200, body
    signed = body["payload"]["signed_communication_contract"]
    who.remember_contract(signed, req.ephemeral.private)
    return signed


def signed_contract(a: Identity, b: Identity, *, lifetime_s: int = 86_400) -> tuple[dict, bytes, bytes]:
    """A contract requested by `a` and accepted by `b`, built offline: (signed, a_eph_priv, b_eph_priv)."""
    return agree_contract(a, b, lifetime_s=lifetime_s)


def contract_both_ways(poster, a: Identity, b: Identity, tenant) -> dict:
    """Give `b` (on `tenant`) a contract with `a`, saved by b so that a may send TWO_WAY_PRIVATE to b."""
    signed, _, _ = signed_contract(a, b)
    status, body = poster.command(
        b, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}, recipient_did=tenant.did
    )
    assert status == 200, body
    return signed
