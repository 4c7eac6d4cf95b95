"""Every dashboard and report page in its empty states and with bad query parameters: an exact
status and an exact sentence, never a 500, never zeros drawn as data (issue 13, item 3)."""

from __future__ import annotations

import csv
import io
import re
from datetime import date, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.tenants.services import api_token_issue
from apps.usage import selectors
from apps.usage.models import ReportCommandType, ReportDaily, ReportRun

pytestmark = pytest.mark.django_db

NOV_1, NOV_7 = date(2026, 11, 1), date(2026, 11, 7)
WEEK = "date_from=2026-11-01&date_to=2026-11-07"
SVG = '<svg class="usage-chart"'


def published_run(first: date, last: date, *, tenants=(), rows=()) -> ReportRun:
    """A succeeded run over [first, last] for `tenants` (none: all) with (tenant, day, commands, errors) rows."""
    run = ReportRun.objects.create(
        date_from=first,
        date_to=last,
        status=ReportRun.Status.SUCCEEDED,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        row_counts={"daily": len(rows)},
    )
    run.tenants.set(tenants)
    for tenant, day, commands, errors in rows:
        ReportDaily.objects.create(run=run, tenant=tenant, day=day, commands=commands, errors=errors, bytes_in=100)
        ReportCommandType.objects.create(
            run=run, tenant=tenant, day=day, command_type="QUERY_EVENTS", commands=commands, errors=errors
        )
    return run


def empty_message(html: str) -> str:
    """The text of the page's empty-state paragraph (links included as their text)."""
    found = re.search(r'<p class="empty" id="usage-empty">(.*?)</p>', html, re.S)
    assert found, "no empty-state paragraph"
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def filter_errors(html: str) -> list[str]:
    block = re.search(r'<ul class="messages" id="filter-errors">(.*?)</ul>', html, re.S)
    assert block, "no filter errors"
    return re.findall(r'<li class="error">(.*?)</li>', block.group(1))


@pytest.fixture
def staff(client, staff_user):
    client.force_login(staff_user)
    return client


# --- the dashboard ---------------------------------------------------------------------------


