"""`/ws` routing, mounted by mediator_project/asgi.py."""

from __future__ import annotations

from channels.routing import URLRouter
from django.urls import path

from .consumers import SocketConsumer

websocket_urlpatterns = [path("ws", SocketConsumer.as_asgi())]

# No AuthMiddlewareStack: the only authentication on /ws is the signed AUTHENTICATE frame.
websocket_application = URLRouter(websocket_urlpatterns)
