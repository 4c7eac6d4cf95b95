"""Create (or re-port) the development default tenant: did:web:localhost%3A<PORT>."""

from django.conf import settings
from django.core.management.base import BaseCommand

from apps.tenants.services import tenant_ensure_default


class Command(BaseCommand):
    help = "Ensure the default tenant exists for localhost:<port> with fresh keys."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=settings.PORT)
        parser.add_argument("--host", default="localhost")

    def handle(self, *args, port, host, **options):
        tenant, created = tenant_ensure_default(port=port, host=host)
        verb = "created" if created else "ready"
        self.stdout.write(f"default tenant {verb}: {tenant.did} at {tenant.public_url}")
