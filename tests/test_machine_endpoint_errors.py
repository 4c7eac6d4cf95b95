"""Requests Django refuses around the machine-facing endpoints get those endpoints' own error
shapes, never Django's HTML pages: another method (405 with Allow, not the CSRF 403 page of a
real client), a Host header that is not a host name (400, a warning without a traceback), more
query parameters than Django parses (400), a path no route serves (404), an exception no view
answered (mediator_project/errors.py).

This module is also the URL map of the 500 tests (`pytest.mark.urls`): views that raise, at paths
of every surface, before the project's map and with the project's own error handlers."""

from __future__ import annotations

import json
import logging

import pytest
from django.http import HttpRequest
from django.test import Client
from django.urls import path as route

from mediator_project import urls as project_urls
from mediator_project.urls import handler400, handler404, handler500  # noqa: F401 - this map's handlers
from tests.conftest import HOST_A

DECENTRL_405 = (405, "application/json", {"type": "ERROR", "code": "INVALID_COMMAND"})
DECENTRL_400 = (400, "application/json", {"type": "ERROR", "code": "INVALID_COMMAND"})


def _didcomm(status: int, comment: str, code: str = "e.p.msg"):
    return (status, "application/json", ("https://didcomm.org/report-problem/2.0/problem-report", code, comment))


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


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/nonexistent", (404, "application/json", {"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})),
        ("/public/", (404, "application/json", {"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})),
        ("/.well-known/other.json", (404, "application/json", {"type": "ERROR", "code": "UNKNOWN_MEDIATOR"})),
        ("/didcomm/nonexistent", _didcomm(404, "no DIDComm endpoint at this path", "e.p.xfer.unknown-mediator")),
        ("/api/v1/nonexistent/", (404, "application/json", {"detail": "Not found."})),
    ],
)
def test_a_path_no_route_serves_is_a_404_in_the_surfaces_shape(tenant_a, settings, path, expected):
    settings.MEDIATOR_OPERATOR_HOSTS = ["*"]
    for method in ("get", "post"):
        response = getattr(Client(enforce_csrf_checks=True), method)(path, HTTP_HOST=HOST_A)
        assert _shape(response) == expected, (path, method)


def test_the_console_keeps_djangos_404_page(tenant_a):
    status, content_type, page = _shape(Client().get("/dashboard/nonexistent", HTTP_HOST=HOST_A))
    assert (status, content_type, "<h1>Not Found</h1>" in page) == (404, "text/html", True)


def _raises(request: HttpRequest):
    raise RuntimeError("a defect")


urlpatterns = [
    route("boom", _raises),
    route("didcomm/boom", _raises),
    route("api/v1/boom", _raises),
    route("health", _raises),
    route("metrics", _raises),
    route("dashboard/boom", _raises),
    *project_urls.urlpatterns,
]


@pytest.mark.urls(__name__)
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/boom", (503, "application/json", {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"})),
        ("/didcomm/boom", _didcomm(503, "mediator unavailable", "e.p.me.unavailable")),
        ("/api/v1/boom", (500, "application/json", {"detail": "A server error occurred."})),
        ("/health", (500, "application/json", {"status": "error", "detail": "a server error occurred"})),
        ("/metrics", (500, "text/plain", "a server error occurred\n")),
    ],
)
def test_an_exception_no_view_answered_gets_the_surfaces_error(tenant_a, path, expected):
    response = Client(raise_request_exception=False).get(path, HTTP_HOST=HOST_A)
    assert _shape(response) == expected


@pytest.mark.urls(__name__)
def test_the_console_keeps_djangos_500_page(tenant_a):
    status, content_type, page = _shape(Client(raise_request_exception=False).get("/dashboard/boom", HTTP_HOST=HOST_A))
    assert (status, content_type, "<h1>Server Error (500)</h1>" in page) == (500, "text/html", True)


def test_the_project_map_names_the_error_handlers():
    assert (project_urls.handler400, project_urls.handler404, project_urls.handler500) == (
        "mediator_project.errors.bad_request",
        "mediator_project.errors.not_found",
        "mediator_project.errors.server_error",
    )
