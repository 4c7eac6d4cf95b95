"""POST / through the production WSGI application's command entries (apps/decentrl/wsgi.py: the
bare WSGI callable and Django's lean handler) gives what the full Django handler gives: same
status, same headers, same body."""

from __future__ import annotations

import io
import json
import sys

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from apps.decentrl.wsgi import (
    SKIPPED_FOR_COMMANDS,
    BareCommandApp,
    CommandHandler,
    ProtocolWSGIApplication,
    bare_supported,
)
from apps.wire.canonical import canonical_bytes
from tests.conftest import HOST_A
from tests.support.registration import contract_both_ways


@pytest.fixture(params=["bare", "lean"])
def handlers(request, db):
    return WSGIHandler(), (BareCommandApp() if request.param == "bare" else CommandHandler())


def call(app, body: bytes = b"", *, method: str = "POST", path: str = "/", host: str = HOST_A, **extra):
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

    # As Django's test client does: the test transaction's connection must survive the request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        response = app(environ, start_response)
        data = b"".join(response)
        response.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    return got["status"], got["headers"], data


EXPECTED_HEADERS = [
    ("Access-Control-Allow-Headers", "Content-Type"),
    ("Access-Control-Allow-Methods", "GET, POST, OPTIONS"),
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Max-Age", "86400"),
    ("Content-Type", "application/json"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Referrer-Policy", "same-origin"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
]


def _with_length(data: bytes) -> list[tuple[str, str]]:
    return sorted([*EXPECTED_HEADERS, ("Content-Length", str(len(data)))])


@pytest.mark.parametrize(
    ("body", "status", "reply"),
    [
        (b"{not json", "400 Bad Request", {"type": "ERROR", "code": "INVALID_COMMAND"}),
        (b"[]", "400 Bad Request", {"type": "ERROR", "code": "INVALID_COMMAND"}),
        (b"", "400 Bad Request", {"type": "ERROR", "code": "INVALID_COMMAND"}),
    ],
)
def test_bad_bodies_get_the_same_reply_and_headers(handlers, tenant_a, body, status, reply):
    full, lean = handlers
    assert (
        call(full, body) == call(lean, body) == (status, _with_length(canonical_bytes(reply)), canonical_bytes(reply))
    )


def test_unknown_host_and_oversized_body_are_the_same(handlers, tenant_a, settings):
    full, lean = handlers
    settings.MEDIATOR_DEFAULT_TENANT = ""
    unknown = canonical_bytes({"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})
    assert call(full, b"{}", host="nobody.test") == call(lean, b"{}", host="nobody.test")
    assert call(lean, b"{}", host="nobody.test") == ("404 Not Found", _with_length(unknown), unknown)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    too_large = canonical_bytes({"type": "ERROR", "code": "PAYLOAD_TOO_LARGE"})
    assert (
        call(full, b"x" * 11)
        == call(lean, b"x" * 11)
        == ("413 Request Entity Too Large", _with_length(too_large), too_large)
    )


def test_commands_succeed_identically_on_both_handlers(handlers, post_a, tenant_a, alice, bob, registered):
    full, lean = handlers
    contract_both_ways(post_a, alice, bob, tenant_a)
    replies = []
    for app in (full, lean):
        env = alice.sign_command(recipient_did=bob.did, payload="opaque", channel="TWO_WAY_PRIVATE")
        status, headers, data = call(app, canonical_bytes(env))
        reply = json.loads(data)
        assert (status, headers) == ("200 OK", _with_length(data))
        assert reply["type"] == "SUCCESS" and len(reply["pendingEventId"]) == 36
        replies.append(reply)
        # A replay of the same bytes is refused on either handler.
        dup = canonical_bytes({"type": "ERROR", "code": "DUPLICATE_NONCE"})
        assert call(app, canonical_bytes(env)) == ("401 Unauthorized", _with_length(dup), dup)
    status, _, data = call(lean, canonical_bytes(bob.sign_command(recipient_did=tenant_a.did,
                                                                   payload={"type": "QUERY_PENDING_EVENTS"})))  # fmt: skip
    assert status == "200 OK"
    assert sorted(e["id"] for e in json.loads(data)["payload"]["pending_events"]) == sorted(
        r["pendingEventId"] for r in replies
    )


def test_cors_origin_lists_behave_as_in_the_full_chain(handlers, tenant_a, settings):
    full, lean = handlers
    settings.MEDIATOR_CORS_ORIGINS = ["https://app.example"]
    for origin in ("https://app.example", "https://evil.example"):
        assert call(full, b"{", HTTP_ORIGIN=origin) == call(lean, b"{", HTTP_ORIGIN=origin)
    status, headers, _ = call(lean, b"{", HTTP_ORIGIN="https://app.example")
    assert ("Access-Control-Allow-Origin", "https://app.example") in headers and ("Vary", "Origin") in headers


def test_the_application_routes_only_post_root_to_the_command_entry(tenant_a):
    app = ProtocolWSGIApplication()
    assert isinstance(app.commands, BareCommandApp) and type(app.full) is WSGIHandler
    seen = []
    app.commands = lambda environ, start_response: seen.append("commands") or []
    app.full = lambda environ, start_response: seen.append("full") or []
    for method, path in (("POST", "/"), ("GET", "/"), ("OPTIONS", "/"), ("POST", "/health"), ("POST", "/admin/")):
        app({"REQUEST_METHOD": method, "PATH_INFO": path}, None)
    assert seen == ["commands", "full", "full", "full", "full"]


def test_the_setting_picks_the_entry(settings):
    settings.MEDIATOR_COMMAND_ENTRY = "lean"
    assert type(ProtocolWSGIApplication().commands) is CommandHandler
    settings.MEDIATOR_COMMAND_ENTRY = "full"
    app = ProtocolWSGIApplication()
    assert app.commands is app.full


@pytest.mark.parametrize(
    "change",
    [
        {"SECURE_SSL_REDIRECT": True},
        {"PREPEND_WWW": True},
        {"MIDDLEWARE": ["django.middleware.gzip.GZipMiddleware"]},
    ],
)
def test_settings_the_bare_entry_does_not_replicate_fall_back_to_the_lean_handler(settings, change):
    assert bare_supported()
    for name, value in change.items():
        setattr(settings, name, value if name != "MIDDLEWARE" else [*settings.MIDDLEWARE, *value])
    assert not bare_supported()
    assert type(ProtocolWSGIApplication().commands) is CommandHandler


@pytest.mark.parametrize("proto", ["https", "http"])
def test_hsts_behind_a_tls_proxy_is_the_same_on_every_entry(tenant_a, settings, proto):
    """Production over TLS (settings.py: MEDIATOR_PUBLIC_SCHEME=https, a trusted proxy) keeps the
    bare entry, and a request the proxy marks https gets HSTS from it as from the full chain."""
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert type(ProtocolWSGIApplication().commands) is BareCommandApp
    full = call(WSGIHandler(), b"[]", HTTP_X_FORWARDED_PROTO=proto)
    bare = call(BareCommandApp(), b"[]", HTTP_X_FORWARDED_PROTO=proto)
    assert bare == full
    hsts = [("Strict-Transport-Security", "max-age=31536000")] if proto == "https" else []
    assert bare[1] == sorted([*_with_length(bare[2]), *hsts])


def test_the_bare_entry_ends_the_request_like_django(handlers, tenant_a, monkeypatch):
    """request_started and request_finished fire once each (they return database connections)."""
    _, entry = handlers
    seen = []
    request_started.connect(started := lambda **kw: seen.append("started"), weak=False)
    request_finished.connect(finished := lambda **kw: seen.append("finished"), weak=False)
    try:
        call(entry, b"{")
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert seen == ["started", "finished"]


def test_an_unexpected_error_is_a_protocol_shaped_503(tenant_a, monkeypatch):
    monkeypatch.setattr("apps.decentrl.wsgi.handle", lambda *a: 1 / 0)
    body = canonical_bytes({"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"})
    assert call(BareCommandApp(), b"{}") == ("503 Service Unavailable", _with_length(body), body)


def test_an_unreachable_database_answers_as_the_tenant_middleware_does(handlers, tenant_a, monkeypatch):
    from django.db import OperationalError

    full, entry = handlers

    def down(host):
        raise OperationalError("down")

    monkeypatch.setattr("apps.tenants.middleware.tenant_for_host", down)
    monkeypatch.setattr("apps.decentrl.wsgi.tenant_for_host", down)
    body = b'{"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}'
    # In Django's chains TenantMiddleware answers before CommonMiddleware and XFrameOptionsMiddleware
    # (inner to it) see the reply; the bare entry gives it those two headers as well.
    without = [h for h in _with_length(body) if h[0] not in ("Content-Length", "X-Frame-Options")]
    assert call(full, b"{}") == ("503 Service Unavailable", without, body)
    expected = without if isinstance(entry, CommandHandler) else _with_length(body)
    assert call(entry, b"{}") == ("503 Service Unavailable", expected, body)


def test_a_middleware_with_view_hooks_must_be_listed_as_skipped(settings):
    from django.core.exceptions import ImproperlyConfigured

    assert "django.middleware.csrf.CsrfViewMiddleware" in SKIPPED_FOR_COMMANDS
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE] + ["django.middleware.cache.CacheMiddleware"]
    CommandHandler()  # no view hooks: fine
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.decentrl.test_lean_entry.ViewHookMiddleware"]
    with pytest.raises(ImproperlyConfigured, match="process_view"):
        CommandHandler()


class ViewHookMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view, args, kwargs):
        return None
