"""The production entry of both protocols (mediator_project/entry.py): `POST /` and `POST /didcomm`
each on its CommandEntry with its protocol's reply, the headers Django's middlewares give (compared
with what Django's full chain puts on a GET of the same path), the connection handling of Django's
request signals done once at each end, the settings and receivers that stop it from starting, and
never a 500. Django's handler has no protocol POST of its own."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started

from apps.decentrl import dispatch as decentrl
from apps.didcomm import dispatch as didcomm
from apps.didcomm.models import QueuedMessage
from apps.ops import dbconn
from apps.wire.canonical import canonical_bytes
from mediator_project import entry as entry_module
from mediator_project.entry import CommandEntry, ProtocolWSGIApplication, protocol_application
from tests.conftest import HOST_A
from tests.support.didcomm_agent import CM2, ENCRYPTED, Agent, forward_for, routed_did
from tests.support.entry import wsgi_call as call
from tests.support.registration import contract_both_ways, register

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
_OWN = ("Content-Type", "Content-Length", "Allow")


@pytest.fixture
def app(db):
    """The production application, as mediator_project/wsgi.py builds it."""
    return protocol_application()


def _with_length(data: bytes, expected=EXPECTED_HEADERS) -> list[tuple[str, str]]:
    return sorted([*expected, ("Content-Length", str(len(data)))])


def _middleware_headers(headers) -> list[tuple[str, str]]:
    return [h for h in headers if h[0] not in _OWN]


def django_headers(path: str = "/", **environ) -> list[tuple[str, str]]:
    """The headers Django's full middleware chain puts on a GET of `path` (the view's own aside)."""
    return _middleware_headers(call(WSGIHandler(), method="GET", path=path, **environ)[1])


def didcomm_call(app, body: bytes, content_type: str = ENCRYPTED, **kw):
    return call(app, body, path="/didcomm", CONTENT_TYPE=content_type, **kw)


def _without_id(result, key: str = "id"):
    status, headers, body = result
    report = json.loads(body)
    report.pop(key)
    return status, headers, report


# --- POST / ------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{not json", b"[]", b""])
def test_bad_bodies_get_the_protocol_reply_and_the_middlewares_headers(app, tenant_a, body):
    reply = canonical_bytes({"type": "ERROR", "code": "INVALID_COMMAND"})
    result = call(app, body)
    assert result == ("400 Bad Request", _with_length(reply), reply)
    assert _middleware_headers(result[1]) == django_headers()


def test_an_unknown_host_and_an_oversized_body(app, tenant_a, settings):
    settings.MEDIATOR_DEFAULT_TENANT = ""
    unknown = canonical_bytes({"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})
    assert call(app, b"{}", host="nobody.test") == ("404 Not Found", _with_length(unknown), unknown)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    too_large = canonical_bytes({"type": "ERROR", "code": "PAYLOAD_TOO_LARGE"})
    assert call(app, b"x" * 11) == ("413 Request Entity Too Large", _with_length(too_large), too_large)


def test_commands_succeed_and_a_replay_is_refused(app, post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    replies = []
    for _ in range(2):
        env = alice.sign_command(recipient_did=bob.did, payload="opaque", channel="TWO_WAY_PRIVATE")
        status, headers, data = call(app, canonical_bytes(env))
        reply = json.loads(data)
        assert (status, headers) == ("200 OK", _with_length(data))
        assert reply["type"] == "SUCCESS" and len(reply["pendingEventId"]) == 36
        replies.append(reply)
        dup = canonical_bytes({"type": "ERROR", "code": "DUPLICATE_NONCE"})
        assert call(app, canonical_bytes(env)) == ("401 Unauthorized", _with_length(dup), dup)
    status, _, data = call(app, canonical_bytes(bob.sign_command(recipient_did=tenant_a.did,
                                                                  payload={"type": "QUERY_PENDING_EVENTS"})))  # fmt: skip
    assert status == "200 OK"
    assert sorted(e["id"] for e in json.loads(data)["payload"]["pending_events"]) == sorted(
        r["pendingEventId"] for r in replies
    )


def test_cors_origin_lists_behave_as_in_the_full_chain(app, tenant_a, settings):
    settings.MEDIATOR_CORS_ORIGINS = ["https://app.example"]
    for origin in ("https://app.example", "https://evil.example"):
        assert _middleware_headers(call(app, b"{", HTTP_ORIGIN=origin)[1]) == django_headers(HTTP_ORIGIN=origin)
    status, headers, _ = call(app, b"{", HTTP_ORIGIN="https://app.example")
    assert ("Access-Control-Allow-Origin", "https://app.example") in headers and ("Vary", "Origin") in headers


def test_hsts_goes_on_secure_requests_only_as_in_the_full_chain(tenant_a, settings):
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    app = protocol_application()  # middlewares read their settings when built
    body = canonical_bytes({"type": "ERROR", "code": "INVALID_COMMAND"})
    hsts = ("Strict-Transport-Security", "max-age=3600; includeSubDomains")
    secure = call(app, b"{", HTTP_X_FORWARDED_PROTO="https")
    assert secure == ("400 Bad Request", _with_length(body, [*EXPECTED_HEADERS, hsts]), body)
    assert _middleware_headers(secure[1]) == django_headers(HTTP_X_FORWARDED_PROTO="https")
    assert call(app, b"{", **{"wsgi.url_scheme": "https"})[1] == _with_length(body, [*EXPECTED_HEADERS, hsts])
    plain = call(app, b"{", HTTP_X_FORWARDED_PROTO="http")
    assert plain == ("400 Bad Request", _with_length(body), body)
    assert _middleware_headers(plain[1]) == django_headers(HTTP_X_FORWARDED_PROTO="http")


def test_an_insecure_request_under_ssl_redirect_is_redirected_by_django(tenant_a, settings):
    settings.SECURE_SSL_REDIRECT = True
    app = protocol_application()
    for path in ("/", "/didcomm"):
        status, headers, _ = call(app, b"{", path=path)
        assert (status, dict(headers)["Location"]) == ("301 Moved Permanently", f"https://a.mediator.test{path}")
    assert call(app, b"{", **{"wsgi.url_scheme": "https"})[0] == "400 Bad Request"


# --- the application ---------------------------------------------------------------------------


def test_the_application_routes_each_protocol_post_to_its_entry_and_the_rest_to_django(tenant_a):
    app = protocol_application()
    assert (app.routes["/"].reply, app.routes["/"].unavailable) == (decentrl.http_reply, decentrl.http_unavailable)
    assert (app.routes["/didcomm"].reply, app.routes["/didcomm"].unavailable) == (
        didcomm.http_reply,
        didcomm.http_unavailable,
    )
    assert type(app.django) is WSGIHandler
    seen = []
    app.routes = {path: (lambda e, s, path=path: seen.append(path) or []) for path in app.routes}
    app.django = lambda environ, start_response: seen.append("django") or []
    requests = [("POST", "/"), ("GET", "/"), ("OPTIONS", "/"), ("POST", "/health"), ("POST", "/admin/"),
                ("POST", "/didcomm"), ("GET", "/didcomm"), ("POST", "/didcomm/"), ("POST", "/didcomm/ws")]  # fmt: skip
    for method, path in requests:
        app({"REQUEST_METHOD": method, "PATH_INFO": path}, None)
    assert seen == ["/", "django", "django", "django", "django", "/didcomm", "django", "django", "django"]


@pytest.mark.parametrize("path", ["/", "/didcomm"])
def test_django_has_no_protocol_post_one_reaching_it_is_refused_and_logged(tenant_a, caplog, path):
    """A server running Django's own handler instead of the production application."""
    with caplog.at_level(logging.ERROR):
        status, _, body = call(WSGIHandler(), b"{}", path=path)
    assert status == "503 Service Unavailable"
    if path == "/":
        assert json.loads(body) == {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}
    else:
        assert json.loads(body)["body"] == {"code": "e.p.me.unavailable", "comment": "mediator unavailable"}
    assert [r.getMessage() for r in caplog.records if r.name.startswith("mediator.")] == [
        f"POST {path} reached Django's handler: serve mediator_project.wsgi.application"
    ]


