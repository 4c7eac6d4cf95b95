"""DID resolution for the server: did:decentrl locally, did:web only for tenants hosted here
(PROTOCOL-DECISIONS §1; resolving foreign did:web is off)."""

from __future__ import annotations

from dataclasses import replace

from apps.wire import contract as wc
from apps.wire.did import DidError, ResolvedDid, parse_decentrl

from .models import Tenant


def resolve_did(did: str) -> ResolvedDid:
    """Resolve `did` or raise DidError ("not found")."""
    if isinstance(did, str) and did.startswith("did:web:"):
        tenant = Tenant.objects.filter(did=did.split("#", 1)[0]).first()
        if tenant is None:
            raise DidError("did:web not hosted here")
        return tenant.resolved()
    return parse_decentrl(did)


def _retired_key_resolvers(signed: dict) -> list[wc.Resolver]:
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
            resolvers.append(lambda did, _party=party, _old=old: _old if did == _party else resolve_did(did))
    return resolvers


def verify_contract_with_key_history(signed: object, *, now_s: int) -> wc.ContractInfo:
    """wire.contract.verify_signed_contract, also accepting a hosted tenant's retired signing keys.

    Key rotation (issue 4): a registration the tenant signed before a rotation stays valid until it
    expires, so re-saving it (SAVE_COMMUNICATION_CONTRACT / COMMUNICATION_CONTRACT_RESPONSE)
    must still verify. Raises the same ContractInvalid / ContractSignaturesInvalid.
    """
    try:
        return wc.verify_signed_contract(signed, resolve_did, now_s=now_s)
    except wc.ContractSignaturesInvalid:
        for resolver in _retired_key_resolvers(signed):  # type: ignore[arg-type]
            try:
                return wc.verify_signed_contract(signed, resolver, now_s=now_s)
            except wc.ContractSignaturesInvalid:
                continue
        raise
