"""`manage.py prune_metering`: drop exported metering rows past USAGE_METERING_KEEP_DAYS, rows past
each tenant's retention and the lake's days past USAGE_LAKE_RETENTION_DAYS (also a Celery task)."""

from django.core.management.base import BaseCommand

from apps.usage import services


class Command(BaseCommand):
    help = (
        "Delete exported command metering rows older than USAGE_METERING_KEEP_DAYS, rows older than each"
        " tenant's metering_retention_days, and the metering lake's days older than USAGE_LAKE_RETENTION_DAYS."
    )

    def handle(self, *args, **options):
        self.stdout.write(services.metering_prune().summary())
