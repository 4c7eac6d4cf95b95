"""Base of the maintenance management commands: parse, run one job, print its one-line summary."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from apps.ops.jobs import JOBS, run_job
from apps.tenants.models import Tenant


class JobCommand(BaseCommand):
    job_name = ""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.help = f"Run the {cls.job_name} maintenance job once and print a one-line summary."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", help="only this tenant (slug); default every tenant")
        parser.add_argument("--dry-run", action="store_true", help="count what would go, delete nothing")

    def handle(self, *args, tenant=None, dry_run=False, **options):
        assert self.job_name in JOBS
        tenant_id = None
        if tenant:
            tenant_id = Tenant.objects.filter(slug=tenant).values_list("pk", flat=True).first()
            if tenant_id is None:
                raise CommandError(f"no tenant with slug {tenant!r}")
        self.stdout.write(run_job(self.job_name, dry_run=dry_run, tenant_id=tenant_id))
