"""The tenant's Out-of-Band invitations: OOB 2.0 (DIDComm v2, from its mediator DID) and OOB 1.1
(DIDComm v1, from its Ed25519 key), their URL forms, and a URL as an inline QR code."""

from __future__ import annotations

import json
import uuid

import segno
from django.utils.html import escape

from apps.tenants.models import Tenant
from apps.wire.encoding import b64url_nopad

from . import protocols
from .identity import did_key_of, identity_current
from .models import MediatorIdentity


def _url_form(invitation: dict) -> str:
    return b64url_nopad(json.dumps(invitation, separators=(",", ":")).encode("utf-8"))


def invitation_for(*, tenant: Tenant, legacy: bool = False) -> tuple[dict, str]:
    """The tenant's OOB 2.0 mediation invitation and its `?_oob=` URL form (multi-use, stable per DID).
    `legacy`: from the identity's legacy DID, for older did:peer:2 libraries (MediatorIdentity.legacy_did)."""
    identity = identity_current(tenant=tenant)
    did = identity.legacy_did if legacy else identity.did
    invitation = {
        "type": protocols.OOB_INVITATION,
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, did)),
        "from": did,
        "body": {
            "goal_code": "request-mediate",
            "goal": "Request mediation",
            "label": tenant.name or tenant.slug,
            "accept": ["didcomm/v2"],
        },
    }
    return invitation, f"{identity.http_uri}?_oob={_url_form(invitation)}"


def invitation_qr_svg(url: str, *, alt: str = "QR code of the invitation URL") -> str:
    """`url` as a QR code, an inline `<svg>` made here (no script, no CDN: the admin's CSP), with
    `alt` as its text alternative (`role="img"`, `aria-label` and `<title>`).

    Error correction L keeps a ~1.5 kB invitation URL at version ~25 (scannable on a screen);
    black on white whatever the admin's theme, with the 4-module quiet zone readers need.
    """
    code = segno.make(url, error="l", micro=False, boost_error=False)
    svg = code.svg_inline(
        scale=3, border=4, dark="#000", light="#fff", svgclass="didcomm-qr", lineclass=None, title=alt
    )
    # A viewBox as well as the size, so that a narrow screen can scale it down (max-width: 100%).
    width, height = code.symbol_size(scale=3, border=4)
    return svg.replace("<svg ", f'<svg role="img" aria-label="{escape(alt)}" viewBox="0 0 {width} {height}" ', 1)


def invitation_id(identity: MediatorIdentity) -> str:
    """The OOB 1.1 invitation's @id: stable per identity (multi-use), distinct from the v2 one."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "didcomm-v1:" + identity.did))


def invitation_v1_for(*, tenant: Tenant) -> tuple[dict, str]:
    """The tenant's Out-of-Band 1.1 invitation (multi-use) and its `?oob=` URL form."""
    identity = identity_current(tenant=tenant)
    invitation = {
        "@type": protocols.OOB_V1_INVITATION,
        "@id": invitation_id(identity),
        "label": tenant.name or tenant.slug,
        "goal_code": "aries.vc.mediate",
        "goal": "Request mediation",
        "accept": ["didcomm/aip1", "didcomm/aip2;env=rfc19"],
        "handshake_protocols": [protocols.DIDX_11[:-1], protocols.DIDX_10[:-1]],
        "services": [
            {
                "id": "#inline",
                "type": "did-communication",
                "recipientKeys": [did_key_of(identity)],
                "serviceEndpoint": identity.http_uri,
            }
        ],
    }
    return invitation, f"{identity.http_uri}?oob={_url_form(invitation)}"
