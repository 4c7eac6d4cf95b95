"""DID resolution for the server: did:decentrl locally, did:web only for tenants hosted here
(docs/protocol-readings.md §1; resolving foreign did:web is off)."""

from __future__ import annotations

import enum
import functools
from dataclasses import replace

from apps.wire import contract as wc
from apps.wire.crypto import verify_json_object
from apps.wire.did import DidError, ResolvedDid, parse_decentrl

from .models import Tenant

# did:decentrl parses are pure functions of the string (cached: every command resolves its sender and
# recipient, each a base58 and base64 decoding); failures are not cached (lru_cache keeps no raises).
_parse_decentrl_cached = functools.lru_cache(maxsize=8192)(parse_decentrl)


def resolve_did(did: str) -> ResolvedDid:
    """Resolve `did` or raise DidError ("not found")."""
    if not isinstance(did, str):
        return parse_decentrl(did)  # raises DidError
    if did.startswith("did:web:"):
        # Never cached: it depends on the tenants table.
        tenant = Tenant.objects.filter(did=did.split("#", 1)[0]).first()
        if tenant is None:
            raise DidError("did:web not hosted here")
        return tenant.resolved()
    return _parse_decentrl_cached(did)


class Verdict(enum.Enum):
    """What checking a signed object against its signer's DID found (DCTRL-0004 §6.2 steps 1-3, §10.2)."""

    VERIFIED = "verified"
    DID_NOT_FOUND = "did not found"
    KEY_NOT_FOUND = "signing key not found"
    BAD_SIGNATURE = "bad signature"


def verify_signer(*, did: str, key_id: str, signable: object, signature: object) -> Verdict:
    """Resolve `did`, find the signing key `key_id` names, verify `signature` over `signable` as received.

    The one signature check of every command (dispatch) and of the WebSocket AUTHENTICATE; each
    maps the verdict to its own error codes. May raise DatabaseError (a did:web lookup).
    """
    try:
        signer = resolve_did(did)
    except DidError:
        return Verdict.DID_NOT_FOUND
    key = signer.signing_key_for(key_id)
    if key is None:
        return Verdict.KEY_NOT_FOUND
    if not verify_json_object(signable, signature, key):
        return Verdict.BAD_SIGNATURE
    return Verdict.VERIFIED


def _retired_key_resolvers(signed: object) -> list[wc.Resolver]:
    """One resolver per retired signing key of each hosted-tenant party, current keys for the rest."""
    terms = signed.get("communication_contract") if isinstance(signed, dict) else None
    if not isinstance(terms, dict):
        return []
    resolvers: list[wc.Resolver] = []
    for party in (terms.get("requestor_did"), terms.get("recipient_did")):
        if not isinstance(party, str) or not party.startswith("did:web:"):
            continue
        tenant = Tenant.objects.filter(did=party).first()
        if tenant is None:
            continue
        for key in tenant.previous_signing_keys():
            old = replace(tenant.resolved(), signing_key=key)
            resolvers.append(_resolver_with(party, old))
    return resolvers


def _resolver_with(party: str, resolved: ResolvedDid) -> wc.Resolver:
    """`resolve_did`, except that `party` resolves to `resolved` (one of its retired keys)."""
    return lambda did: resolved if did == party else resolve_did(did)


def verify_contract_with_key_history(signed: object, *, now_s: int) -> wc.ContractInfo:
    """wire.contract.verify_signed_contract, also accepting a hosted tenant's retired signing keys.

    Key rotation: a registration the tenant signed before a rotation stays valid until it
    expires, so re-saving it (SAVE_COMMUNICATION_CONTRACT / COMMUNICATION_CONTRACT_RESPONSE)
    must still verify. Raises the same ContractInvalid / ContractSignaturesInvalid.
    """
    try:
        return wc.verify_signed_contract(signed, resolve_did, now_s=now_s)
    except wc.ContractSignaturesInvalid:
        for resolver in _retired_key_resolvers(signed):
            try:
                return wc.verify_signed_contract(signed, resolver, now_s=now_s)
            except wc.ContractSignaturesInvalid:
                continue
        raise
