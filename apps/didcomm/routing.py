"""`/didcomm/ws` routing, mounted by mediator_project/asgi.py beside Decentrl's `/ws`."""

from __future__ import annotations

from django.urls import path

from .consumers import DidcommConsumer

# No AuthMiddlewareStack: a DIDComm socket is authenticated per message (authcrypt `skid`).
websocket_urlpatterns = [path("didcomm/ws", DidcommConsumer.as_asgi())]
