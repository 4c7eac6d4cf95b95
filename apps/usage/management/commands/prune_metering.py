"""`manage.py prune_metering`: drop metering rows past each tenant's retention (also a Celery task)."""

from django.core.management.base import BaseCommand

from apps.usage import services


class Command(BaseCommand):
    help = "Delete command metering rows older than each tenant's metering_retention_days."

    def handle(self, *args, **options):
        self.stdout.write(services.metering_prune().summary())