def test_a_middleware_the_entry_does_not_know_stops_it_from_starting(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.gzip.GZipMiddleware"]
    with pytest.raises(ImproperlyConfigured, match="GZipMiddleware"):
        protocol_application()


@pytest.mark.parametrize("name, value", [("PREPEND_WWW", True), ("DISALLOWED_USER_AGENTS", [re.compile("bot")])])
def test_a_common_middleware_rule_no_protocol_post_may_get_stops_it_from_starting(settings, name, value):
    """No POST / or POST /didcomm goes to Django's chain instead: the entry is their one way in."""
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        protocol_application()


def _decentrl_entry() -> CommandEntry:
    return CommandEntry(decentrl.http_reply, decentrl.http_unavailable)


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


def test_the_entry_handles_database_connections_once_at_each_end(tenant_a, monkeypatch):
    """What Django's request signals do for connections, the entry does itself, once at each end;
    it sends neither signal (their receivers are checked at start: check_request_signals)."""
    seen = []
    monkeypatch.setattr(dbconn, "request_begins", lambda: seen.append("begins"))
    monkeypatch.setattr(dbconn, "request_ends", lambda: seen.append("ends"))
    request_started.connect(started := lambda **kw: seen.append("request_started"), weak=False)
    request_finished.connect(finished := lambda **kw: seen.append("request_finished"), weak=False)
    try:
        _decentrl_entry()(_environ(b"{"), lambda status, headers, exc_info=None: seen.append(status))
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert seen == ["begins", "400 Bad Request", "ends"]


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
    body = _decentrl_entry()(_environ(b"{"), lambda status, headers, exc_info=None: got.update(status=status))
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
    body = _decentrl_entry()(_environ(b"{"), lambda status, headers, exc_info=None: got.update(status=status))
    assert (got["status"], json.loads(b"".join(body))) == (
        "503 Service Unavailable",
        {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"},
    )


def test_django_own_request_signal_receivers_are_found_and_known():
    """The adapter over Django 5.2's Signal.receivers sees Django's receivers (a Django that stores
    them differently fails here), and every one is in SIGNAL_RECEIVERS."""
    started = set(entry_module._receiver_names(request_started))
    finished = set(entry_module._receiver_names(request_finished))
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
    assert started <= set(entry_module.SIGNAL_RECEIVERS["request_started"])
    assert finished <= set(entry_module.SIGNAL_RECEIVERS["request_finished"])


@pytest.mark.parametrize("signal", [request_started, request_finished])
def test_a_request_signal_receiver_the_entry_does_not_know_stops_it_from_starting(signal):
    def audit(**kwargs):
        pass

    signal.connect(audit, weak=False)
    try:
        with pytest.raises(
            ImproperlyConfigured, match=r"so tests\.serving\.test_entry\.test_a_request_signal_.*audit would not run"
        ):
            protocol_application()
    finally:
        signal.disconnect(audit)


def test_an_unexpected_error_is_a_protocol_shaped_503(tenant_a):
    body = canonical_bytes({"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"})
    broken = ProtocolWSGIApplication({"/": CommandEntry(lambda *a: 1 / 0, decentrl.http_unavailable)})
    assert call(broken, b"{}") == ("503 Service Unavailable", _with_length(body), body)


def test_an_unreachable_database_answers_as_the_tenant_middleware_does(app, tenant_a, monkeypatch):
    from django.db import OperationalError

    def down(host):
        raise OperationalError("down")

    monkeypatch.setattr("apps.tenants.middleware.tenant_for_host", down)
    monkeypatch.setattr("mediator_project.entry.tenant_for_host", down)
    body = b'{"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}'
    # In Django's chain TenantMiddleware answers before CommonMiddleware and XFrameOptionsMiddleware
    # (inner to it) see the reply; the entry gives it those two headers as well.
    without = [h for h in _with_length(body) if h[0] not in ("Content-Length", "X-Frame-Options")]
    assert call(WSGIHandler(), method="GET") == ("503 Service Unavailable", without, body)
    for path in ("/", "/didcomm"):
        assert call(app, b"{}", path=path) == ("503 Service Unavailable", _with_length(body), body)


# --- POST /didcomm -----------------------------------------------------------------------------


def test_forwards_are_stored_through_the_entry(app, tenant_a):
    med = json.loads(call(app, method="GET", path="/didcomm/invitation")[2])["from"]
    wallet = Agent()
    status, headers, body = didcomm_call(app, wallet.pack(wallet.message(CM2 + "mediate-request"), med))
    assert wallet.unpack(body)[0]["type"] == CM2 + "mediate-grant"
    assert status == "200 OK" and ("Content-Type", ENCRYPTED) in headers
    assert _middleware_headers(headers) == django_headers("/didcomm/invitation")
    rcpt = routed_did(med)
    update = wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    assert didcomm_call(app, wallet.pack(update, med))[0] == "200 OK"
    status, headers, body = didcomm_call(app, forward_for(rcpt, med))
    assert (status, body) == ("202 Accepted", b"")
    assert ("Content-Length", "0") in headers and ("X-Frame-Options", "DENY") in headers
    assert not any(name == "Content-Type" for name, _ in headers)
    assert QueuedMessage.objects.count() == 1


def test_problem_reports(app, tenant_a, settings):
    status, headers, report = _without_id(didcomm_call(app, b"{}", content_type="text/plain"))
    assert status == "415 Unsupported Media Type" and ("Content-Type", "application/json") in headers
    assert report["body"] == {
        "code": "e.p.xfer.unsupported-media-type",
        "comment": "use application/didcomm-encrypted+json",
    }
    assert _without_id(didcomm_call(app, b"{}"))[0] == "400 Bad Request"
    settings.MEDIATOR_DEFAULT_TENANT = ""
    status, _, report = _without_id(didcomm_call(app, b"{}", host="nobody.test"))
    assert status == "404 Not Found"
    assert report["body"] == {"code": "e.p.xfer.unknown-mediator", "comment": "no mediator at this host"}
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    status, _, report = _without_id(didcomm_call(app, b"x" * 11))
    assert status == "413 Request Entity Too Large"
    assert report["body"] == {"code": "e.p.xfer.too-big", "comment": "message too large"}


def test_a_broken_v1_envelope_is_a_400_v1_problem_report(app, tenant_a):
    answer = _without_id(didcomm_call(app, b'{"protected": 5}', content_type="application/didcomm-envelope-enc"), "@id")
    assert answer[0] == "400 Bad Request"
    assert answer[2] == {
        "@type": "https://didcomm.org/report-problem/1.0/problem-report",
        "description": {"code": "e.p.msg", "en": "an RFC 0019 envelope needs iv (a base64url string)"},
    }


def test_get_and_other_paths_still_go_to_django(app, tenant_a):
    status, _, body = call(app, method="GET", path="/didcomm/invitation")
    assert status == "200 OK" and json.loads(body)["type"].endswith("out-of-band/2.0/invitation")


def test_an_unexpected_error_in_the_didcomm_entry_is_a_503_problem_report_never_a_500(app, tenant_a, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("apps.didcomm.dispatch.handle", broken)
    status, headers, report = _without_id(didcomm_call(app, b"{}"))
    assert status == "503 Service Unavailable" and ("Content-Type", "application/json") in headers
    assert report == {
        "typ": "application/didcomm-plain+json",
        "type": "https://didcomm.org/report-problem/2.0/problem-report",
        "body": {"code": "e.p.me.unavailable", "comment": "mediator unavailable"},
    }
