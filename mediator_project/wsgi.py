"""WSGI entry point (HTTP only): Django's handler, with POST / on a lean chain (apps/decentrl/wsgi.py)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
django.setup(set_prefix=False)

from apps.decentrl.wsgi import ProtocolWSGIApplication  # noqa: E402 - needs the apps loaded

application = ProtocolWSGIApplication()
