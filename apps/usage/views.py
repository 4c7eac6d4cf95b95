"""Staff pages: the usage dashboard, report runs with their results and charts, CSV export."""

from __future__ import annotations

import csv
from datetime import timedelta

from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from apps.tenants.models import Tenant

from . import charts, metering, selectors
from .models import ReportRun

DASHBOARD_DAYS = (7, 14, 30, 90)


class _Echo:
    def write(self, value):
        return value


def _charts(series: dict, labels: list[str]) -> list[dict]:
    """Every chart of the dashboard and of a run page, each with a visible caption."""
    charts_ = _chart_list(series, labels)
    for chart in charts_:
        chart["title"] = CAPTIONS[chart["id"]]
    return charts_


CAPTIONS = {
    "commands-by-type": "Commands per day by type",
    "errors": "Succeeded and failed commands",
    "error-rate": "Error rate",
    "bytes": "Bytes in and out",
    "latency": "Command latency (p50 / p95)",
    "identities": "Active identities and new registrations",
    "pending": "Pending events created and delivered",
    "delivery": "Delivery latency, stored → acknowledged (p50 / p95)",
    "stored": "Stored events",
}


def _chart_list(series: dict, labels: list[str]) -> list[dict]:
    s = series["sums"]
    return [
        {"id": "commands-by-type", "svg": charts.stacked_bars("Commands per day by type", labels, series["by_type"])},
        {
            "id": "errors",
            "svg": charts.stacked_bars(
                "Commands per day: succeeded and failed",
                labels,
                {
                    "succeeded": [c - e for c, e in zip(s.get("commands", []), s.get("errors", []), strict=True)],
                    "failed": s.get("errors", []),
                },
                colors=("#10b981", "#ef4444"),
            ),
        },
        {"id": "error-rate", "svg": charts.lines("Error rate", labels, {"error rate": series["error_rate"]}, "%")},
        {
            "id": "bytes",
            "svg": charts.lines(
                "Bytes in and out", labels, {"in": s.get("bytes_in", []), "out": s.get("bytes_out", [])}, "B"
            ),
        },
        {"id": "latency", "svg": charts.lines("Command latency", labels, series["latency"], "ms")},
        {
            "id": "identities",
            "svg": charts.lines(
                "Identities",
                labels,
                {"active": s.get("active_identities", []), "new registrations": s.get("new_registrations", [])},
            ),
        },
        {
            "id": "pending",
            "svg": charts.lines(
                "Pending events",
                labels,
                {"created": s.get("pending_created", []), "delivered": s.get("pending_delivered", [])},
            ),
        },
        {
            "id": "delivery",
            "svg": charts.lines("Delivery latency (stored → acknowledged)", labels, series["delivery"], "ms"),
        },
        {"id": "stored", "svg": charts.lines("Stored events", labels, {"events": s.get("stored_events", [])})},
    ]


@staff_member_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Per-tenant usage over time from the latest published reports, plus live counters."""
    tenants = list(Tenant.objects.order_by("slug"))
    slug = request.GET.get("tenant", "")
    selected = next((t for t in tenants if t.slug == slug), None)
    try:
        ndays = int(request.GET.get("days", "30"))
    except ValueError:
        ndays = 30
    ndays = ndays if ndays in DASHBOARD_DAYS else 30
    last = timezone.now().date()
    first = last - timedelta(days=ndays - 1)
    days = selectors.days_between(first, last)
    ids = [selected.pk] if selected else None
    daily = selectors.latest_published_daily(tenant_ids=ids, first=first, last=last)
    series = selectors.chart_series(daily, selectors.by_type_for(daily), days)
    labels = [d.strftime("%b %d") for d in days]
    sums = series["sums"]
    context = {
        "tenants": tenants,
        "selected": selected,
        "ndays": ndays,
        "day_choices": DASHBOARD_DAYS,
        "charts": _charts(series, labels),
        "has_data": bool(daily),
        "totals": {k: sum(v) for k, v in sums.items()},
        "live": selectors.live_counters(tenants=[selected] if selected else tenants),
        "metering_buffer": metering.pending(),
        "latest_run": ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED).first(),
        "runs": ReportRun.objects.all()[:5],
    }
    return render(request, "usage/dashboard.html", context)


@staff_member_required
def run_list(request: HttpRequest) -> HttpResponse:
    runs = ReportRun.objects.select_related("requested_by").prefetch_related("tenants")[:100]
    return render(request, "usage/run_list.html", {"runs": runs})


@staff_member_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A run's status (refreshing while it works), then its tables and charts."""
    run = get_object_or_404(ReportRun.objects.prefetch_related("tenants"), pk=pk)
    context: dict = {"run": run, "tables": None, "charts": []}
    if run.status == ReportRun.Status.SUCCEEDED:
        results = selectors.run_results(run)
        days = selectors.days_between(run.date_from, run.date_to)
        series = selectors.chart_series(results["daily"], results["by_type"], days)
        context.update(
            tables=results,
            charts=_charts(series, [d.strftime("%b %d") for d in days]),
            csv_tables=list(selectors.CSV_TABLES),
        )
    return render(request, "usage/run_detail.html", context)


@staff_member_required
def run_status(request: HttpRequest, pk: int) -> JsonResponse:
    run = get_object_or_404(ReportRun, pk=pk)
    return JsonResponse({"id": run.pk, "status": run.status, "finished": run.is_finished})


def csv_response(run: ReportRun, table: str) -> StreamingHttpResponse:
    """A published run's table as a streamed CSV download."""
    if table not in selectors.CSV_TABLES or run.status != ReportRun.Status.SUCCEEDED:
        raise Http404("no such report table")
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in selectors.csv_rows(run, table)), content_type="text/csv"
    )
    response["Content-Disposition"] = f'attachment; filename="usage-report-{run.pk}-{table}.csv"'
    return response


@staff_member_required
def run_csv(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    run = get_object_or_404(ReportRun, pk=pk)
    return csv_response(run, request.GET.get("table", "daily"))
