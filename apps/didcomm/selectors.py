"""Read-only views of DIDComm mediation for the admin and the operator API (per-recipient depths
live here and nowhere in metrics: no DID labels)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Count, QuerySet

from apps.wire.display import utc_iso

from .models import Mediation, QueuedMessage, RecipientKey
from .services import identities_accepting, invitation_for


def grants_with_depths(*, tenant_id: int | None = None) -> QuerySet[Mediation]:
    """Mediations with their recipient count and queued-message count (`n_recipients`, `n_queued`)."""
    qs = (
        Mediation.objects.select_related("tenant")
        .annotate(n_recipients=Count("recipients", distinct=True))
        .order_by("tenant__slug", "id")
    )
    return qs.filter(tenant_id=tenant_id) if tenant_id is not None else qs


def recipient_depths(*, mediation: Mediation) -> list[dict]:
    """Each recipient DID of a grant with its queue depth."""
    depths = dict(
        QueuedMessage.objects.filter(mediation=mediation, recipient__isnull=False)
        .values_list("recipient_id")
        .annotate(n=Count("id"))
    )
    return [
        {"recipient_did": r.recipient_did, "queued": depths.get(r.pk, 0), "added_at": r.created_at}
        for r in RecipientKey.objects.filter(mediation=mediation).order_by("id")
    ]


def queued_for(*, mediation: Mediation) -> int:
    return QueuedMessage.objects.filter(mediation=mediation).count()


def identity_summary(*, tenant, now: datetime | None = None) -> dict:
    """The tenant's DIDComm mediator DID, its invitation URL, and the DIDs still accepted after a
    rotation (with the end of their grace period): what the operator API answers."""
    identities = identities_accepting(tenant=tenant, now=now)
    current, retired = identities[0], identities[1:]
    grace = timedelta(hours=tenant.prekey_grace_hours)
    return {
        "did": current.did,
        "created_at": utc_iso(current.created_at),
        "http_uri": current.http_uri,
        "ws_uri": current.ws_uri,
        "invitation_url": invitation_for(tenant=tenant)[1],
        "previous": [
            {"did": r.did, "retired_at": utc_iso(r.retired_at), "accepted_until": utc_iso(r.retired_at + grace)}
            for r in retired
        ],
    }