def test_a_fresh_deployment_dashboard_says_no_report_has_been_published(staff, tenant_a):
    resp = staff.get("/dashboard/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert empty_message(html) == "No usage report has been published yet. Generate one."
    assert SVG not in html
    today = timezone.now().date()
    # No report yet: the last 7 days (issue 18: not 30 days of nothing).
    assert f"from the latest published reports, {today - timedelta(days=6)} – {today} (UTC days)" in html
    # No tiles of "no data" beside the live table: one sentence says where totals come from.
    assert resp.context["totals"] == dict.fromkeys(selectors.SUM_FIELDS)
    assert 'id="usage-totals"' not in html and "no data" not in html and "value bad" not in html
    assert 'id="usage-totals-none"' in html and "none has been published yet" in html


def test_a_fresh_deployment_without_any_tenant_renders_the_same_message(staff):
    resp = staff.get("/dashboard/?days=7")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert empty_message(html) == "No usage report has been published yet. Generate one."
    assert "No tenants." in html


def test_reports_that_do_not_cover_the_range_say_so(staff, tenant_a):
    published_run(date(2026, 1, 1), date(2026, 1, 7), rows=[(tenant_a, date(2026, 1, 2), 5, 0)])
    resp = staff.get(f"/dashboard/?{WEEK}")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert empty_message(html) == "No usage report covers 2026-11-01 – 2026-11-07 yet. Generate one."
    assert SVG not in html


def test_a_report_for_another_tenant_does_not_cover_this_one(staff, tenant_a, tenant_b):
    published_run(NOV_1, NOV_7, tenants=[tenant_a], rows=[(tenant_a, NOV_1, 5, 0)])
    resp = staff.get(f"/dashboard/?tenant={tenant_b.slug}&{WEEK}")
    assert resp.status_code == 200
    assert empty_message(resp.content.decode()) == "No usage report covers 2026-11-01 – 2026-11-07 yet. Generate one."


def test_a_tenant_without_traffic_says_so_instead_of_drawing_zeros(staff, tenant_a, tenant_b):
    published_run(NOV_1, NOV_7, rows=[(tenant_a, NOV_1, 5, 1)])
    resp = staff.get(f"/dashboard/?tenant={tenant_b.slug}&{WEEK}")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert empty_message(html) == "No traffic for tenant-b in 2026-11-01 – 2026-11-07."
    assert SVG not in html and resp.context["totals"]["commands"] is None
    # The same range for tenant A has data: nine charts, totals from the one row.
    other = staff.get(f"/dashboard/?tenant={tenant_a.slug}&{WEEK}")
    assert other.status_code == 200 and other.content.decode().count(SVG) == 9
    assert other.context["empty_message"] is None and other.context["totals"]["commands"] == 5


def test_a_covered_range_without_any_traffic_names_no_tenant(staff, tenant_a):
    published_run(NOV_1, NOV_7)
    resp = staff.get(f"/dashboard/?{WEEK}")
    assert resp.status_code == 200
    assert empty_message(resp.content.decode()) == "No traffic for any tenant in 2026-11-01 – 2026-11-07."


def test_no_traffic_in_a_partly_covered_range_counts_the_uncovered_days(staff, tenant_a):
    published_run(NOV_1, date(2026, 11, 3))
    resp = staff.get(f"/dashboard/?tenant={tenant_a.slug}&{WEEK}")
    assert resp.status_code == 200
    assert empty_message(resp.content.decode()) == (
        "No traffic for tenant-a in 2026-11-01 – 2026-11-07. "
        "No published report covers 4 of these 7 days. Generate one."
    )


def test_days_no_report_covers_are_gaps_not_zeros(staff, tenant_a):
    published_run(NOV_1, date(2026, 11, 3), rows=[(tenant_a, NOV_1, 10, 2), (tenant_a, date(2026, 11, 2), 4, 0)])
    resp = staff.get(f"/dashboard/?{WEEK}")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert html.count(SVG) == 9
    assert (
        '<p class="hint" id="usage-gaps">No published report covers 4 of these 7 days; the charts leave them blank'
        in html
    )
    assert resp.context["totals"]["commands"] == 14 and resp.context["totals"]["errors"] == 2
    # One bar per day with commands in "succeeded and failed": two days succeeded, one day failed.
    errors_chart = next(c for c in resp.context["charts"] if c["id"] == "errors")["svg"]
    assert errors_chart.count('class="bar"') == 3


def test_a_one_day_range_draws_one_day(staff, tenant_a):
    published_run(NOV_1, NOV_1, rows=[(tenant_a, NOV_1, 3, 0)])
    resp = staff.get("/dashboard/?date_from=2026-11-01&date_to=2026-11-01")
    assert resp.status_code == 200 and resp.context["ndays"] == 1
    assert resp.content.decode().count(SVG) == 9 and resp.context["totals"]["commands"] == 3


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("days=abc", "Days must be one of 7, 14, 30, 90."),
        ("days=0", "Days must be one of 7, 14, 30, 90."),
        ("days=-7", "Days must be one of 7, 14, 30, 90."),
        ("tenant=nope", "Unknown tenant: nope."),
        ("tenant=%3Cb%3Ex", "Unknown tenant: &lt;b&gt;x."),
        ("date_from=2026-13-01&date_to=2026-11-07", "date_from is not a date (YYYY-MM-DD)."),
        ("date_from=2026-11-01&date_to=yesterday", "date_to is not a date (YYYY-MM-DD)."),
        ("date_from=2026-11-01", "Give both date_from and date_to, or neither."),
        ("date_to=2026-11-01", "Give both date_from and date_to, or neither."),
        (
            "date_from=2026-11-07&date_to=2026-11-01",
            "The range 2026-11-07 – 2026-11-01 has no days: the end date is before the start date.",
        ),
        ("date_from=2025-01-01&date_to=2026-11-01", "A range covers at most 366 days."),
    ],
)
def test_bad_filters_get_a_400_page_that_says_what_is_wrong(staff, tenant_a, query, message):
    published_run(NOV_1, NOV_7, rows=[(tenant_a, NOV_1, 5, 0)])
    resp = staff.get(f"/dashboard/?{query}")
    assert resp.status_code == 400
    html = resp.content.decode()
    assert filter_errors(html) == [message]
    assert SVG not in html and 'id="usage-empty"' not in html


