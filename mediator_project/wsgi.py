"""WSGI entry point (HTTP only), served by Granian in production and by `make run`'s Daphne
(mediator_project/asgi.py): Django's handler, with POST / and POST /didcomm on a lean chain
(apps/decentrl/wsgi.py; the DIDComm reply is apps/didcomm/dispatch.py's)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
django.setup(set_prefix=False)

from apps.decentrl.wsgi import CommandEntry, ProtocolWSGIApplication  # noqa: E402 - needs the apps loaded
from apps.didcomm.dispatch import http_reply, http_unavailable  # noqa: E402

application = ProtocolWSGIApplication({"/didcomm": CommandEntry(http_reply, http_unavailable)})
