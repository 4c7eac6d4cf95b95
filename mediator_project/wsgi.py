"""WSGI entry point (HTTP only), served by Granian in production and by `make run`'s Daphne
(mediator_project/asgi.py): the production entry of both protocols, `POST /` and `POST /didcomm`
on their lean chain, everything else on Django's handler (mediator_project/entry.py)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
django.setup(set_prefix=False)

from mediator_project.entry import protocol_application  # noqa: E402 - needs the apps loaded

application = protocol_application()
