"""The usage pages in headless Chromium on a real Daphne at 1440 px and 390 px (issue 17 §3), over a
published run written straight into the result tables (no Spark here; test_browser_report_run.py
drives the real job): charts and tables never overlap, cut or overflow; every command type with
traffic is named; a failed run says what failed in words with the technical tail folded away; the
admin's page of a run is the run page; the dashboard says how fresh it is and offers to refresh."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.utils import timezone

from apps.usage.models import ReportCommandType, ReportDaily, ReportErrorCode, ReportRun, ReportTopIdentity
from tests.support.browser import ARTIFACTS, PASSWORD, admin_page, usage_staff
from tests.usage.layout import LAYOUT_PROBLEMS

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

WIDTHS = [(1440, 1000), (390, 844)]
# Every type a mediator's traffic carries, the longest DECENTRL and DIDComm names included.
TYPES = [
    ("decentrl", "TWO_WAY_PRIVATE", 900),
    ("decentrl", "QUERY_EVENTS", 500),
    ("decentrl", "SAVE_EVENTS", 300),
    ("decentrl", "QUERY_PENDING_EVENTS", 200),
    ("decentrl", "ACKNOWLEDGE_EVENTS", 150),
    ("decentrl", "REQUEST_COMMUNICATION_CONTRACT", 90),
    ("decentrl", "ACCEPT_COMMUNICATION_CONTRACT", 80),
    ("decentrl", "QUERY_PENDING_CONTRACT_REQUESTS", 60),
    ("decentrl", "REGISTER_IDENTITY", 40),
    ("decentrl", "PUBLISH_PUBLIC_EVENT", 30),
    ("decentrl", "AUTHENTICATE", 25),
    ("decentrl", "(unparsed)", 5),
    ("didcomm", "routing/2.0/forward", 400),
    ("didcomm", "messagepickup/3.0/delivery-request", 120),
    ("didcomm", "messagepickup/3.0/messages-received", 110),
    ("didcomm", "coordinate-mediation/3.0/mediate-request", 3),
    ("didcomm", "coordinate-mediation/3.0/recipient-update", 2),
]
CODES = [
    "INVALID_SIGNATURE",
    "COMMUNICATION_CONTRACT_NOT_FOUND",
    "SENDER_SIGNING_KEY_NOT_FOUND",
    "RECIPIENT_QUEUE_FULL",
]


@pytest.fixture
def daphne_env(tmp_path):
    # A queue no worker consumes: a requested run stays queued (and can be cancelled at once).
    return {"USAGE_REPORT_QUEUE": f"nobody-{tmp_path.name}"}


@pytest.fixture
def stella(django_user_model):
    return usage_staff(django_user_model, "add_reportrun", "view_reportrun")


def published_run(tenants, first: date, days: int) -> ReportRun:
    """A succeeded run over `days` days from `first` with every table filled as the job would."""
    now = timezone.now()
    run = ReportRun.objects.create(
        date_from=first,
        date_to=first + timedelta(days=days - 1),
        status=ReportRun.Status.SUCCEEDED,
        started_at=now - timedelta(minutes=42, seconds=8),
        finished_at=now - timedelta(minutes=42),
        row_counts={"daily": days * len(tenants), "by_type": 0, "by_code": 0, "top": 0},
    )
    for n, tenant in enumerate(tenants):
        for d in range(days):
            day = first + timedelta(days=d)
            commands = sum(c for *_, c in TYPES) * (n + 1) + 37 * d
            errors = 11 * (d + 1)
            ReportDaily.objects.create(
                run=run,
                tenant=tenant,
                day=day,
                commands=commands,
                errors=errors,
                error_rate=errors / commands,
                bytes_in=commands * 1400,
                bytes_out=commands * 600,
                latency_p50_ms=3.2 + d,
                latency_p95_ms=41.0 + d,
                active_identities=1234 + d,
                new_registrations=12,
                pending_created=800 + d,
                pending_delivered=790 + d,
                delivery_p50_ms=1500.0,
                delivery_p95_ms=3_600_000.0,
                stored_events=2400,
                stored_bytes=9_000_000,
            )
            ReportCommandType.objects.bulk_create(
                ReportCommandType(
                    run=run,
                    tenant=tenant,
                    day=day,
                    protocol=p,
                    command_type=t,
                    commands=c * (n + 1) + d,
                    errors=c // 20,
                )
                for p, t, c in TYPES
            )
            ReportErrorCode.objects.bulk_create(
                ReportErrorCode(run=run, tenant=tenant, day=day, code=code, commands=5 + i, rate=(5 + i) / commands)
                for i, code in enumerate(CODES)
            )
            ReportTopIdentity.objects.bulk_create(
                ReportTopIdentity(
                    run=run,
                    tenant=tenant,
                    day=day,
                    rank=r + 1,
                    sender_did=f"did:decentrl:{tenant.slug}-sender-with-a-long-name-{r}",
                    commands=500 - r,
                    bytes_in=700_000,
                    bytes_out=300_000,
                )
                for r in range(3)
            )
    return run


def chart_name(protocol: str, command_type: str) -> str:
    return command_type if protocol == "decentrl" else f"{protocol}: {command_type}"


@pytest.mark.parametrize("days", [2, 14])
def test_a_finished_report_and_the_dashboard_fit_at_1440_and_390_px(daphne, stella, tenant_a, tenant_b, days):
    first = timezone.now().date() - timedelta(days=days)
    run = published_run([tenant_a, tenant_b], first, days)
    for width, height in WIDTHS:
        with admin_page(daphne.url, "stella", PASSWORD, width=width, height=height) as page:
            page.goto(f"{daphne.url}/dashboard/reports/{run.pk}/")
            names = page.locator("#chart-commands-by-type ul.chart-legend li").all_text_contents()
            # Every type with traffic by name, busiest first: TWO_WAY_PRIVATE is never "other".
            assert names == [chart_name(p, t) for p, t, _ in sorted(TYPES, key=lambda x: -x[2])]
            page.screenshot(path=str(ARTIFACTS / f"usage-layout-run-{days}d-{width}.png"), full_page=True)
            page.locator("#chart-commands-by-type").screenshot(
                path=str(ARTIFACTS / f"usage-layout-chart-{days}d-{width}.png")
            )
            problems = page.evaluate(LAYOUT_PROBLEMS, [width >= 1440])
            assert problems == [], "\n".join(problems)

            for path in ("/dashboard/reports/", "/admin/usage/reportrun/generate/"):
                page.goto(f"{daphne.url}{path}")
                problems = page.evaluate(LAYOUT_PROBLEMS, [width >= 1440])
                assert problems == [], f"{path}: " + "\n".join(problems)

            page.goto(f"{daphne.url}/dashboard/?date_from={run.date_from}&date_to={run.date_to}")
            assert page.locator("svg.usage-chart").count() == 9
            page.screenshot(path=str(ARTIFACTS / f"usage-layout-dashboard-{days}d-{width}.png"), full_page=True)
            problems = page.evaluate(LAYOUT_PROBLEMS, [width >= 1440])
            assert problems == [], "\n".join(problems)


def test_a_failed_run_says_what_failed_in_words_with_the_technical_tail_folded(daphne, stella, tenant_a):
    tail = "\n".join(
        [
            "py4j.protocol.Py4JJavaError: An error occurred while calling o123.save."
            + " at org.apache.spark.sql.execution.datasources.jdbc.JdbcUtils$.savePartition(JdbcUtils.scala:750)" * 3,
            *[f"\tat org.apache.spark.scheduler.Task.run(Task.scala:{i})" for i in range(60)],
            "org.postgresql.util.PSQLException: Connection to 127.0.0.1:5432 refused.",
            "job exited with 1",
        ]
    )
    now = timezone.now()
    run = ReportRun.objects.create(
        date_from=now.date(),
        date_to=now.date(),
        status=ReportRun.Status.FAILED,
        started_at=now - timedelta(seconds=12),
        finished_at=now,
        error="Spark could not read the mediator's database.",
        log_tail=tail,
        row_counts={"daily": 3, "by_type": 9},
    )
    for width, height in WIDTHS:
        with admin_page(daphne.url, "stella", PASSWORD, width=width, height=height) as page:
            # The admin's own page of a run is this page (no second page with raw JSON).
            page.goto(f"{daphne.url}/admin/usage/reportrun/{run.pk}/change/")
            assert page.url == f"{daphne.url}/dashboard/reports/{run.pk}/"
            assert page.inner_text("#run-status") == "Failed"
            assert page.inner_text("#run-error strong") == "Spark could not read the mediator's database."
            body = page.inner_text("div.usage")
            assert '{"daily"' not in body and "row_counts" not in body
            log = page.locator("#log-tail")
            assert not log.is_visible()  # folded away under "Technical details"
            assert "PSQLException" not in body
            page.screenshot(path=str(ARTIFACTS / f"usage-run-failed-{width}.png"), full_page=True)
            problems = page.evaluate(LAYOUT_PROBLEMS, [width >= 1440])
            page.click("#run-error summary")
            assert log.is_visible() and "PSQLException: Connection to 127.0.0.1:5432 refused." in log.inner_text()
            # The long lines scroll inside the log's own box, never the page.
            problems += page.evaluate(LAYOUT_PROBLEMS, [width >= 1440])
            assert problems == [], "\n".join(problems)


def test_the_dashboard_says_how_fresh_it_is_and_offers_to_refresh_at_390_px(daphne, stella, tenant_a, tenant_b):
    run = published_run([tenant_a, tenant_b], timezone.now().date() - timedelta(days=7), 7)
    for width, height in WIDTHS:
        with admin_page(daphne.url, "stella", PASSWORD, width=width, height=height) as page:
            page.goto(f"{daphne.url}/dashboard/")
            fresh = page.locator("#freshness")
            assert fresh.inner_text().startswith(
                f"Numbers as of the report that finished {run.finished_at:%Y-%m-%dT%H:%M:%SZ} (42\xa0minutes ago)."
            )
            # The offer sits in the freshness line (a form inside a <p> would be pushed out of it),
            # and the time of the report is never broken across lines.
            button = page.locator("#freshness #refresh-report")
            # One line: the boxes of its text (a <time> of two halves) all share one top.
            lines = page.locator("#freshness .when").evaluate(
                "e => { const r = document.createRange(); r.selectNodeContents(e);"
                " return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size; }"
            )
            assert lines == 1
            assert button.is_visible() and button.inner_text().startswith("Refresh: report ")
            box, viewport = button.bounding_box(), page.viewport_size
            assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"]
            problems = page.evaluate(LAYOUT_PROBLEMS, [width >= 1440])
            assert problems == [], "\n".join(problems)
            if width == 390:
                page.screenshot(path=str(ARTIFACTS / "usage-dashboard-fresh-390.png"))
                button.click()
                page.wait_for_url(f"{daphne.url}/dashboard/reports/*/")
                # No worker takes this queue: the run waits, and Cancel ends it at once.
                assert page.inner_text("#progress-step") == "Waiting for a worker"
                page.click("#cancel-run")
                page.click("#confirm-cancel")
                page.wait_for_selector("#run-status:text-is('Cancelled')")
    queued = ReportRun.objects.exclude(pk=run.pk).get()
    assert queued.status == ReportRun.Status.CANCELLED and queued.requested_by == stella
