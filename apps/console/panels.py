"""The read-only blocks of a tenant's console page: list columns, figures, live connections, the
domain checklist, the DIDComm policy, invitations and delivery, recent audit (mixed into TenantAdmin)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Field
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import mark_safe
from unfold.decorators import display

from apps.didcomm import texts as didcomm_texts
from apps.didcomm.invitation import invitation_for, invitation_qr_svg, invitation_v1_for
from apps.didcomm.models import DidcommPolicy
from apps.didcomm.policy import policy_for
from apps.didcomm.selectors import delivery_summary, live_connections, tenant_figures
from apps.tenants.models import Tenant
from apps.tenants.services import (
    fingerprint,
)
from apps.tenants.templatetags.mediator import utc
from apps.wire.display import human_bytes, utc_iso

from .services import tenant_statistics

# Open sockets listed on a tenant's page (the counts cover them all).
LIVE_ROWS = 50


# The blocks' markup: templates/admin/tenants/tenant/panels/<block>.html, one per block (autoescaped; values
# that are not text go through `stringformat:"s"`, so that they render as str() does, not localized, and an
# already safe value is kept as it is). This module computes their context only.
PANELS = "admin/tenants/tenant/panels"


def _panel(name: str, context: dict) -> str:
    return render_to_string(f"{PANELS}/{name}.html", context)


def _invitation(title: str, dom_id: str, url: str, *, alt: str) -> dict:
    """One invitation URL: read-only text, a Copy button (apps/didcomm/static/didcomm/copy.js) and its QR."""
    qr = mark_safe(invitation_qr_svg(url, alt=alt))  # noqa: S308 - segno's SVG of our own URL, no user markup
    return {"title": title, "dom_id": dom_id, "url": url, "qr": qr}


def _queue_cell(depth: int, did: str | None):
    return _panel("queue_cell", {"depth": depth, "did": did}) if did else depth


class TenantPanels:
    """The tenant admin's columns and read-only fields; each returns escaped HTML or a plain value."""

    @display(description="Status", label={"active": "success", "suspended": "danger"}, ordering="status")
    def status_label(self, obj: Tenant):
        return obj.status

    @display(description="Identities", ordering="stat_identities")
    def identities(self, obj: Tenant) -> int:
        return getattr(obj, "stat_identities", 0)

    @display(description="Decentrl queue", ordering="stat_pending")
    def pending_depth(self, obj: Tenant) -> int:
        return getattr(obj, "stat_pending", 0)

    @display(description="DIDComm queue", ordering="stat_didcomm_queued")
    def didcomm_depth(self, obj: Tenant) -> int:
        return getattr(obj, "stat_didcomm_queued", 0)

    @display(description="Aliases")
    def alias_domains(self, obj: Tenant) -> str:
        return ", ".join(a.domain for a in obj.aliases.all()) or "none"

    @display(description="Signing key (fingerprint)")
    def signing_key(self, obj: Tenant) -> str:
        return fingerprint(obj.signing_public)

    @display(description="Pre-key (fingerprint)")
    def prekey(self, obj: Tenant) -> str:
        return fingerprint(obj.prekey_public)

    @display(description="Retired keys")
    def key_history(self, obj: Tenant):
        rows = list(obj.key_history.order_by("-retired_at")[:10])
        if not rows:
            return "none"
        return _panel(
            "key_history", {"rows": [(k.purpose, fingerprint(k.public), utc_iso(k.retired_at)) for k in rows]}
        )

    @display(description="Live figures")
    def live_figures(self, obj: Tenant):
        s = tenant_statistics(tenant=obj)
        d = tenant_figures(tenant=obj)
        decentrl = [
            ("Registered identities", s.registered_identities),
            ("Contracts (live / stored)", f"{s.live_contracts} / {s.contracts}"),
            ("Pending events", s.pending_events),
            ("Largest recipient queue", _queue_cell(s.largest_queue, s.largest_queue_did)),
            ("Pending contract requests", s.pending_contract_requests),
            ("Stored events", s.stored_events),
            ("Stored event bytes", human_bytes(s.stored_event_bytes)),
            ("Last activity", utc_iso(s.last_activity) if s.last_activity else "never"),
        ]
        didcomm = [
            ("Granted mediation clients", d.grants),
            ("Recipient DIDs", d.recipients),
            ("Queued messages", d.queued),
            ("Largest recipient queue", _queue_cell(d.largest_queue, d.largest_queue_did)),
        ]
        return _panel("live_figures", {"decentrl": decentrl, "didcomm": didcomm})

    @display(description="Live connections")
    def live_connections(self, obj: Tenant):
        """Open sockets from the presence rows they keep: Decentrl `/ws` per DID, DIDComm
        `/didcomm/ws` in live mode per client."""
        live = live_connections(tenant=obj, limit=LIVE_ROWS)
        rows = [(r.protocol, r.did, r.sockets, utc_iso(datetime.fromtimestamp(r.until, tz=UTC))) for r in live.rows]
        more = live.decentrl_dids + live.didcomm_clients - len(live.rows)
        return _panel("live_connections", {"live": live, "rows": rows, "more": more})

    @display(description="DNS and TLS checklist")
    def domain_checklist(self, obj: Tenant):
        """What must be true outside this deployment before clients can use the tenant's hosts."""
        hosts = [obj.domain, *obj.aliases.values_list("domain", flat=True)]
        scheme = settings.MEDIATOR_PUBLIC_SCHEME
        return _panel(
            "domain_checklist",
            {
                "active": obj.is_active,
                "slug": obj.slug,
                "did": obj.did,
                "public_url": obj.public_url,
                "hosts": hosts,
                "several_hosts": len(hosts) > 1,
                "https": scheme == "https",
                "did_json": f"{scheme}://{obj.domain}/.well-known/did.json",
            },
        )

    @display(description="DIDComm policy")
    def didcomm_policy(self, obj: Tenant):
        """Read-only, for those who may view the policy but not edit it."""
        policy = policy_for(tenant=obj)
        rows = []
        for name in DidcommPolicy.EDITABLE:
            value = getattr(policy, name)
            field = DidcommPolicy._meta.get_field(name)
            if isinstance(field, Field) and field.choices:
                value = didcomm_texts.choices(name).get(value, value)
            elif value is None:
                value = "deployment default"
            elif isinstance(value, bool):
                value = "yes" if value else "no"
            rows.append((didcomm_texts.label(name), value))
        return _panel("figures", {"rows": rows, "dom_id": "didcomm-policy-values"})

    @display(description="Out-of-Band invitations")
    def didcomm_invitation(self, obj: Tenant):
        """The tenant's invitation URLs, each with a Copy button and its QR code (made here as SVG): OOB 2.0
        for DIDComm v2 wallets, and the Aries OOB 1.1 one an operator hands to ACA-Py
        (`--mediator-invitation`) or Credo (DIDComm v1)."""
        if not policy_for(tenant=obj).enabled:
            return _panel("invitations", {"enabled": False})
        _, url = invitation_for(tenant=obj)
        _, url_v1 = invitation_v1_for(tenant=obj)
        invitations = [
            _invitation(
                "DIDComm v2 (Out-of-Band 2.0)",
                "didcomm-oob",
                url,
                alt=f"QR code of the DIDComm v2 invitation of {obj.slug}",
            ),
            _invitation(
                "DIDComm v1 (Aries Out-of-Band 1.1): ACA-Py --mediator-invitation, Credo",
                "didcomm-oob-v1",
                url_v1,
                alt=f"QR code of the DIDComm v1 invitation of {obj.slug}",
            ),
        ]
        return _panel("invitations", {"enabled": True, "invitations": invitations})

    @display(description="DIDComm v1 outbound delivery")
    def didcomm_delivery(self, obj: Tenant):
        """How many connections' last outbound POST failed and how many messages wait to be POSTed,
        with a link to those connections (docs/didcomm.md "When delivery fails")."""
        summary = delivery_summary(tenant=obj)
        url = reverse("admin:didcomm_connection_changelist") + f"?tenant__id__exact={obj.pk}&delivery=failing"
        return _panel("delivery", {"failing": summary["failing"], "waiting": summary["waiting"], "url": url})

    @display(description="Keys last rotated", ordering="keys_rotated_at")
    def keys_rotated(self, obj: Tenant):
        return utc(obj.keys_rotated_at) or "never"

    @display(description="Recent operator actions")
    def recent_audit(self, obj: Tenant):
        entries = list(obj.audit_entries.all()[:5])
        if not entries:
            return "none"
        url = reverse("admin:tenants_auditentry_changelist") + f"?tenant__id__exact={obj.pk}"
        rows = [(utc_iso(e.at), e.action, e.actor_name or "-", e.via) for e in entries]
        return _panel("recent_audit", {"entries": rows, "url": url})
