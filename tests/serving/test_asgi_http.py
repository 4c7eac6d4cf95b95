"""`make run`'s HTTP (mediator_project/asgi.py `WSGIOverASGI`): Daphne serves mediator_project/wsgi.py's
application, the one Granian serves in production (POST / and POST /didcomm on the command entry,
everything else on Django's handler). A request is one call on one of the pool's long-lived
threads (for Django: its signals, chain, view and the response's close all there), and a
streaming response is sent chunk by chunk."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.signals import request_finished, request_started
from django.http import StreamingHttpResponse

import mediator_project.wsgi
from mediator_project.asgi import WSGIOverASGI, application, http_application
from tests.conftest import HOST_A


def _scope(method: str, path: str, headers: list | None = None) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", HOST_A.encode()), *(headers or [])],
        "client": ("127.0.0.9", 5555),
        "server": ("127.0.0.1", 8000),
    }


async def _request(app, scope: dict, chunks: list[bytes]) -> list[dict]:
    comm = ApplicationCommunicator(app, scope)
    for i, chunk in enumerate(chunks):
        await comm.send_input({"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1})
    messages = []
    while not messages or messages[-1]["type"] != "http.response.body" or messages[-1].get("more_body"):
        messages.append(await comm.receive_output(10))
    await comm.wait(10)
    return messages


def test_the_http_application_is_the_production_wsgi_application_on_a_thread_pool():
    assert http_application.application is mediator_project.wsgi.application
    assert application.application_mapping["http"] is http_application


@pytest.mark.django_db(transaction=True)
def test_post_root_reaches_the_command_entry_on_a_pool_thread(tenant_a):
    threads = []

    def app(environ, start_response):
        threads.append(threading.current_thread().name)
        return mediator_project.wsgi.application(environ, start_response)

    scope = _scope("POST", "/", [(b"content-type", b"application/json"), (b"content-length", b"3")])
    start, body = asyncio.run(_request(WSGIOverASGI(app, 2), scope, [b"{", b"[]"]))
    # The command entry's reply and headers (CORS and the security headers, a Content-Length).
    assert start["status"] == 400 and (b"x-frame-options", b"DENY") in start["headers"]
    assert (b"access-control-allow-origin", b"*") in start["headers"]
    assert (b"content-length", str(len(body["body"])).encode()) in start["headers"]
    assert body == {"type": "http.response.body", "body": b'{"code":"INVALID_COMMAND","type":"ERROR"}'}
    assert len(threads) == 1 and threads[0].startswith("http")


@pytest.mark.django_db(transaction=True)
def test_a_django_request_is_one_call_on_a_pool_thread_with_both_request_signals(tenant_a):
    seen = []
    on_start = lambda **kw: seen.append(("started", threading.current_thread().name))  # noqa: E731
    on_end = lambda **kw: seen.append(("finished", threading.current_thread().name))  # noqa: E731
    request_started.connect(on_start, weak=False)
    request_finished.connect(on_end, weak=False)
    try:
        start, body = asyncio.run(_request(http_application, _scope("GET", "/health"), [b""]))
    finally:
        request_started.disconnect(on_start)
        request_finished.disconnect(on_end)
    assert start["status"] in (200, 503)
    # Both signals on one worker thread of the pool: the response was closed there.
    assert [kind for kind, _ in seen] == ["started", "finished"]
    assert seen[0][1] == seen[1][1] and seen[0][1].startswith("http")


def test_a_streaming_response_is_sent_chunk_by_chunk_and_closed():
    closed = []

    def app(environ, start_response):
        response = StreamingHttpResponse(iter([b"a,b\n", b"1,2\n"]), content_type="text/csv")
        response._resource_closers.append(lambda: closed.append(threading.current_thread().name))
        start_response("200 OK", list(response.items()))
        return response

    messages = asyncio.run(_request(WSGIOverASGI(app, 2), _scope("GET", "/x.csv"), [b""]))
    assert messages[0]["status"] == 200 and (b"content-type", b"text/csv") in messages[0]["headers"]
    assert [m.get("body") for m in messages[1:]] == [b"a,b\n", b"1,2\n", None]
    assert len(closed) == 1 and closed[0].startswith("http")
