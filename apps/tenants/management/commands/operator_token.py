"""Print (creating if needed) the operator API token of a staff user: Authorization: Token <key>."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print the /api/v1/ token of a staff user (created on first use); --rotate replaces it."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="delete the old token and issue a new one")

    def handle(self, *args, username, rotate, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None or not user.is_staff or not user.is_active:
            raise CommandError(f"{username!r} is not an active staff user")
        if rotate:
            Token.objects.filter(user=user).delete()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
