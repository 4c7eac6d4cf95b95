"""Read-only views of DIDComm mediation for the admin and the operator API (per-recipient depths
live here and nowhere in metrics: no DID labels)."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from .models import Mediation, QueuedMessage, RecipientKey


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
