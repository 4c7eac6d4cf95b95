"""`manage.py run_usage_report [--from D] [--to D] [--tenant SLUG ...]`: run a report now (make report)."""

from __future__ import annotations

from datetime import date, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apps.tenants.models import Tenant
from apps.usage import services
from apps.usage.models import ReportRun


class Command(BaseCommand):
    help = "Run the usage report Spark job in the foreground (default: the last 7 days, all tenants)."

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="date_from", type=date.fromisoformat)
        parser.add_argument("--to", dest="date_to", type=date.fromisoformat)
        parser.add_argument("--tenant", dest="tenants", action="append", default=[], help="tenant slug (repeatable)")

    def handle(self, *args, date_from=None, date_to=None, tenants=(), **options):
        date_to = date_to or timezone.now().date()
        date_from = date_from or date_to - timedelta(days=6)
        found = list(Tenant.objects.filter(slug__in=tenants))
        if len(found) != len(set(tenants)):
            raise CommandError(f"unknown tenant among {', '.join(tenants)}")
        try:
            run = services.report_run_request(date_from=date_from, date_to=date_to, tenants=found, enqueue=False)
        except services.ReportRequestError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"usage report #{run.pk}: {date_from}..{date_to}, running the Spark job")
        try:
            run = services.report_run_execute(run_id=run.pk)
        finally:
            services.report_job_stop()  # one run: the job process need not wait for another
        if run.status != ReportRun.Status.SUCCEEDED:
            self.stderr.write(run.log_tail)
            raise CommandError(f"usage report #{run.pk} failed")
        self.stdout.write(f"usage report #{run.pk} succeeded in {run.duration_s:.1f}s: {run.row_counts}")
