"""Read-only figures about messaging data: a tenant's for the operator console (admin and API), the
deployment's pending backlog for the metrics scrape (`pending_backlog`).

apps/console (the tenant pages, the operator API and their operations) and apps/ops/metrics.py read
them; nothing here returns payloads, tags, signatures or keys (docs/protocol-readings.md §9).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Count, F, IntegerField, Max, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from apps.wire.display import utc_iso
from apps.wire.encoding import b64url_nopad

from .models import Contract, ContractRequest, PendingEvent, PendingQueueDepth, StoredEvent


@dataclass(frozen=True)
class TenantStatistics:
    registered_identities: int
    contracts: int
    live_contracts: int
    pending_events: int
    largest_queue: int
    largest_queue_did: str | None
    pending_contract_requests: int
    stored_events: int
    stored_event_bytes: int
    last_activity: datetime | None

    def as_dict(self) -> dict:
        data = asdict(self)
        data["last_activity"] = utc_iso(self.last_activity) if self.last_activity else None
        return data


_BACKLOG = (
    "SELECT COUNT(*), COALESCE(SUM(c), 0), COALESCE(MAX(c), 0) FROM ("
    f"SELECT COUNT(*) AS c FROM {PendingEvent._meta.db_table} WHERE acknowledged_at IS NULL "
    "GROUP BY tenant_id, recipient_did) AS q"
)


def pending_backlog() -> tuple[int, int, int]:
    """Every tenant's unacknowledged pending events: (recipients with any, events, the deepest queue)."""
    with connection.cursor() as cur:
        cur.execute(_BACKLOG)
        recipients, events, deepest = cur.fetchone()
    return int(recipients), int(events), int(deepest)


def tenant_statistics(*, tenant, now_s: int | None = None) -> TenantStatistics:
    """Live figures for one tenant (a handful of aggregate queries, each scoped to the tenant)."""
    now_s = int(time.time()) if now_s is None else now_s
    identities = Contract.objects.live_registrations(tenant, now_s).values("owner_did").distinct().count()
    contracts = Contract.objects.filter(tenant=tenant).aggregate(
        total=Count("id"), live=Count("id", filter=Q(expires_at__gt=now_s)), last=Max("created_at")
    )
    unacked = PendingEvent.objects.filter(tenant=tenant, acknowledged_at__isnull=True)
    pending_total = unacked.count()
    largest = (
        unacked.values("recipient_did").annotate(n=Count("id")).order_by("-n", "recipient_did").first()
        if pending_total
        else None
    )
    pending_last = PendingEvent.objects.filter(tenant=tenant).aggregate(last=Max("created_at"))["last"]
    requests = ContractRequest.objects.filter(tenant=tenant)
    req_pending = requests.filter(acknowledged_at__isnull=True).count()
    req_last = requests.aggregate(last=Max("created_at"))["last"]
    events = StoredEvent.objects.filter(tenant=tenant).aggregate(
        n=Count("id"), bytes=Coalesce(Sum("payload_bytes"), 0), last=Max("created_at")
    )
    lasts = [d for d in (contracts["last"], pending_last, req_last, events["last"]) if d is not None]
    return TenantStatistics(
        registered_identities=identities,
        contracts=contracts["total"],
        live_contracts=contracts["live"],
        pending_events=pending_total,
        largest_queue=largest["n"] if largest else 0,
        largest_queue_did=largest["recipient_did"] if largest else None,
        pending_contract_requests=req_pending,
        stored_events=events["n"],
        stored_event_bytes=int(events["bytes"]),
        last_activity=max(lasts) if lasts else None,
    )


def tenant_list_annotations(*, now_s: int | None = None) -> dict:
    """Correlated subqueries for a Tenant changelist page: live identities and pending depth.

    Only the cheap figures: each is an index range scan on (tenant, …) per listed tenant.
    """
    now_s = int(time.time()) if now_s is None else now_s
    identities = (
        Contract.objects.filter(
            tenant=OuterRef("pk"), recipient_did=OuterRef("did"), requestor_did=F("owner_did"), expires_at__gt=now_s
        )
        .order_by()
        .values("tenant")
        .annotate(n=Count("owner_did", distinct=True))
        .values("n")
    )
    pending = (
        PendingEvent.objects.filter(tenant=OuterRef("pk"), acknowledged_at__isnull=True)
        .order_by()
        .values("tenant")
        .annotate(n=Count("id"))
        .values("n")
    )
    return {
        "stat_identities": Coalesce(Subquery(identities, output_field=IntegerField()), Value(0)),
        "stat_pending": Coalesce(Subquery(pending, output_field=IntegerField()), Value(0)),
    }


@dataclass(frozen=True)
class Presence:
    """One presence row that vouches for an open socket: its key (a DID, or a front door's own
    key such as `didcomm:<hash>`), how many sockets it counts and until when (epoch seconds)."""

    key: str
    sockets: int
    until: int


def live_presence(*, tenant, now_s: int | None = None) -> QuerySet:
    """The tenant's presence rows (presence.py) that vouch for an open socket now, newest lease
    first: the same predicate the push rule reads (`live > 0 AND live_until > now`)."""
    now_s = int(time.time()) if now_s is None else now_s
    return PendingQueueDepth.objects.filter(tenant=tenant, live__gt=0, live_until__gt=now_s).order_by(
        "-live_until", "recipient_did"
    )


def presence_rows(qs: QuerySet, *, limit: int) -> list[Presence]:
    """The first `limit` rows of `live_presence` as Presence values."""
    return [
        Presence(key=k, sockets=n, until=u) for k, n, u in qs.values_list("recipient_did", "live", "live_until")[:limit]
    ]


def did_search(field: str, text: str) -> Q:
    """A DID column matching `text`: part of the DID, or a did:decentrl whose alias is `text` (the
    alias is the DID's first segment, base64url without padding, so only a whole alias matches)."""
    text = text.strip()
    if not text:
        return Q()
    alias = f"did:decentrl:{b64url_nopad(text.encode('utf-8'))}:"
    return Q(**{f"{field}__icontains": text}) | Q(**{f"{field}__startswith": alias})


def tenant_registrations(*, tenant, now_s: int | None = None, search: str = ""):
    """Live registrations of a tenant: (owner DID, expiry, created) rows only, newest first;
    `search` narrows them to DIDs containing it or aliases starting with it."""
    now_s = int(time.time()) if now_s is None else now_s
    return (
        Contract.objects.live_registrations(tenant, now_s)
        .filter(did_search("owner_did", search))
        .order_by("-id")
        .values("owner_did", "expires_at", "created_at")
    )


CONTRACT_STATES = ("live", "expired")


def tenant_contracts(*, tenant, search: str = "", state: str = "", now_s: int | None = None):
    """Every stored contract of a tenant: owner, parties, expiry and arrival only, newest first;
    `search` matches any of the three DIDs, `state` is "live", "expired" or "" (both)."""
    now_s = int(time.time()) if now_s is None else now_s
    qs = Contract.objects.filter(tenant=tenant)
    if search.strip():
        qs = qs.filter(
            did_search("owner_did", search) | did_search("requestor_did", search) | did_search("recipient_did", search)
        )
    if state == "live":
        qs = qs.filter(expires_at__gt=now_s)
    elif state == "expired":
        qs = qs.filter(expires_at__lte=now_s)
    return qs.order_by("-id").values("owner_did", "requestor_did", "recipient_did", "expires_at", "created_at")
