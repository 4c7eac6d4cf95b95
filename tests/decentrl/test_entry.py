"""POST / through the production entry (apps/decentrl/wsgi.py: ProtocolWSGIApplication and its
CommandEntry) gives what Django's full handler gives (the view views.command over the same
dispatch.http_reply, behind every middleware): same status, same headers, same body."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started

from apps.decentrl import wsgi
from apps.decentrl.wsgi import CommandEntry, ProtocolWSGIApplication
from apps.ops import dbconn
from apps.wire.canonical import canonical_bytes
from tests.conftest import HOST_A
from tests.support.entry import wsgi_call as call
from tests.support.registration import contract_both_ways


@pytest.fixture
def handlers(db):
    """(Django's full handler, the production application)."""
    return WSGIHandler(), ProtocolWSGIApplication()


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


def _with_length(data: bytes, expected=EXPECTED_HEADERS) -> list[tuple[str, str]]:
    return sorted([*expected, ("Content-Length", str(len(data)))])


@pytest.mark.parametrize(
    ("body", "status", "reply"),
    [
        (b"{not json", "400 Bad Request", {"type": "ERROR", "code": "INVALID_COMMAND"}),
        (b"[]", "400 Bad Request", {"type": "ERROR", "code": "INVALID_COMMAND"}),
        (b"", "400 Bad Request", {"type": "ERROR", "code": "INVALID_COMMAND"}),
    ],
)
def test_bad_bodies_get_the_same_reply_and_headers(handlers, tenant_a, body, status, reply):
    full, entry = handlers
    assert (
        call(full, body) == call(entry, body) == (status, _with_length(canonical_bytes(reply)), canonical_bytes(reply))
    )


def test_unknown_host_and_oversized_body_are_the_same(handlers, tenant_a, settings):
    full, entry = handlers
    settings.MEDIATOR_DEFAULT_TENANT = ""
    unknown = canonical_bytes({"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})
    assert call(full, b"{}", host="nobody.test") == call(entry, b"{}", host="nobody.test")
    assert call(entry, b"{}", host="nobody.test") == ("404 Not Found", _with_length(unknown), unknown)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    too_large = canonical_bytes({"type": "ERROR", "code": "PAYLOAD_TOO_LARGE"})
    assert (
        call(full, b"x" * 11)
        == call(entry, b"x" * 11)
        == ("413 Request Entity Too Large", _with_length(too_large), too_large)
    )


def test_commands_succeed_identically_on_both_handlers(handlers, post_a, tenant_a, alice, bob, registered):
    full, entry = handlers
    contract_both_ways(post_a, alice, bob, tenant_a)
    replies = []
    for app in (full, entry):
        env = alice.sign_command(recipient_did=bob.did, payload="opaque", channel="TWO_WAY_PRIVATE")
        status, headers, data = call(app, canonical_bytes(env))
        reply = json.loads(data)
        assert (status, headers) == ("200 OK", _with_length(data))
        assert reply["type"] == "SUCCESS" and len(reply["pendingEventId"]) == 36
        replies.append(reply)
        # A replay of the same bytes is refused on either handler.
        dup = canonical_bytes({"type": "ERROR", "code": "DUPLICATE_NONCE"})
        assert call(app, canonical_bytes(env)) == ("401 Unauthorized", _with_length(dup), dup)
    status, _, data = call(entry, canonical_bytes(bob.sign_command(recipient_did=tenant_a.did,
                                                                    payload={"type": "QUERY_PENDING_EVENTS"})))  # fmt: skip
    assert status == "200 OK"
    assert sorted(e["id"] for e in json.loads(data)["payload"]["pending_events"]) == sorted(
        r["pendingEventId"] for r in replies
    )


def test_cors_origin_lists_behave_as_in_the_full_chain(handlers, tenant_a, settings):
    full, entry = handlers
    settings.MEDIATOR_CORS_ORIGINS = ["https://app.example"]
    for origin in ("https://app.example", "https://evil.example"):
        assert call(full, b"{", HTTP_ORIGIN=origin) == call(entry, b"{", HTTP_ORIGIN=origin)
    status, headers, _ = call(entry, b"{", HTTP_ORIGIN="https://app.example")
    assert ("Access-Control-Allow-Origin", "https://app.example") in headers and ("Vary", "Origin") in headers


def test_hsts_goes_on_secure_requests_only_as_in_the_full_chain(tenant_a, settings):
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    full, entry = WSGIHandler(), ProtocolWSGIApplication()  # middlewares read their settings when built
    body = canonical_bytes({"type": "ERROR", "code": "INVALID_COMMAND"})
    hsts = ("Strict-Transport-Security", "max-age=3600; includeSubDomains")
    secure = call(entry, b"{", HTTP_X_FORWARDED_PROTO="https")
    assert secure == call(full, b"{", HTTP_X_FORWARDED_PROTO="https")
    assert secure == ("400 Bad Request", _with_length(body, [*EXPECTED_HEADERS, hsts]), body)
    assert call(entry, b"{", **{"wsgi.url_scheme": "https"})[1] == _with_length(body, [*EXPECTED_HEADERS, hsts])
    plain = call(entry, b"{", HTTP_X_FORWARDED_PROTO="http")
    assert plain == call(full, b"{", HTTP_X_FORWARDED_PROTO="http")
    assert plain == ("400 Bad Request", _with_length(body), body)


def test_an_insecure_request_under_ssl_redirect_is_redirected_by_django(tenant_a, settings):
    settings.SECURE_SSL_REDIRECT = True
    entry = ProtocolWSGIApplication()
    status, headers, _ = call(entry, b"{")
    assert (status, dict(headers)["Location"]) == ("301 Moved Permanently", "https://a.mediator.test/")
    assert call(entry, b"{", **{"wsgi.url_scheme": "https"})[0] == "400 Bad Request"


def test_the_application_routes_only_post_root_to_the_command_entry(tenant_a):
    app = ProtocolWSGIApplication()
    assert isinstance(app.commands, CommandEntry) and type(app.django) is WSGIHandler
    seen = []
    app.commands = lambda environ, start_response: seen.append("commands") or []
    app.django = lambda environ, start_response: seen.append("django") or []
    for method, path in (("POST", "/"), ("GET", "/"), ("OPTIONS", "/"), ("POST", "/health"), ("POST", "/admin/")):
        app({"REQUEST_METHOD": method, "PATH_INFO": path}, None)
    assert seen == ["commands", "django", "django", "django", "django"]


def test_a_middleware_the_entry_does_not_know_stops_it_from_starting(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.gzip.GZipMiddleware"]
    with pytest.raises(ImproperlyConfigured, match="GZipMiddleware"):
        ProtocolWSGIApplication()


@pytest.mark.parametrize("name, value", [("PREPEND_WWW", True), ("DISALLOWED_USER_AGENTS", [re.compile("bot")])])
def test_a_common_middleware_rule_no_protocol_post_may_get_stops_it_from_starting(settings, name, value):
    """No POST / or POST /didcomm goes to Django's chain instead: the entry is their one way in."""
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        ProtocolWSGIApplication()


def test_the_entry_handles_database_connections_once_at_each_end(tenant_a, monkeypatch):
    """What Django's request signals do for connections, the entry does itself, once at each end;
    it sends neither signal (their receivers are checked at start: check_request_signals)."""
    seen = []
    monkeypatch.setattr(dbconn, "request_begins", lambda: seen.append("begins"))
    monkeypatch.setattr(dbconn, "request_ends", lambda: seen.append("ends"))
    request_started.connect(started := lambda **kw: seen.append("request_started"), weak=False)
    request_finished.connect(finished := lambda **kw: seen.append("request_finished"), weak=False)
    try:
        CommandEntry()(_environ(b"{"), lambda status, headers, exc_info=None: seen.append(status))
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert seen == ["begins", "400 Bad Request", "ends"]


def _environ(body: bytes) -> dict:
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_HOST": HOST_A,
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
    }


def test_the_request_ends_before_the_body_is_returned_and_a_failing_end_keeps_the_reply(tenant_a, monkeypatch, caplog):
    """Granian writes a list body at once and never closes it: the connections are handled when
    the entry returns, with no close() from the server. A failure there is logged, and the reply
    stays the protocol's (never a 500)."""
    seen = []

    def ends():
        seen.append("ends")
        raise RuntimeError("closing failed")

    monkeypatch.setattr(dbconn, "request_begins", lambda: None)  # keep the test transaction
    monkeypatch.setattr(dbconn, "request_ends", ends)
    got = {}
    body = CommandEntry()(_environ(b"{"), lambda status, headers, exc_info=None: got.update(status=status))
    assert seen == ["ends"]  # before anything closed the body
    assert (got["status"], type(body), json.loads(b"".join(body))) == (
        "400 Bad Request",
        list,
        {"type": "ERROR", "code": "INVALID_COMMAND"},
    )
    assert "closing database connections failed after a command: RuntimeError" in caplog.text


def test_a_failing_start_is_a_protocol_503(tenant_a, monkeypatch):
    def begins():
        raise RuntimeError("no connection")

    monkeypatch.setattr(dbconn, "request_begins", begins)
    monkeypatch.setattr(dbconn, "request_ends", lambda: None)
    got = {}
    body = CommandEntry()(_environ(b"{"), lambda status, headers, exc_info=None: got.update(status=status))
    assert (got["status"], json.loads(b"".join(body))) == (
        "503 Service Unavailable",
        {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"},
    )


def test_django_own_request_signal_receivers_are_found_and_known():
    """The adapter over Django 5.2's Signal.receivers sees Django's receivers (a Django that stores
    them differently fails here), and every one is in SIGNAL_RECEIVERS."""
    started = set(wsgi._receiver_names(request_started))
    finished = set(wsgi._receiver_names(request_finished))
    assert {
        "django.db.close_old_connections",
        "django.db.reset_queries",
        "apps.ops.dbconn.close_dead_idle_connections",
    } <= started
    assert {
        "django.db.close_old_connections",
        "django.core.cache.close_caches",
        "django.core.handlers.base.reset_urlconf",
    } <= finished
    assert started <= set(wsgi.SIGNAL_RECEIVERS["request_started"])
    assert finished <= set(wsgi.SIGNAL_RECEIVERS["request_finished"])


@pytest.mark.parametrize("signal", [request_started, request_finished])
def test_a_request_signal_receiver_the_entry_does_not_know_stops_it_from_starting(signal):
    def audit(**kwargs):
        pass

    signal.connect(audit, weak=False)
    try:
        with pytest.raises(
            ImproperlyConfigured, match=r"so tests\.decentrl\.test_entry\.test_a_request_signal_.*audit would not run"
        ):
            ProtocolWSGIApplication()
    finally:
        signal.disconnect(audit)


def test_an_unexpected_error_is_a_protocol_shaped_503(tenant_a, monkeypatch):
    monkeypatch.setattr("apps.decentrl.wsgi.http_reply", lambda *a: 1 / 0)
    body = canonical_bytes({"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"})
    assert call(CommandEntry(), b"{}") == ("503 Service Unavailable", _with_length(body), body)


def test_an_unreachable_database_answers_as_the_tenant_middleware_does(handlers, tenant_a, monkeypatch):
    from django.db import OperationalError

    full, entry = handlers

    def down(host):
        raise OperationalError("down")

    monkeypatch.setattr("apps.tenants.middleware.tenant_for_host", down)
    monkeypatch.setattr("apps.decentrl.wsgi.tenant_for_host", down)
    body = b'{"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}'
    # In Django's chain TenantMiddleware answers before CommonMiddleware and XFrameOptionsMiddleware
    # (inner to it) see the reply; the entry gives it those two headers as well.
    without = [h for h in _with_length(body) if h[0] not in ("Content-Length", "X-Frame-Options")]
    assert call(full, b"{}") == ("503 Service Unavailable", without, body)
    assert call(entry, b"{}") == ("503 Service Unavailable", _with_length(body), body)
