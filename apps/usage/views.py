"""Staff pages: the usage dashboard, report runs with their results and charts, CSV export."""

from __future__ import annotations

import csv
from datetime import date
from functools import wraps

from django.contrib import admin, messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.tenants.models import Tenant
from apps.tenants.permissions import operator_may
from apps.wire.display import utc_iso

from . import charts, metering, selectors, services
from .forms import DASHBOARD_DAYS, DashboardFilterForm
from .models import ReportRun
from .permissions import REPORT_RUN_ACTIONS


def _operator_view(action: str):
    """A staff page that needs the model permission the API needs for `action` (403 without it);
    anonymous visitors go to the login page as on every console page."""

    def decorate(view):
        @wraps(view)
        def checked(request: HttpRequest, *args, **kwargs):
            verb = REPORT_RUN_ACTIONS[action]
            if not operator_may(request.user, ReportRun, verb):
                raise PermissionDenied(f"“Can {verb} report run” (usage)")
            return view(request, *args, **kwargs)

        return staff_member_required(checked)

    return decorate


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
                {"succeeded": series["succeeded"], "failed": s["errors"]},
                colors=("#10b981", "#ef4444"),
            ),
        },
        {"id": "error-rate", "svg": charts.lines("Error rate", labels, {"error rate": series["error_rate"]}, "%")},
        {
            "id": "bytes",
            "svg": charts.lines("Bytes in and out", labels, {"in": s["bytes_in"], "out": s["bytes_out"]}, "B"),
        },
        {"id": "latency", "svg": charts.lines("Command latency", labels, series["latency"], "ms")},
        {
            "id": "identities",
            "svg": charts.lines(
                "Identities",
                labels,
                {"active": s["active_identities"], "new registrations": s["new_registrations"]},
            ),
        },
        {
            "id": "pending",
            "svg": charts.lines(
                "Pending events", labels, {"created": s["pending_created"], "delivered": s["pending_delivered"]}
            ),
        },
        {
            "id": "delivery",
            "svg": charts.lines("Delivery latency (stored → acknowledged)", labels, series["delivery"], "ms"),
        },
        {"id": "stored", "svg": charts.lines("Stored events", labels, {"events": s["stored_events"]})},
    ]


def _labels(days: list[date]) -> list[str]:
    return [d.strftime("%b %d") for d in days]


def _no_traffic(tenants: list[Tenant], first: date, last: date) -> str:
    who = ", ".join(t.slug for t in tenants) if tenants else "any tenant"
    return f"No traffic for {who} in {first} – {last}."


def _empty_message(usage: selectors.UsageOverTime, tenant: Tenant | None, first: date, last: date) -> str:
    """The sentence a usage page shows instead of charts that would only draw zeros."""
    if usage.state == selectors.UsageState.NO_REPORTS:
        return "No usage report has been published yet."
    if usage.state == selectors.UsageState.NOT_COVERED:
        return f"No usage report covers {first} – {last} yet."
    message = _no_traffic([tenant] if tenant else [], first, last)
    if usage.uncovered:
        message += f" No published report covers {usage.uncovered} of these {len(usage.days)} days."
    return message


def _page(request: HttpRequest, template: str, context: dict, *, title: str, tab: str, status: int = 200):
    """A usage page inside the console: the admin's theme, sidebar and header around it."""
    return render(
        request,
        template,
        {
            **admin.site.each_context(request),
            "title": title,
            "usage_tab": tab,
            "may_request_run": operator_may(request.user, ReportRun, REPORT_RUN_ACTIONS["request"]),
            **context,
        },
        status=status,
    )


