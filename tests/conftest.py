"""Shared fixtures: named tenants (tenant A and B), identities (alice and bob on A, carol on B),
a signed-command poster through the production WSGI entry; the browser tests' Daphne and staff users
come from tests/support/browser.py."""

from __future__ import annotations

import contextlib
import io
import json
import sys

import pytest
from asgiref.sync import sync_to_async
from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from apps.ops import dbconn
from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity

pytest_plugins = ["tests.support.clock", "tests.support.browser", "tests.support.operators"]

HOST_A = "a.mediator.test"
HOST_B = "b.mediator.test"


@pytest.fixture
def tenant_a(db):
    from apps.tenants.services import tenant_create

    return tenant_create(slug="tenant-a", domain=HOST_A, name="Tenant A")


@pytest.fixture
def tenant_b(db):
    from apps.tenants.services import tenant_create

    return tenant_create(slug="tenant-b", domain=HOST_B, name="Tenant B")


@pytest.fixture
def alice(tenant_a) -> Identity:
    return Identity.create("alice", tenant_a.did)


@pytest.fixture
def bob(tenant_a) -> Identity:
    return Identity.create("bob", tenant_a.did)


@pytest.fixture
def carol(tenant_b) -> Identity:
    return Identity.create("carol", tenant_b.did)


def wsgi_call(app, body: bytes = b"", *, method: str = "POST", path: str = "/", host: str = HOST_A, **extra):
    """One request through the WSGI callable `app`, in-process: (status line, sorted headers, body)."""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
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

    with keep_test_connection():
        response = app(environ, start_response)
        data = b"".join(response)
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


class Poster:
    """POST / through the production WSGI application (mediator_project/wsgi.py, served by Granian), in
    process, with a tenant's Host header. `extra` are WSGI environ entries (REMOTE_ADDR, HTTP_…)."""

    def __init__(self, host: str):
        from apps.decentrl.wsgi import ProtocolWSGIApplication

        self.app = ProtocolWSGIApplication()
        self.host = host

    def raw(self, body: bytes | str, **extra):
        data = body.encode("utf-8") if isinstance(body, str) else body
        status, _, reply = wsgi_call(self.app, data, host=self.host, **extra)
        return int(status.split(" ", 1)[0]), json.loads(reply)

    def send(self, envelope: dict):
        return self.raw(canonical_bytes(envelope))

    def command(self, who: Identity, payload, *, recipient_did: str, **kw):
        return self.send(who.sign_command(recipient_did=recipient_did, payload=payload, **kw))


@pytest.fixture
def post_a(tenant_a) -> Poster:
    return Poster(HOST_A)


@pytest.fixture
def post_b(tenant_b) -> Poster:
    return Poster(HOST_B)


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run `fn` in the test thread, then its on-commit callbacks (pushes, group messages), as a commit
    would; for async tests of consumers."""

    async def call(fn):
        def inner():
            with django_capture_on_commit_callbacks(execute=True):
                return fn()

        return await sync_to_async(inner)()

    return call


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix():
    """pytest-django's own xdist suffix, not added: tests/support/xdist_worker.py already named each
    worker's test database."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `pytest -n N --dist loadgroup` (`make test PYTEST_WORKERS=N`), in each worker: a module is
    one unit of work, so its module-scoped servers start once; every test on the warm Spark engine is
    one unit, so one worker starts one engine and never runs two Spark tests at once. That unit comes
    first: with --no-loadscope-reorder it is handed out first, a long unit that must not be the tail."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        group = "spark" if "spark_engine" in item.fixturenames else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: "spark_engine" not in item.fixturenames)