def test_an_unknown_tenant_and_bad_days_are_both_reported(staff, tenant_a):
    resp = staff.get("/dashboard/?tenant=nope&days=5")
    assert resp.status_code == 400
    assert filter_errors(resp.content.decode()) == ["Unknown tenant: nope.", "Days must be one of 7, 14, 30, 90."]


# --- the series behind the charts ------------------------------------------------------------


def test_chart_series_are_aligned_over_the_requested_days_whatever_the_rows():
    days = selectors.days_between(NOV_1, date(2026, 11, 3))
    series = selectors.chart_series([], [], days)
    assert set(series["sums"]) == set(selectors.SUM_FIELDS)
    assert all(values == [0, 0, 0] for values in series["sums"].values())
    assert series["succeeded"] == [0, 0, 0] and series["error_rate"] == [None, None, None]
    assert series["by_type"] == {}
    gaps = selectors.chart_series([], [], days, covered={NOV_1})
    assert gaps["sums"]["commands"] == [0, None, None] and gaps["succeeded"] == [0, None, None]
    assert selectors.chart_series([], [], [])["sums"]["errors"] == []


# --- the report pages ------------------------------------------------------------------------


def test_the_run_list_of_a_fresh_deployment_says_no_report_has_run(staff):
    resp = staff.get("/dashboard/reports/")
    assert resp.status_code == 200
    assert '<tr><td colspan="8">No report has run yet.</td></tr>' in resp.content.decode()


def test_a_published_run_without_traffic_says_so_instead_of_drawing_zeros(staff, tenant_b):
    run = published_run(NOV_1, NOV_7, tenants=[tenant_b])
    resp = staff.get(f"/dashboard/reports/{run.pk}/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert empty_message(html) == "No traffic for tenant-b in 2026-11-01 – 2026-11-07."
    assert SVG not in html and 'id="daily-table"' not in html
    csv_resp = staff.get(f"/dashboard/reports/{run.pk}/csv?table=daily")
    rows = list(csv.reader(io.StringIO(b"".join(csv_resp.streaming_content).decode())))
    assert csv_resp.status_code == 200 and len(rows) == 1 and rows[0][:3] == ["tenant", "day", "commands"]


def test_an_all_tenant_run_without_traffic_names_no_tenant(staff):
    run = published_run(NOV_1, NOV_1)
    resp = staff.get(f"/dashboard/reports/{run.pk}/")
    assert resp.status_code == 200
    assert empty_message(resp.content.decode()) == "No traffic for any tenant in 2026-11-01 – 2026-11-01."


def test_queued_and_failed_runs_show_no_empty_state(staff):
    queued = ReportRun.objects.create(date_from=NOV_1, date_to=NOV_7)
    failed = ReportRun.objects.create(
        date_from=NOV_1, date_to=NOV_7, status=ReportRun.Status.FAILED, log_tail="job exited with 1"
    )
    for run in (queued, failed):
        html = staff.get(f"/dashboard/reports/{run.pk}/").content.decode()
        assert 'id="usage-empty"' not in html and SVG not in html
    assert (
        '<pre class="log" id="log-tail">job exited with 1</pre>'
        in staff.get(f"/dashboard/reports/{failed.pk}/").content.decode()
    )


@pytest.mark.parametrize("suffix", ["", "status", "csv"])
@pytest.mark.parametrize("pk", ["424242", "99999999999999999999"])
def test_an_unknown_run_is_a_404_not_a_500(staff, pk, suffix):
    assert staff.get(f"/dashboard/reports/{pk}/{suffix}").status_code == 404


# --- the operator API ------------------------------------------------------------------------


@pytest.fixture
def api(staff_user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=staff_user).key}")
    return c


