"""Requests Django refuses around the machine-facing endpoints get those endpoints' own error
shapes, never Django's HTML pages: another method (405 with Allow, not the CSRF 403 page of a
real client), a Host header that is not a host name (400, a warning without a traceback), more
query parameters than Django parses (400)."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client

from tests.conftest import HOST_A

DECENTRL_405 = (405, "application/json", {"type": "ERROR", "code": "INVALID_COMMAND"})
DECENTRL_400 = (400, "application/json", {"type": "ERROR", "code": "INVALID_COMMAND"})


def _didcomm(status: int, comment: str):
    return (status, "application/json", ("https://didcomm.org/report-problem/2.0/problem-report", "e.p.msg", comment))


def _shape(response):
    content_type = response["Content-Type"].split(";")[0]
    if content_type != "application/json":
        return response.status_code, content_type, response.content.decode()
    body = json.loads(response.content)
    if "body" in body:  # a DIDComm problem report (its id is fresh each time)
        body = (body["type"], body["body"]["code"], body["body"]["comment"])
    return response.status_code, content_type, body


@pytest.mark.parametrize(
    ("path", "allow", "expected"),
    [
        ("/", "GET, HEAD, POST", DECENTRL_405),
        ("/.well-known/did.json", "GET, HEAD", DECENTRL_405),
        ("/public/did:web:example.com", "GET, HEAD", DECENTRL_405),
        ("/health", "GET, HEAD", (405, "application/json", {"status": "error", "detail": "method not allowed"})),
        ("/didcomm", "GET, HEAD, POST", _didcomm(405, "method not allowed")),
        ("/didcomm/invitation", "GET, HEAD", _didcomm(405, "method not allowed")),
        ("/metrics", "GET", (405, "text/plain", "method not allowed\n")),
    ],
)
def test_another_method_gets_the_endpoints_405_not_the_csrf_page(tenant_a, path, allow, expected):
    client = Client(enforce_csrf_checks=True)  # as a real client: no CSRF exemption by the test client
    methods = ("put", "patch", "delete") if "POST" in allow else ("post", "put", "patch", "delete")
    for method in methods:
        response = getattr(client, method)(path, data=b"{}", content_type="application/json", HTTP_HOST=HOST_A)
        assert (_shape(response), response["Allow"]) == (expected, allow), (path, method)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", DECENTRL_400),
        ("/.well-known/did.json", DECENTRL_400),
        ("/public/did:web:example.com", DECENTRL_400),
        ("/health", (400, "application/json", {"status": "error", "detail": "bad request"})),
        ("/didcomm/invitation", _didcomm(400, "bad request")),
        ("/metrics", (400, "text/plain", "bad request\n")),
    ],
)
@pytest.mark.parametrize("host", ["localhost:", "x y", "[::1", "user@localhost"])
def test_a_host_header_that_is_not_a_host_name_is_a_400_in_the_endpoints_shape(tenant_a, caplog, path, expected, host):
    with caplog.at_level(logging.INFO):
        response = Client().get(path, HTTP_HOST=host)
    assert _shape(response) == expected
    [record] = [r for r in caplog.records if r.name.startswith("django.security")]
    assert (record.name, record.levelname, record.exc_info) == ("django.security.DisallowedHost", "WARNING", None)
    assert "Traceback" not in caplog.text


def test_the_operator_api_answers_a_bad_host_in_json(db, settings):
    settings.MEDIATOR_OPERATOR_HOSTS = ["*"]
    response = Client().get("/api/v1/tenants/", HTTP_HOST="localhost:")
    assert _shape(response) == (400, "application/json", {"detail": "Bad request."})


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/public/did:web:example.com", DECENTRL_400),
        ("/didcomm/invitation", _didcomm(400, "too many query parameters")),
    ],
)
def test_more_query_parameters_than_django_parses_is_a_protocol_400(tenant_a, path, expected):
    response = Client().get(path + "?" + "a=1&" * 2000, HTTP_HOST=HOST_A)
    assert _shape(response) == expected
