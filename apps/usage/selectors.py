"""Read-side queries for the dashboard, the run pages and the API (always published runs only)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from enum import StrEnum

from django.db.models import Count, Q, Sum
from django.utils import timezone

from apps.messaging.models import PendingEvent
from apps.tenants.models import Tenant

from .models import (
    DEFAULT_PROTOCOL,
    RESULT_MODELS,
    CommandMeter,
    ReportCommandType,
    ReportDaily,
    ReportResult,
    ReportRun,
)

# The codes that are not errors (spark_reports/transform.py NOT_ERRORS says the same): SUCCESS, and
# EVICTED, a DIDComm forward stored after the overflow policy evicted the oldest queued message.
NOT_ERRORS = ("SUCCESS", "EVICTED")

CSV_TABLES: dict[str, tuple[type[ReportResult], list[str]]] = {
    name: (RESULT_MODELS[name], columns)
    for name, columns in {
        "daily": [
            "tenant__slug",
            "day",
            *[f.name for f in ReportDaily._meta.fields if f.name not in ("id", "run", "tenant", "day")],
        ],
        "by_type": ["tenant__slug", "day", "command_type", "commands", "errors"],
        "by_code": ["tenant__slug", "day", "code", "commands", "rate"],
        "top": ["tenant__slug", "day", "rank", "sender_did", "commands", "bytes_in", "bytes_out"],
    }.items()
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
    didcomm_queue_depth: int


# Queued DIDComm messages per tenant id, `(tenant_ids=[…]) -> {tenant id: n}`: the DIDComm front
# door, above this app, registers its selector in its AppConfig.ready() (0 for every tenant without).
QUEUE_COUNTERS: dict[str, Callable[..., dict[int, int]]] = {}


def live_counters(*, tenants: list[Tenant]) -> list[LiveCounters]:
    """Cheap live figures per tenant: last hour's metering (index tenant, at), the unacked Decentrl
    queue depth and the queued DIDComm messages (QUEUE_COUNTERS)."""
    since = timezone.now() - timedelta(hours=1)
    ids = [t.pk for t in tenants]
    meters = {
        row["tenant_id"]: row
        for row in CommandMeter.objects.filter(tenant_id__in=ids, at__gte=since)
        .values("tenant_id")
        .annotate(
            n=Count("id"), errors=Count("id", filter=~Q(code__in=NOT_ERRORS)), b=Sum("bytes_in") + Sum("bytes_out")
        )
    }
    # Partial index pending_unacked (tenant, recipient_did, id) WHERE acknowledged_at IS NULL.
    depth = dict(
        PendingEvent.objects.filter(tenant_id__in=ids, acknowledged_at__isnull=True)
        .values_list("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    )
    didcomm = QUEUE_COUNTERS["didcomm"](tenant_ids=ids) if "didcomm" in QUEUE_COUNTERS else {}
    out = []
    for t in tenants:
        m = meters.get(t.pk, {"tenant_id": t.pk, "n": 0, "errors": 0, "b": 0})
        out.append(
            LiveCounters(
                tenant=t,
                commands_last_hour=m.get("n", 0),
                errors_last_hour=m.get("errors", 0),
                bytes_last_hour=m.get("b") or 0,
                queue_depth=depth.get(t.pk, 0),
                didcomm_queue_depth=didcomm.get(t.pk, 0),
            )
        )
    return out


def typical_duration_s(*, last: int = 10) -> float | None:
    """The median duration of the last `last` succeeded runs (what the run page compares against)."""
    spans = [
        (finished - started).total_seconds()
        for started, finished in ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED, started_at__isnull=False)
        .order_by("-finished_at")
        .values_list("started_at", "finished_at")[:last]
        if started is not None and finished is not None
    ]
    if not spans:
        return None
    spans.sort()
    mid = len(spans) // 2
    return round(spans[mid] if len(spans) % 2 else (spans[mid - 1] + spans[mid]) / 2, 1)


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


SUM_FIELDS = (
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
)


def covered_days(*, tenant: Tenant | None, first: date, last: date) -> set[date]:
    """The days in [first, last] that a succeeded run covers for `tenant` (None: any run)."""
    runs = ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED, date_from__lte=last, date_to__gte=first)
    if tenant is not None:
        # A run with no tenants covers all of them.
        runs = runs.filter(Q(tenants=None) | Q(tenants=tenant))
    covered: set[date] = set()
    for run_first, run_last in runs.values_list("date_from", "date_to").distinct():
        covered.update(days_between(max(run_first, first), min(run_last, last)))
    return covered


class UsageState(StrEnum):
    """What the usage pages show for a range: charts, or why there are none."""

    DATA = "data"
    NO_REPORTS = "no-reports"  # no run has ever been published
    NOT_COVERED = "not-covered"  # published runs exist, none covers a day of the range
    NO_TRAFFIC = "no-traffic"  # the range is covered, but no tenant in scope had any activity


@dataclass(frozen=True)
class UsageOverTime:
    """The dashboard's "over time" section for one scope and range."""

    days: list[date]
    state: UsageState
    series: dict | None  # chart_series(...) when state is DATA, else None
    uncovered: int  # days of the range no published run covers (gaps in the charts)

    @property
    def totals(self) -> dict[str, int | None]:
        """Per field, the sum over the covered days; None (not 0) for every field without data."""
        if self.series is None:
            return dict.fromkeys(SUM_FIELDS)
        return {k: sum(v for v in vals if v is not None) for k, vals in self.series["sums"].items()}


