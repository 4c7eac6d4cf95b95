"""DID resolution for the server: did:decentrl locally, did:web only for tenants hosted here
(PROTOCOL-DECISIONS §1; resolving foreign did:web is off)."""

from __future__ import annotations

from apps.protocol.wire.did import DidError, ResolvedDid, parse_decentrl

from .models import Tenant


def resolve_did(did: str) -> ResolvedDid:
    """Resolve `did` or raise DidError ("not found")."""
    if isinstance(did, str) and did.startswith("did:web:"):
        tenant = Tenant.objects.filter(did=did.split("#", 1)[0]).first()
        if tenant is None:
            raise DidError("did:web not hosted here")
        return tenant.resolved()
    return parse_decentrl(did)
