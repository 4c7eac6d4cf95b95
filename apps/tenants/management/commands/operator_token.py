"""Issue the operator API token of a staff user and print its key once: Authorization: Token <key>."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.tenants.models import ApiToken
from apps.tenants.services import api_token_issue
from apps.wire.display import utc_iso


class Command(BaseCommand):
    help = (
        "Issue a staff user's /api/v1/ token and print its key, once (only a digest is stored); "
        "--rotate replaces the user's tokens."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="delete the user's tokens and issue a new one")

    def handle(self, *args, username, rotate, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None or not user.is_staff or not user.is_active:
            raise CommandError(f"{username!r} is not an active staff user")
        existing = ApiToken.objects.filter(user=user).first()
        if existing is not None and not rotate:
            raise CommandError(
                f"{username} already has a token ({existing.prefix}…, created {utc_iso(existing.created_at)}); "
                "its key was shown once, when it was issued. --rotate replaces it."
            )
        self.stdout.write(api_token_issue(user=user, replace=rotate).key)
