"""The one in-process client of the production WSGI application (mediator_project/entry.py's
`protocol_application`, what Granian serves): `wsgi_call` sends one request through a WSGI
callable; `Poster` sends requests with a tenant's Host header (`post`, `get`: a `Response`) and signs
and posts commands to `POST /` (`command`, `send`, `raw`). Tests, the DIDComm tests' posters,
tests/support/request_path.py and tests/support/registration.py's helpers all go through these."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import dataclass

from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils.datastructures import CaseInsensitiveMapping

from apps.ops import dbconn
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity

# The hosts of tests/conftest.py's tenant A and tenant B.
HOST_A = "a.mediator.test"
HOST_B = "b.mediator.test"


def wsgi_call(
    app,
    body: bytes = b"",
    *,
    method: str = "POST",
    path: str = "/",
    host: str = HOST_A,
    keep_connection: bool = True,
    **extra,
):
    """One request through the WSGI callable `app`, in-process: (status line, sorted headers, body).
    `extra` are WSGI environ entries (REMOTE_ADDR, CONTENT_TYPE, HTTP_…). With `keep_connection`
    (the default, for tests in a transaction) the test's database connection survives the request;
    without it nothing of the request's handling is replaced (tests/support/request_path.py)."""
    path, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": query,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_HOST": host,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "REMOTE_ADDR": "127.0.0.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
        **extra,
    }
    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"], got["headers"] = status, sorted(headers)

    with keep_test_connection() if keep_connection else contextlib.nullcontext():
        response = app(environ, start_response)
        try:
            data = b"".join(response)
        finally:
            if hasattr(response, "close"):  # as a WSGI server does (PEP 3333)
                response.close()
    return got["status"], got["headers"], data


@contextlib.contextmanager
def keep_test_connection():
    """As Django's test client does (it disconnects `close_old_connections` from the request
    signals): the test transaction's connection must survive the request. The command entry
    does that work itself (apps.ops.dbconn.request_begins/request_ends): those are no-ops too."""
    begins, ends = dbconn.request_begins, dbconn.request_ends
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    dbconn.request_begins = dbconn.request_ends = lambda: None
    try:
        yield
    finally:
        dbconn.request_begins, dbconn.request_ends = begins, ends
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@dataclass
class Response:
    """A reply as the tests read it (the shape of Django's test responses they used to get)."""

    status_code: int
    headers: CaseInsensitiveMapping
    content: bytes

    def __getitem__(self, name: str) -> str:
        return self.headers[name]

    def has_header(self, name: str) -> bool:
        return name in self.headers

    def json(self):
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8")


class Poster:
    """Requests through the production WSGI application (or `app`), in process, with a tenant's Host
    header. `post` and `get` give a `Response`; `raw`, `send` and `command` post a command to `POST /`
    and give (status code, the reply's JSON). `extra` are WSGI environ entries (REMOTE_ADDR, HTTP_…)."""

    def __init__(self, host: str, app=None, *, keep_connection: bool = True):
        if app is None:
            from mediator_project.entry import protocol_application  # Django is set up by now

            app = protocol_application()
        self.app, self.host, self.keep_connection = app, host, keep_connection

    def request(self, method: str, path: str, body: bytes = b"", **extra) -> Response:
        status, headers, data = wsgi_call(
            self.app, body, method=method, path=path, host=self.host, keep_connection=self.keep_connection, **extra
        )
        return Response(int(status.split(" ", 1)[0]), CaseInsensitiveMapping(dict(headers)), data)

    def post(self, path: str, body: bytes | str = b"", content_type: str = "application/json", **extra) -> Response:
        data = body.encode("utf-8") if isinstance(body, str) else body
        return self.request("POST", path, data, CONTENT_TYPE=content_type, **extra)

    def get(self, path: str, **extra) -> Response:
        return self.request("GET", path, **extra)

    def raw(self, body: bytes | str, **extra):
        resp = self.post("/", body, **extra)
        return resp.status_code, resp.json()

    def send(self, envelope: dict):
        return self.raw(canonical_bytes(envelope))

    def command(self, who: Identity, payload, *, recipient_did: str, **kw):
        return self.send(who.sign_command(recipient_did=recipient_did, payload=payload, **kw))
