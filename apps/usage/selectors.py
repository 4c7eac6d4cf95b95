"""Read-side queries for the dashboard, the run pages and the API (always published runs only)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta

from django.db.models import Count, Q, Sum
from django.utils import timezone

from apps.messaging.models import PendingEvent
from apps.tenants.models import Tenant

from .models import CommandMeter, ReportCommandType, ReportDaily, ReportErrorCode, ReportRun, ReportTopIdentity

CSV_TABLES = {
    "daily": (
        ReportDaily,
        [
            "tenant__slug",
            "day",
            *[f.name for f in ReportDaily._meta.fields if f.name not in ("id", "run", "tenant", "day")],
        ],
    ),
    "by_type": (ReportCommandType, ["tenant__slug", "day", "command_type", "commands", "errors"]),
    "by_code": (ReportErrorCode, ["tenant__slug", "day", "code", "commands", "rate"]),
    "top": (ReportTopIdentity, ["tenant__slug", "day", "rank", "sender_did", "commands", "bytes_in", "bytes_out"]),
}


def days_between(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def latest_published_daily(*, tenant_ids: list[int] | None, first: date, last: date) -> list[ReportDaily]:
    """For each (tenant, day) in range, the row from the newest succeeded run that covers it."""
    qs = ReportDaily.objects.filter(run__status=ReportRun.Status.SUCCEEDED, day__gte=first, day__lte=last)
    if tenant_ids:
        qs = qs.filter(tenant_id__in=tenant_ids)
    chosen: dict[tuple[int, date], ReportDaily] = {}
    for row in qs.order_by("-run_id").iterator(chunk_size=2000):
        chosen.setdefault((row.tenant_id, row.day), row)
    return sorted(chosen.values(), key=lambda r: (r.day, r.tenant_id))


def by_type_for(daily_rows: list[ReportDaily]) -> list[ReportCommandType]:
    """The command-type rows that belong to exactly the (run, tenant, day) of `daily_rows`."""
    keys = {(r.run_id, r.tenant_id, r.day) for r in daily_rows}
    if not keys:
        return []
    runs = {k[0] for k in keys}
    days = [k[2] for k in keys]
    qs = ReportCommandType.objects.filter(run_id__in=runs, day__gte=min(days), day__lte=max(days))
    return [r for r in qs if (r.run_id, r.tenant_id, r.day) in keys]


@dataclass(frozen=True)
class LiveCounters:
    tenant: Tenant
    commands_last_hour: int
    errors_last_hour: int
    bytes_last_hour: int
    queue_depth: int


def live_counters(*, tenants: list[Tenant]) -> list[LiveCounters]:
    """Cheap live figures per tenant: last hour's metering (index tenant, at) and unacked queue depth."""
    since = timezone.now() - timedelta(hours=1)
    ids = [t.pk for t in tenants]
    meters = {
        row["tenant_id"]: row
        for row in CommandMeter.objects.filter(tenant_id__in=ids, at__gte=since)
        .values("tenant_id")
        .annotate(n=Count("id"), errors=Count("id", filter=~Q(code="SUCCESS")), b=Sum("bytes_in") + Sum("bytes_out"))
    }
    # Partial index pending_unacked (tenant, recipient_did, id) WHERE acknowledged_at IS NULL.
    depth = dict(
        PendingEvent.objects.filter(tenant_id__in=ids, acknowledged_at__isnull=True)
        .values_list("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    )
    out = []
    for t in tenants:
        m = meters.get(t.pk, {})
        out.append(
            LiveCounters(
                tenant=t,
                commands_last_hour=m.get("n", 0),
                errors_last_hour=m.get("errors", 0),
                bytes_last_hour=m.get("b") or 0,
                queue_depth=depth.get(t.pk, 0),
            )
        )
    return out


def run_results(run: ReportRun) -> dict:
    """Everything a succeeded run wrote, ordered for display."""
    return {
        "daily": list(run.daily.select_related("tenant").order_by("day", "tenant__slug")),
        "by_type": list(
            run.by_type.select_related("tenant").order_by("day", "tenant__slug", "-commands", "command_type")
        ),
        "by_code": list(run.by_code.select_related("tenant").order_by("day", "tenant__slug", "-commands", "code")),
        "top": list(run.top_identities.select_related("tenant").order_by("day", "tenant__slug", "rank")),
    }


def csv_rows(run: ReportRun, table: str):
    """Header then value rows of one result table of a run, for CSV export."""
    model, columns = CSV_TABLES[table]
    yield ["tenant" if c == "tenant__slug" else c for c in columns]
    yield from model.objects.filter(run=run).order_by("day", "tenant__slug", "pk").values_list(*columns).iterator()


def chart_series(daily_rows: list[ReportDaily], type_rows: list[ReportCommandType], days: list[date]) -> dict:
    """Day-indexed series (summed over the given tenants) for the charts."""
    index = {d: i for i, d in enumerate(days)}
    n = len(days)

    def zeros():
        return [0] * n

    sums: dict[str, list] = defaultdict(zeros)
    lat50: list[float | None] = [None] * n
    lat95: list[float | None] = [None] * n
    del50: list[float | None] = [None] * n
    del95: list[float | None] = [None] * n
    for r in daily_rows:
        i = index.get(r.day)
        if i is None:
            continue
        for f in (
            "commands",
            "errors",
            "bytes_in",
            "bytes_out",
            "active_identities",
            "new_registrations",
            "pending_created",
            "pending_delivered",
            "stored_events",
            "stored_bytes",
        ):
            sums[f][i] += getattr(r, f)
        # Across tenants show the worst tenant's percentile (percentiles do not add up).
        for target, value in (
            (lat50, r.latency_p50_ms),
            (lat95, r.latency_p95_ms),
            (del50, r.delivery_p50_ms),
            (del95, r.delivery_p95_ms),
        ):
            if value is not None:
                target[i] = value if target[i] is None else max(target[i], value)
    types: dict[str, list] = defaultdict(zeros)
    totals: dict[str, int] = defaultdict(int)
    for r in type_rows:
        i = index.get(r.day)
        if i is not None:
            types[r.command_type][i] += r.commands
            totals[r.command_type] += r.commands
    # The eight busiest types keep their colour; the rest become "other".
    ordered = sorted(totals, key=lambda k: (-totals[k], k))
    by_type = {k: types[k] for k in ordered[:8]}
    if len(ordered) > 8:
        other = zeros()
        for k in ordered[8:]:
            other = [a + b for a, b in zip(other, types[k], strict=True)]
        by_type["other"] = other
    error_rate = [(sums["errors"][i] / sums["commands"][i]) if sums["commands"][i] else None for i in range(n)]
    return {
        "sums": dict(sums),
        "by_type": by_type,
        "error_rate": error_rate,
        "latency": {"p50": lat50, "p95": lat95},
        "delivery": {"p50": del50, "p95": del95},
    }
