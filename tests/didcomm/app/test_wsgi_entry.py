"""POST /didcomm through the production WSGI entry (mediator_project/wsgi.py: apps/decentrl/wsgi.py's
CommandEntry with apps/didcomm/dispatch.py's `http_reply`) gives what Django's full handler gives (the
view `endpoint` behind every middleware): same status, same headers, same body (problem reports
differ only in their random `id`)."""

from __future__ import annotations

import json

import pytest
from django.core.handlers.wsgi import WSGIHandler

from apps.decentrl.wsgi import CommandEntry, ProtocolWSGIApplication
from apps.didcomm.dispatch import http_reply, http_unavailable
from apps.didcomm.models import QueuedMessage
from tests.support.didcomm_agent import CM2, ENCRYPTED, Agent, forward_for, routed_did
from tests.support.entry import wsgi_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def handlers(db):
    """(Django's full handler, the production application as mediator_project/wsgi.py builds it)."""
    return WSGIHandler(), ProtocolWSGIApplication({"/didcomm": CommandEntry(http_reply, http_unavailable)})


def call(app, body: bytes, content_type: str = ENCRYPTED, **kw):
    return wsgi_call(app, body, path="/didcomm", CONTENT_TYPE=content_type, **kw)


def _without_id(result):
    status, headers, body = result
    report = json.loads(body)
    report.pop("id")
    return status, headers, report


def test_the_production_application_routes_post_didcomm_to_the_lean_entry():
    from mediator_project.wsgi import application

    entry = application.routes["/didcomm"]
    assert (entry.reply, entry.unavailable) == (http_reply, http_unavailable)
    seen = []
    app = ProtocolWSGIApplication({"/didcomm": lambda environ, start_response: seen.append("didcomm") or []})
    app.commands = lambda environ, start_response: seen.append("commands") or []
    app.django = lambda environ, start_response: seen.append("django") or []
    for method, path in (
        ("POST", "/didcomm"),
        ("GET", "/didcomm"),
        ("POST", "/didcomm/"),
        ("POST", "/"),
        ("POST", "/didcomm/ws"),
    ):
        app({"REQUEST_METHOD": method, "PATH_INFO": path}, None)
    assert seen == ["didcomm", "django", "django", "commands", "django"]


def test_forwards_are_stored_identically_on_both_handlers(handlers, client, tenant_a):
    full, entry = handlers
    med = json.loads(client.get("/didcomm/invitation", HTTP_HOST="a.mediator.test").content)["from"]
    wallet = Agent()
    answers = []
    for app in (full, entry):
        status, headers, body = call(app, wallet.pack(wallet.message(CM2 + "mediate-request"), med))
        answers.append((status, [h for h in headers if h[0] != "Content-Length"]))
        assert wallet.unpack(body)[0]["type"] == CM2 + "mediate-grant"
    assert answers[0] == answers[1] and answers[0][0] == "200 OK"
    rcpt = routed_did(med)
    update = wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    assert call(entry, wallet.pack(update, med))[0] == "200 OK"
    replies = [call(app, forward_for(rcpt, med)) for app in (full, entry)]
    assert replies[0] == replies[1]
    assert replies[1][0] == "202 Accepted" and replies[1][2] == b""
    assert ("Content-Length", "0") in replies[1][1] and ("X-Frame-Options", "DENY") in replies[1][1]
    assert not any(name == "Content-Type" for name, _ in replies[1][1])
    assert QueuedMessage.objects.count() == 2


def test_problem_reports_are_the_same(handlers, tenant_a, settings):
    full, entry = handlers
    media = [_without_id(call(app, b"{}", content_type="text/plain")) for app in (full, entry)]
    assert media[0] == media[1]
    assert media[1][0] == "415 Unsupported Media Type" and ("Content-Type", "application/json") in media[1][1]
    assert media[1][2]["body"] == {
        "code": "e.p.xfer.unsupported-media-type",
        "comment": "use application/didcomm-encrypted+json",
    }
    undecryptable = [_without_id(call(app, b"{}")) for app in (full, entry)]
    assert undecryptable[0] == undecryptable[1] and undecryptable[1][0] == "400 Bad Request"
    settings.MEDIATOR_DEFAULT_TENANT = ""
    unknown = [_without_id(call(app, b"{}", host="nobody.test")) for app in (full, entry)]
    assert unknown[0] == unknown[1] and unknown[1][0] == "404 Not Found"
    assert unknown[1][2]["body"] == {"code": "e.p.xfer.unknown-mediator", "comment": "no mediator at this host"}
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    too_big = [_without_id(call(app, b"x" * 11)) for app in (full, entry)]
    assert too_big[0] == too_big[1]
    assert too_big[1][0] == "413 Request Entity Too Large"
    assert too_big[1][2]["body"] == {"code": "e.p.xfer.too-big", "comment": "message too large"}


def test_a_broken_v1_envelope_is_the_same_400_v1_problem_report_on_both(handlers, tenant_a):
    full, entry = handlers
    answers = []
    for app in (full, entry):
        status, headers, body = call(app, b'{"protected": 5}', content_type="application/didcomm-envelope-enc")
        report = json.loads(body)
        report.pop("@id")
        answers.append((status, headers, report))
    assert answers[0] == answers[1]
    assert answers[1][0] == "400 Bad Request"
    assert answers[1][2] == {
        "@type": "https://didcomm.org/report-problem/1.0/problem-report",
        "description": {"code": "e.p.msg", "en": "an RFC 0019 envelope needs iv (a base64url string)"},
    }


def test_get_and_other_paths_still_go_to_django(handlers, tenant_a):
    _, entry = handlers
    status, _, body = wsgi_call(entry, method="GET", path="/didcomm/invitation")
    assert status == "200 OK" and json.loads(body)["type"].endswith("out-of-band/2.0/invitation")


def test_an_unexpected_error_in_the_entry_is_a_503_problem_report_never_a_500(handlers, tenant_a, monkeypatch):
    _, entry = handlers

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("apps.didcomm.dispatch.handle", broken)
    status, headers, report = _without_id(call(entry, b"{}"))
    assert status == "503 Service Unavailable" and ("Content-Type", "application/json") in headers
    assert report == {
        "typ": "application/didcomm-plain+json",
        "type": "https://didcomm.org/report-problem/2.0/problem-report",
        "body": {"code": "e.p.me.unavailable", "comment": "mediator unavailable"},
    }
