"""Channel-layer group naming: one group per (tenant, DID), holding every socket of that DID."""

from __future__ import annotations

import hashlib


def group_name(tenant_id: int, did: str) -> str:
    """`t<tenant>.<sha256(did)[:40]>`: ASCII, under 100 chars, as the channel layer requires.

    A DID can be kilobytes of base64url and colons, which a group name may not hold; 160 bits of
    its hash keep groups of different DIDs apart.
    """
    return f"t{int(tenant_id)}.{hashlib.sha256(did.encode('utf-8')).hexdigest()[:40]}"


def tenant_group_name(tenant_id: int) -> str:
    """`t<tenant>`: every open socket of the tenant, on every front door (the tenant-state message);
    never a per-DID group, whose names always carry a `.<hash>`."""
    return f"t{int(tenant_id)}"