def test_the_api_of_a_fresh_deployment_lists_no_runs(api):
    resp = api.get("/api/v1/usage/reports/")
    assert resp.status_code == 200
    assert resp.json() == {"count": 0, "next": None, "previous": None, "results": []}


def test_the_api_gives_a_run_without_traffic_an_empty_daily_list(api, tenant_b):
    run = published_run(NOV_1, NOV_7, tenants=[tenant_b])
    resp = api.get(f"/api/v1/usage/reports/{run.pk}/")
    assert resp.status_code == 200
    assert resp.json()["daily"] == [] and resp.json()["tenants"] == ["tenant-b"]


@pytest.mark.parametrize("pk", ["424242", "99999999999999999999"])
def test_the_api_answers_an_unknown_run_with_a_404(api, pk):
    resp = api.get(f"/api/v1/usage/reports/{pk}/")
    assert resp.status_code == 404
    assert resp.json() == {"detail": "No ReportRun matches the given query."}
    assert api.get(f"/api/v1/usage/reports/{pk}/csv").status_code == 404


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"date_from": "2026-11-07", "date_to": "2026-11-01"}, {"non_field_errors": ["date_to is before date_from"]}),
        (
            {"date_from": "2026-13-01", "date_to": "2026-11-01"},
            {"date_from": ["Date has wrong format. Use one of these formats instead: YYYY-MM-DD."]},
        ),
        ({"date_to": "2026-11-01"}, {"date_from": ["This field is required."]}),
    ],
)
def test_the_api_refuses_a_bad_range_with_a_400(api, body, errors):
    resp = api.post("/api/v1/usage/reports/", body, format="json")
    assert resp.status_code == 400 and resp.json() == errors
    assert ReportRun.objects.count() == 0


@pytest.mark.parametrize(
    ("date_from", "date_to", "message"),
    [
        (
            "2026-11-07",
            "2026-11-01",
            "The range 2026-11-07 – 2026-11-01 has no days: the end date is before the start date.",
        ),
        ("2025-01-01", "2026-11-01", "A range covers at most 366 days."),
    ],
)
def test_the_generate_form_refuses_a_range_with_the_dashboards_words(staff, date_from, date_to, message):
    resp = staff.post("/admin/usage/reportrun/generate/", {"date_from": date_from, "date_to": date_to})
    assert resp.status_code == 200
    assert resp.context["form"].non_field_errors() == [message]
    assert ReportRun.objects.count() == 0


@pytest.mark.clock("2026-11-20T12:00:00Z")  # ?days=30 is 2026-10-22 – 2026-11-20: the report's 7 days and 23 more
def test_without_a_range_the_dashboard_shows_the_days_of_the_latest_published_report(staff, tenant_a):
    now = timezone.now()
    run = ReportRun.objects.create(
        date_from=date(2026, 11, 1),
        date_to=date(2026, 11, 7),
        status=ReportRun.Status.SUCCEEDED,
        started_at=now,
        finished_at=now,
        row_counts={"daily": 1},
    )
    ReportDaily.objects.create(run=run, tenant=tenant_a, day=date(2026, 11, 2), commands=12, errors=0)
    html = staff.get("/dashboard/").content.decode()
    assert "from the latest published reports, 2026-11-01 – 2026-11-07 (UTC days)" in html
    assert html.count(SVG) == 9 and 'id="usage-gaps"' not in html
    assert '<option value="" selected>latest report (2026-11-01 – 2026-11-07)</option>' in html
    # Zero errors are not drawn as bad news; "no data" is not drawn as zero.
    assert '<div class="value">0</div>' in html and "value bad" not in html
    assert "nothing is waiting in this process's buffer" in html
    html = staff.get("/dashboard/?days=30").content.decode()
    assert "No published report covers 23 of these 30 days" in html
