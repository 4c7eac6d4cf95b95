"""ASGI entry point: HTTP through Django; /ws (Decentrl) and /didcomm/ws (DIDComm) through Channels."""

import json
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
# Build the Django app before importing anything that touches models (STYLE §10).
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from apps.decentrl.routing import websocket_urlpatterns as decentrl_ws  # noqa: E402
from apps.didcomm.consumers import CLOSE_UNKNOWN_MEDIATOR  # noqa: E402
from apps.didcomm.problems import problem_message  # noqa: E402
from apps.didcomm.protocols import Code  # noqa: E402
from apps.didcomm.routing import websocket_urlpatterns as didcomm_ws  # noqa: E402
from apps.wire.errors import ErrorCode, error_body  # noqa: E402
from mediator_project.errors import under_didcomm  # noqa: E402


async def no_route(scope, receive, send) -> None:
    """A WebSocket upgrade to a path no route serves (`/`, `/nonexistent`, or one nginx normalised
    onto /ws but passed on raw: `//ws`, `/x/../ws`). Refused as /ws and /didcomm/ws refuse a host
    no mediator serves (docs/realtime.md, close codes): accepted, one frame saying why, close 4404;
    the DIDComm problem report under /didcomm, the protocol's ERROR elsewhere. Without this route
    URLRouter raises "No route found", which Daphne logs with a traceback and answers 500."""
    if (await receive())["type"] != "websocket.connect":
        return  # the client left before the handshake
    if under_didcomm(scope.get("path", "")):
        refusal = problem_message(Code.UNKNOWN_MEDIATOR, "no WebSocket endpoint at this path", pthid=None)
    else:
        refusal = error_body(ErrorCode.UNKNOWN_MEDIATOR)
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": json.dumps(refusal, separators=(",", ":"))})
    await send({"type": "websocket.close", "code": CLOSE_UNKNOWN_MEDIATOR})


# No AuthMiddlewareStack: Decentrl's /ws authenticates with its signed AUTHENTICATE frame,
# DIDComm's /didcomm/ws with each message's authcrypt sender key. The catch-all comes last.
# django-stubs types re_path's target as a view; Channels routes ASGI applications through it.
websocket_urlpatterns = [*decentrl_ws, *didcomm_ws, re_path(r"", no_route)]  # type: ignore[arg-type]
application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": URLRouter(websocket_urlpatterns)})
