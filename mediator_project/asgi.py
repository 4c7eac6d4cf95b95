"""ASGI entry point: HTTP through Django, /ws through Channels (when the realtime app is present)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
# Build the Django app before importing anything that touches models (STYLE §10).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

routes = {"http": django_asgi_app}
try:
    from apps.decentrl.routing import websocket_application  # noqa: E402
except ImportError:  # the realtime app is optional until issue 3 lands
    websocket_application = None
if websocket_application is not None:
    routes["websocket"] = websocket_application
application = ProtocolTypeRouter(routes)