@_operator_view("dashboard")
def dashboard(request: HttpRequest) -> HttpResponse:
    """Per-tenant usage over time from the latest published reports, plus live counters."""
    tenants = list(Tenant.objects.order_by("slug"))
    latest_run = ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED).order_by("-finished_at").first()
    default_range = (latest_run.date_from, latest_run.date_to) if latest_run else None
    form = DashboardFilterForm(request.GET, tenants=tenants, default_range=default_range)
    context: dict = {
        "tenants": tenants,
        "day_choices": DASHBOARD_DAYS,
        "latest_run": latest_run,
        "fresh_as_of": latest_run.finished_at if latest_run else None,
        "may_request_run": operator_may(request.user, ReportRun, REPORT_RUN_ACTIONS["request"]),
        "running_run": ReportRun.objects.filter(status__in=[ReportRun.Status.QUEUED, ReportRun.Status.RUNNING]).first(),
    }
    if not form.is_valid():
        # Bad filters: say what is wrong, draw nothing (a 400, never a guess at what was meant).
        errors = [e for field_errors in form.errors.values() for e in field_errors]
        return _page(
            request,
            "usage/dashboard.html",
            {**context, "filter_errors": errors},
            title="Usage dashboard",
            tab="dashboard",
            status=400,
        )
    selected: Tenant | None = form.cleaned_data["tenant"]
    first, last = form.cleaned_data["first"], form.cleaned_data["last"]
    usage = selectors.usage_over_time(tenant=selected, first=first, last=last)
    has_data = usage.state == selectors.UsageState.DATA
    context.update(
        selected=selected,
        ndays=len(usage.days),
        first=first,
        last=last,
        charts=_charts(usage.series, _labels(usage.days)) if usage.series is not None else [],
        has_data=has_data,
        empty_message=None if has_data else _empty_message(usage, selected, first, last),
        uncovered=usage.uncovered,
        totals=usage.totals,
        live=selectors.live_counters(tenants=[selected] if selected else tenants),
        metering_buffer=metering.pending(),
        runs=ReportRun.objects.all()[:5],
        days_param=form.cleaned_data["days"],
        from_report=not request.GET.get("days") and not request.GET.get("date_from") and latest_run is not None,
    )
    title = f"Usage of {selected.slug}" if selected else "Usage of all tenants"
    return _page(request, "usage/dashboard.html", context, title=title, tab="dashboard")


@_operator_view("list")
def run_list(request: HttpRequest) -> HttpResponse:
    runs = ReportRun.objects.select_related("requested_by").prefetch_related("tenants")[:100]
    return _page(request, "usage/run_list.html", {"runs": runs}, title="Usage reports", tab="reports")


@_operator_view("retrieve")
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The one page of a run: live progress while it works (run_status, no reload), Cancel, then
    its charts and tables, or why it failed in words with the technical tail folded away."""
    run = get_object_or_404(ReportRun.objects.prefetch_related("tenants"), pk=pk)
    context: dict = {
        "run": run,
        "tables": None,
        "charts": [],
        "empty_message": None,
        "status": _status(run),
        "may_cancel": operator_may(request.user, ReportRun, REPORT_RUN_ACTIONS["cancel"]),
    }
    if run.status == ReportRun.Status.SUCCEEDED:
        context["csv_tables"] = list(selectors.CSV_TABLES)
        results = selectors.run_results(run)
        if not results["daily"]:
            context["empty_message"] = _no_traffic(list(run.tenants.all()), run.date_from, run.date_to)
        else:
            days = selectors.days_between(run.date_from, run.date_to)
            series = selectors.chart_series(results["daily"], results["by_type"], days)
            context.update(tables=results, charts=_charts(series, _labels(days)))
    return _page(request, "usage/run_detail.html", context, title=run_title(run), tab="reports")


def run_title(run: ReportRun) -> str:
    """A run's page title, what it covers: `Usage report #3: 2026-11-22 – 2026-11-27, all tenants`."""
    tenants = ", ".join(t.slug for t in run.tenants.all()) or "all tenants"
    return f"Usage report #{run.pk}: {run.date_from} – {run.date_to}, {tenants}"


