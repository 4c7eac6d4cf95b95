"""ASGI entry point: HTTP through Django; /ws (Decentrl) and /didcomm/ws (DIDComm) through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
# Build the Django app before importing anything that touches models (STYLE §10).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from apps.decentrl.routing import websocket_urlpatterns as decentrl_ws  # noqa: E402
from apps.didcomm.routing import websocket_urlpatterns as didcomm_ws  # noqa: E402

# No AuthMiddlewareStack: Decentrl's /ws authenticates with its signed AUTHENTICATE frame,
# DIDComm's /didcomm/ws with each message's authcrypt sender key.
application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": URLRouter([*decentrl_ws, *didcomm_ws])})
