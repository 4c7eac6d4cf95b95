"""Create a console operator (a superuser), from a terminal or from a script, never silently not.

Django's `createsuperuser` without a terminal prints "Superuser creation skipped" and exits 0, and
with `--noinput` but no password it creates a user who cannot log in. This command, which
`make operator` runs, asks in a terminal as `createsuperuser` does; without one it takes the name
and the password from DJANGO_SUPERUSER_USERNAME (or --username) and DJANGO_SUPERUSER_PASSWORD, and
fails with a non-zero exit when either is missing (docs/operators.md#the-first-operator). The
email address is optional both ways (Enter skips its prompt; DJANGO_SUPERUSER_EMAIL or --email
gives one to a script), where `createsuperuser --noinput` refuses to run without one.
"""

from __future__ import annotations

import os

from django.contrib.auth.management.commands import createsuperuser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

NO_TERMINAL = (
    "No terminal to ask for a name and a password. For a script, set DJANGO_SUPERUSER_USERNAME "
    "(or pass --username / OPERATOR=name to make) and DJANGO_SUPERUSER_PASSWORD, "
    "then run this again (docs/operators.md)."
)


class Command(createsuperuser.Command):
    help = (
        "Create a console operator (a superuser). In a terminal it asks; in a script it reads "
        "DJANGO_SUPERUSER_USERNAME and DJANGO_SUPERUSER_PASSWORD (DJANGO_SUPERUSER_EMAIL optional), "
        "and fails when they are missing."
    )

    def handle(self, *args, **options):
        terminal = hasattr(self.stdin, "isatty") and self.stdin.isatty()
        if options["interactive"] and terminal:
            return super().handle(*args, **options)
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        username = options[self.UserModel.USERNAME_FIELD] or os.environ.get("DJANGO_SUPERUSER_USERNAME")
        if not password or not username:
            missing = [
                name
                for name, value in (("DJANGO_SUPERUSER_USERNAME", username), ("DJANGO_SUPERUSER_PASSWORD", password))
                if not value
            ]
            raise CommandError(f"{NO_TERMINAL} Missing: {', '.join(missing)}.")
        try:
            validate_password(password, self.UserModel(**{self.UserModel.USERNAME_FIELD: username}))
        except ValidationError as exc:
            raise CommandError("DJANGO_SUPERUSER_PASSWORD: " + " ".join(exc.messages)) from exc
        # A required field the model lets be blank (the email) is blank unless given: createsuperuser
        # --noinput skips such a field only when it is given as "".
        blank = {
            name: options[name] or os.environ.get(f"DJANGO_SUPERUSER_{name.upper()}") or ""
            for name in self.UserModel.REQUIRED_FIELDS
            if self.UserModel._meta.get_field(name).blank
        }
        return super().handle(
            *args, **{**options, **blank, "interactive": False, self.UserModel.USERNAME_FIELD: username}
        )