def usage_over_time(*, tenant: Tenant | None, first: date, last: date) -> UsageOverTime:
    """Published usage of one tenant (None: all) over [first, last], or the reason there is none."""
    days = days_between(first, last)
    covered = covered_days(tenant=tenant, first=first, last=last)
    uncovered = len(days) - len(covered)
    if not covered:
        published = ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED).exists()
        return UsageOverTime(days, UsageState.NOT_COVERED if published else UsageState.NO_REPORTS, None, uncovered)
    daily = latest_published_daily(tenant_ids=[tenant.pk] if tenant else None, first=first, last=last)
    if not daily:
        return UsageOverTime(days, UsageState.NO_TRAFFIC, None, uncovered)
    series = chart_series(daily, by_type_for(daily), days, covered=covered)
    return UsageOverTime(days, UsageState.DATA, series, uncovered)


def chart_series(
    daily_rows: list[ReportDaily],
    type_rows: list[ReportCommandType],
    days: list[date],
    *,
    covered: set[date] | None = None,
) -> dict:
    """Day-indexed series (summed over the given tenants) for the charts.

    Every series has exactly one value per day of `days`, whatever the rows hold: 0 on a covered
    day without activity, None (a gap, never a zero) on a day no published run covers.
    """
    index = {d: i for i, d in enumerate(days)}
    n = len(days)
    covered = set(days) if covered is None else covered

    def blank() -> list[int | None]:
        return [0 if d in covered else None for d in days]

    sums: dict[str, list[int | None]] = {f: blank() for f in SUM_FIELDS}
    lat50: list[float | None] = [None] * n
    lat95: list[float | None] = [None] * n
    del50: list[float | None] = [None] * n
    del95: list[float | None] = [None] * n
    for r in daily_rows:
        i = index.get(r.day)
        if i is None:
            continue
        for f in SUM_FIELDS:
            sums[f][i] = (sums[f][i] or 0) + getattr(r, f)
        # Across tenants show the worst tenant's percentile (percentiles do not add up).
        for target, value in (
            (lat50, r.latency_p50_ms),
            (lat95, r.latency_p95_ms),
            (del50, r.delivery_p50_ms),
            (del95, r.delivery_p95_ms),
        ):
            current = target[i]
            if value is not None:
                target[i] = value if current is None else max(current, value)
    types: dict[str, list[int | None]] = defaultdict(blank)
    totals: dict[str, int] = defaultdict(int)
    for t in type_rows:
        i = index.get(t.day)
        if i is not None:
            name = t.command_type if t.protocol == DEFAULT_PROTOCOL else f"{t.protocol}: {t.command_type}"
            types[name][i] = (types[name][i] or 0) + t.commands
            totals[name] += t.commands
    # Every type that carried traffic, by name, busiest first (TWO_WAY_PRIVATE is never "other").
    ordered = sorted(totals, key=lambda k: (-totals[k], k))
    by_type = {k: types[k] for k in ordered}
    commands, errors = sums["commands"], sums["errors"]
    return {
        "sums": sums,
        "succeeded": [None if c is None else c - (e or 0) for c, e in zip(commands, errors, strict=True)],
        "by_type": by_type,
        "error_rate": [(e or 0) / c if c else None for c, e in zip(commands, errors, strict=True)],
        "latency": {"p50": lat50, "p95": lat95},
        "delivery": {"p50": del50, "p95": del95},
    }
