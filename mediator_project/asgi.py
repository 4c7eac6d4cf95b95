"""ASGI entry point: HTTP through the WSGI application production's Granian serves
(mediator_project/wsgi.py: `POST /` and `POST /didcomm` on the command entry, everything else on
Django's handler), here on a pool of long-lived worker threads (`WSGIOverASGI`); /ws (Decentrl)
and /didcomm/ws (DIDComm) through Channels."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
# Importing the WSGI application sets Django up before anything here touches models (docs/contributing.md §10).
from mediator_project.wsgi import application as wsgi_application  # noqa: E402, I001

from asgiref.wsgi import WsgiToAsgiInstance  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import re_path  # noqa: E402

from apps.decentrl.routing import websocket_urlpatterns as decentrl_ws  # noqa: E402
from apps.didcomm.consumers import CLOSE_UNKNOWN_MEDIATOR  # noqa: E402
from apps.didcomm.problems import problem_message  # noqa: E402
from apps.didcomm.protocols import Code  # noqa: E402
from apps.didcomm.routing import websocket_urlpatterns as didcomm_ws  # noqa: E402
from apps.wire.errors import ErrorCode, error_body  # noqa: E402
from mediator_project.errors import under_didcomm  # noqa: E402

Scope = dict[str, Any]
Message = dict[str, Any]


class WSGIOverASGI:
    """A WSGI application as the ASGI HTTP application: the request's body is read on the event loop,
    then the whole request (the WSGI call, with whatever it does for the request's start and end,
    and the response's close()) is one call on one of `threads` long-lived worker threads, each
    keeping its database connection between requests (CONN_MAX_AGE), and the reply is sent from
    the event loop.

    Django's ASGIHandler would run each request on a thread of its own, created for it, so on a new
    database connection, and cross between the event loop and that thread for the request_started
    signal, the view and the response's close(); and it would not run the command entry. asgiref's
    WsgiToAsgi crosses back to the loop for every part of the reply and never closes the response
    (so Django never sends request_finished). A streaming response is sent chunk by chunk from the
    worker thread."""

    def __init__(self, application: Callable[..., Iterable[bytes]], threads: int) -> None:
        self.application = application
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="http")

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            raise ValueError(f"WSGIOverASGI serves HTTP, not {scope['type']}")
        # As Django's ASGIHandler reads it: in memory up to FILE_UPLOAD_MAX_MEMORY_SIZE, then on disk.
        with SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b") as body:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client left before its request was complete
                body.write(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body.seek(0)
            loop = asyncio.get_running_loop()
            reply = await loop.run_in_executor(self.executor, self._call, scope, body, send, loop)
        if reply is not None:
            start, content = reply
            await send(start)
            await send({"type": "http.response.body", "body": content})

    def _call(
        self, scope: Scope, body: Any, send: Callable, loop: asyncio.AbstractEventLoop
    ) -> tuple[Message, bytes] | None:
        """The WSGI call, on a worker thread: (the response's start message, its body), or None when
        the reply was already sent (streamed from here)."""
        translator = WsgiToAsgiInstance(self.application)
        translator.scope = scope
        try:
            environ = translator.build_environ(scope, body)
        except ValueError:  # more duplicate headers than asgiref allows
            return _start(400, [("Content-Type", "text/plain")]), b"Bad Request: too many duplicate headers"
        # The body is complete: its length is what was read (a chunked request declares none, and
        # WSGI readers, the command entry's cap among them, go by CONTENT_LENGTH).
        environ["CONTENT_LENGTH"] = str(body.seek(0, os.SEEK_END))
        body.seek(0)
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            started[:] = [int(status.split(" ", 1)[0]), headers]

        def sent(message: Message) -> None:
            asyncio.run_coroutine_threadsafe(send(message), loop).result()

        result = self.application(environ, start_response)
        try:
            if not getattr(result, "streaming", False):
                return _start(*started), b"".join(result)
            # start_response may be called as late as the first chunk (PEP 3333).
            started_sent = False
            for chunk in result:
                if not started_sent:
                    sent(_start(*started))
                    started_sent = True
                sent({"type": "http.response.body", "body": chunk, "more_body": True})
            if not started_sent:
                sent(_start(*started))
            sent({"type": "http.response.body"})
            return None
        finally:
            # Django's response sends request_finished here (the connections' end-of-request handling).
            close = getattr(result, "close", None)
            if close is not None:
                close()


def _start(status: int, headers: list[tuple[str, str]]) -> Message:
    return {
        "type": "http.response.start",
        "status": status,
        "headers": [(name.lower().encode("latin1"), value.encode("latin1")) for name, value in headers],
    }


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
# HTTP_THREADS: as many worker threads as the production HTTP tier has per worker (http_server.py).
http_application = WSGIOverASGI(wsgi_application, int(os.environ.get("HTTP_THREADS") or "8"))
application = ProtocolTypeRouter({"http": http_application, "websocket": URLRouter(websocket_urlpatterns)})
