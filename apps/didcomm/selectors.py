"""Read-only views of DIDComm mediation for the admin and the operator API (per-recipient depths
live here and nowhere in metrics: no DID labels)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from django.db.models import Count, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from apps.messaging.selectors import live_presence, presence_rows
from apps.wire.display import utc_iso

from .identity import identities_accepting
from .invitation import invitation_for
from .models import PRESENCE_PREFIX, Connection, Mediation, Outbound, QueuedMessage, RecipientKey

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class GrantCounts(TypedDict):
    n_recipients: int


class DeliveryCounts(TypedDict):
    n_waiting: int


def grants_with_depths(*, tenant_id: int | None = None) -> QuerySet[WithAnnotations[Mediation, GrantCounts]]:
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
    """The tenant's DIDComm mediator DID, its invitation URL, the same for its legacy DID (older
    did:peer:2 libraries), and the DIDs still accepted after a rotation (with the end of their grace
    period): what the operator API answers."""
    identities = identities_accepting(tenant=tenant, now=now)
    current, retired = identities[0], identities[1:]
    grace = timedelta(hours=tenant.prekey_grace_hours)
    return {
        "did": current.did,
        "created_at": utc_iso(current.created_at),
        "http_uri": current.http_uri,
        "ws_uri": current.ws_uri,
        "invitation_url": invitation_for(tenant=tenant)[1],
        "legacy_did": current.legacy_did,
        "legacy_invitation_url": invitation_for(tenant=tenant, legacy=True)[1],
        "previous": [
            {"did": r.did, "retired_at": utc_iso(r.retired_at), "accepted_until": utc_iso(r.retired_at + grace)}
            for r in retired
            if r.retired_at is not None
        ],
    }


# A connection whose last outbound POST failed (or was refused) and was not followed by a delivery.
DELIVERY_FAILING = Q(last_delivery_error_at__isnull=False) & (
    Q(last_delivered_at__isnull=True) | Q(last_delivered_at__lt=F("last_delivery_error_at"))
)


def _count_of(qs: QuerySet, outer: str):
    """An annotation: how many rows of `qs` have `outer` = the annotated row's pk (0 when none)."""
    counted = qs.filter(**{outer: OuterRef("pk")}).order_by().values(outer).annotate(n=Count("id")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def connections_with_delivery(qs: QuerySet[Connection]) -> QuerySet[Connection]:
    """`qs` with `n_waiting`: the connection's outbound messages waiting to be POSTed (retrying)."""
    return qs.annotate(n_waiting=_count_of(Outbound.objects.all(), "connection"))


def delivery_summary(*, tenant) -> dict:
    """The tenant's DIDComm v1 outbound delivery at a glance: connections whose last POST failed,
    and messages waiting to be POSTed."""
    return {
        "failing": Connection.objects.filter(DELIVERY_FAILING, tenant=tenant).count(),
        "waiting": Outbound.objects.filter(tenant=tenant).count(),
    }


# --- the console's figures of a tenant (apps/console/panels.py and site.py, the dashboard) ---


def _tenant_queue(tenant_ids) -> QuerySet[QueuedMessage]:
    # Through the tenant's grants: QueuedMessage has no tenant index, (mediation, id) serves this.
    return QueuedMessage.objects.filter(mediation__in=Mediation.objects.filter(tenant_id__in=tenant_ids))


@dataclass(frozen=True)
class DidcommFigures:
    grants: int
    recipients: int
    queued: int
    largest_queue: int
    largest_queue_did: str | None


def tenant_figures(*, tenant) -> DidcommFigures:
    """A tenant's granted clients, their recipient DIDs, its queued messages and its largest recipient queue."""
    grants = Mediation.objects.filter(tenant=tenant).aggregate(
        granted=Count("id", filter=Q(state=Mediation.State.GRANTED))
    )["granted"]
    recipients = RecipientKey.objects.filter(tenant=tenant).count()
    queue = _tenant_queue([tenant.pk])
    queued = queue.count()
    largest = (
        queue.filter(recipient__isnull=False).values("recipient_id").annotate(n=Count("id")).order_by("-n").first()
        if queued
        else None
    )
    did = None
    if largest:
        did = RecipientKey.objects.filter(pk=largest["recipient_id"]).values_list("recipient_did", flat=True).first()
    return DidcommFigures(
        grants=grants,
        recipients=recipients,
        queued=queued,
        largest_queue=largest["n"] if largest else 0,
        largest_queue_did=did,
    )


def queued_by_tenant(*, tenant_ids: list[int]) -> dict[int, int]:
    """Queued DIDComm messages per tenant id (tenants without any are left out)."""
    rows = _tenant_queue(tenant_ids).values("mediation__tenant_id").annotate(n=Count("id"))
    return {r["mediation__tenant_id"]: r["n"] for r in rows}


def queued_annotation():
    """A Tenant-queryset annotation: the tenant's queued DIDComm messages (0 when none)."""
    return _count_of(QueuedMessage.objects.all(), "mediation__tenant")


@dataclass(frozen=True)
class LiveConnection:
    protocol: str  # "Decentrl" or "DIDComm"
    did: str  # the Decentrl recipient or the DIDComm client; "" for a client no longer known
    sockets: int
    until: int  # epoch seconds: the lease the sockets renew


@dataclass(frozen=True)
class LiveConnections:
    decentrl_sockets: int
    decentrl_dids: int
    didcomm_sockets: int
    didcomm_clients: int
    rows: list[LiveConnection]


def live_connections(*, tenant, now_s: int | None = None, limit: int = 50) -> LiveConnections:
    """The tenant's open sockets by protocol, from the presence rows the sockets keep
    (apps/messaging/presence.py): Decentrl `/ws` sockets per DID, DIDComm sockets in live mode per
    client (their rows are keyed by the client's hash, resolved here to its DID)."""
    now_s = int(time.time()) if now_s is None else now_s
    qs = live_presence(tenant=tenant, now_s=now_s)
    didcomm = Q(recipient_did__startswith=PRESENCE_PREFIX)
    totals = qs.aggregate(
        decentrl_sockets=Coalesce(Sum("live", filter=~didcomm), 0),
        decentrl_dids=Count("id", filter=~didcomm),
        didcomm_sockets=Coalesce(Sum("live", filter=didcomm), 0),
        didcomm_clients=Count("id", filter=didcomm),
    )
    rows = presence_rows(qs, limit=limit)
    hashes = [r.key.removeprefix(PRESENCE_PREFIX) for r in rows if r.key.startswith(PRESENCE_PREFIX)]
    clients = dict(
        Mediation.objects.filter(tenant=tenant, client_hash__in=hashes).values_list("client_hash", "client_did")
    )
    out = []
    for r in rows:
        if r.key.startswith(PRESENCE_PREFIX):
            out.append(
                LiveConnection("DIDComm", clients.get(r.key.removeprefix(PRESENCE_PREFIX), ""), r.sockets, r.until)
            )
        else:
            out.append(LiveConnection("Decentrl", r.key, r.sockets, r.until))
    return LiveConnections(rows=out, **totals)