# The job's steps (spark_reports.usage_report.STEPS) and the launcher's in staff words.
STEP_WORDS = {
    "starting": "Starting the report job",
    "starting engine": "Starting the Spark engine",
    "connecting": "Connecting to the Spark engine",
    "exporting": "Exporting new metering rows to the lake",
    "counting rows": "Counting the metering rows to read",
    "computing the report": "Computing the report",
    "writing the report": "Writing the report to the database",
}
# Every stage a run records (ReportRun.stages), in staff words.
STAGE_WORDS = {
    "queued": "Waiting for a worker",
    "claimed": "Starting the report job",
    **{step: words for step, words in STEP_WORDS.items() if step != "starting"},
    "publishing": "Publishing",
    "published": "Published",
}


def stage_list(run: ReportRun) -> list[dict]:
    """The run's stages in the order they began (two in one millisecond in their usual order), each
    in words with how long it lasted (the last, still going or `published`, without)."""
    order = list(STAGE_WORDS)
    times = sorted(
        ((at, name) for name, at in (run.stages or {}).items() if isinstance(at, int | float)),
        key=lambda item: (item[0], order.index(item[1]) if item[1] in order else len(order)),
    )
    return [
        {
            "stage": name,
            "words": STAGE_WORDS.get(name, name),
            "seconds": round(times[i + 1][0] - at, 2) if i + 1 < len(times) else None,
        }
        for i, (at, name) in enumerate(times)
    ]


def step_words(run: ReportRun) -> str:
    """What the run is doing now, in words: the progress section's headline."""
    if run.status == ReportRun.Status.QUEUED:
        return "Waiting for a worker"
    if run.cancel_requested_at is not None and not run.is_finished:
        return "Cancelling"
    step = (run.progress or {}).get("step") or "starting"
    return STEP_WORDS.get(step, step[:1].upper() + step[1:])


def _status(run: ReportRun) -> dict:
    """What the run page shows while a run works, as JSON for its script."""
    now = timezone.now()
    elapsed = None
    if run.started_at:
        elapsed = ((run.finished_at or now) - run.started_at).total_seconds()
    return {
        "id": run.pk,
        "status": run.status,
        "status_display": run.get_status_display(),
        "finished": run.is_finished,
        "progress": run.progress,
        "step_words": step_words(run),
        "stages": stage_list(run),
        "elapsed_s": None if elapsed is None else round(elapsed, 1),
        "started_at": utc_iso(run.started_at) if run.started_at else None,
        "finished_at": utc_iso(run.finished_at) if run.finished_at else None,
        "typical_s": selectors.typical_duration_s(),
        "cancel_requested": run.cancel_requested_at is not None,
        "error": run.error,
    }


@_operator_view("retrieve")
def run_status(request: HttpRequest, pk: int) -> JsonResponse:
    return JsonResponse(_status(get_object_or_404(ReportRun, pk=pk)))


@require_POST
@_operator_view("cancel")
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel a queued or running run, then back to its page."""
    run = get_object_or_404(ReportRun, pk=pk)
    try:
        services.report_run_cancel(run_id=run.pk)
        messages.info(request, f"Usage report #{run.pk}: cancel requested.")
    except services.ReportCancelError:
        messages.warning(request, f"Usage report #{run.pk} has already finished.")
    return redirect("usage:run-detail", pk=run.pk)


@require_POST
@_operator_view("request")
def dashboard_refresh(request: HttpRequest) -> HttpResponse:
    """Request a report over the dashboard's range (through today) and follow it on its page."""
    tenants = list(Tenant.objects.order_by("slug"))
    form = DashboardFilterForm(request.POST, tenants=tenants)
    if not form.is_valid():
        return redirect("usage:dashboard")
    selected = form.cleaned_data["tenant"]
    today = timezone.now().date()
    run = services.report_run_request(
        date_from=form.cleaned_data["first"],
        date_to=max(form.cleaned_data["last"], today),
        tenants=[selected] if selected else None,
        requested_by=request.user,
    )
    return redirect("usage:run-detail", pk=run.pk)


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


@_operator_view("csv")
def run_csv(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    run = get_object_or_404(ReportRun, pk=pk)
    return csv_response(run, request.GET.get("table", "daily"))
