"""The operator surfaces answer only on MEDIATOR_OPERATOR_HOSTS (issue 13 item 7): on a customer's
domain or a host no tenant claims, /admin/, /api/v1/ and /dashboard/ are a plain 404 (JSON under
/api/), never the login page, even for a logged-in operator; the protocol endpoints keep answering
there. In-process through Django's handler and the production WSGI entry, for both settings
("*", the development default, and a listed host, as production requires), the settings
themselves, and once through the real HTTP server (Granian) in production mode."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from apps.tenants.middleware import OPERATOR_PATH_PREFIXES
from apps.tenants.models import AuditEntry
from apps.tenants.services import api_token_issue
from mediator_project.entry import CommandEntry, protocol_application
from tests.conftest import HOST_A
from tests.support import servers
from tests.support.entry import wsgi_call as call
from tests.support.registration import register
from tests.tenants.test_services import STRONG_SECRET, _import_settings

OPS_HOST = "ops.mediator.test"
API_404 = (404, "application/json", b'{"detail":"Not found."}')
PAGE_404 = (404, "text/plain; charset=utf-8", b"Not Found\n")

OPERATOR_PATHS = [
    "/admin/",
    "/admin/login/",
    "/admin/tenants/tenant/",
    "/dashboard/",
    "/dashboard/reports/",
    "/api/v1/tenants/",
    "/api/v1/tenants/tenant-a/",
    "/api/v1/audit/",
    "/api/v1/usage/reports/",
    "/api/v1/schema/",
    "/api/v1/docs/",
]
ELSEWHERE = [HOST_A, f"{HOST_A}:8443", "nobody.test", "ops.mediator.test.evil.test", "127.0.0.1"]


@pytest.fixture
def listed(settings):
    settings.MEDIATOR_OPERATOR_HOSTS = [OPS_HOST]


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def token(operator) -> str:
    return f"Token {api_token_issue(user=operator).key}"


def _shape(resp) -> tuple:
    return resp.status_code, resp["Content-Type"], resp.content


@pytest.mark.parametrize("host", ELSEWHERE)
@pytest.mark.parametrize("path", OPERATOR_PATHS)
def test_operator_surfaces_are_a_plain_404_on_other_hosts(listed, operator_client, token, tenant_a, host, path):
    """Even a logged-in superuser with a valid token: the surface does not exist on this host."""
    expected = API_404 if path.startswith("/api/") else PAGE_404
    assert _shape(operator_client.get(path, HTTP_HOST=host, HTTP_AUTHORIZATION=token)) == expected
    assert _shape(Client().get(path, HTTP_HOST=host)) == expected  # not the login redirect
    assert _shape(Client().post(path, {}, HTTP_HOST=host)) == expected


def test_an_api_write_on_a_tenant_host_changes_nothing(listed, token, tenant_a):
    resp = Client().post("/api/v1/tenants/tenant-a/suspend/", HTTP_HOST=HOST_A, HTTP_AUTHORIZATION=token)
    assert _shape(resp) == API_404
    tenant_a.refresh_from_db()
    assert tenant_a.is_active and AuditEntry.objects.count() == 0


@pytest.mark.parametrize("host", [OPS_HOST, f"{OPS_HOST}:8443", "OPS.Mediator.Test.", f"{OPS_HOST}.:8443"])
def test_operator_surfaces_answer_on_a_listed_host_on_any_port(listed, operator_client, token, tenant_a, host):
    assert Client().get("/admin/", HTTP_HOST=host).status_code == 302  # the login page, as before
    assert Client().get("/admin/login/", HTTP_HOST=host).status_code == 200
    assert operator_client.get("/admin/tenants/tenant/", HTTP_HOST=host).status_code == 200
    assert operator_client.get("/dashboard/reports/", HTTP_HOST=host).status_code == 200
    resp = Client().get("/api/v1/tenants/", HTTP_HOST=host, HTTP_AUTHORIZATION=token)
    assert resp.status_code == 200 and resp.json()["count"] == 1


def test_a_listed_host_with_a_port_matches_only_that_port(settings, operator_client):
    settings.MEDIATOR_OPERATOR_HOSTS = [f"{OPS_HOST}:8443"]
    assert operator_client.get("/admin/", HTTP_HOST=f"{OPS_HOST}:8443").status_code == 200
    assert _shape(operator_client.get("/admin/", HTTP_HOST=OPS_HOST)) == PAGE_404
    assert _shape(operator_client.get("/admin/", HTTP_HOST=f"{OPS_HOST}:9000")) == PAGE_404


@pytest.mark.parametrize("host", ELSEWHERE)
def test_every_host_serves_the_operator_surfaces_with_the_development_default(settings, operator_client, host):
    settings.MEDIATOR_OPERATOR_HOSTS = ["*"]
    assert operator_client.get("/admin/tenants/tenant/", HTTP_HOST=host).status_code == 200
    assert Client().get("/admin/", HTTP_HOST=host).status_code == 302
    assert Client().get("/api/v1/tenants/", HTTP_HOST=host).status_code == 401


@pytest.mark.parametrize("operator_hosts", [[OPS_HOST], ["*"]])
def test_protocol_endpoints_keep_answering_on_tenant_hosts(settings, post_a, tenant_a, alice, operator_hosts):
    settings.MEDIATOR_OPERATOR_HOSTS = operator_hosts
    client = Client()
    doc = client.get("/", HTTP_HOST=HOST_A)
    assert doc.status_code == 200 and doc.json()["id"] == tenant_a.did
    assert client.get("/.well-known/did.json", HTTP_HOST=HOST_A).json()["id"] == tenant_a.did
    health = client.get("/health", HTTP_HOST=HOST_A)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    public = client.get(f"/public/{alice.did}", HTTP_HOST=HOST_A)
    assert public.status_code == 200 and public.json()["payload"]["public_events"] == []
    register(post_a, alice, tenant_a)  # POST /: a command reaches the dispatcher and succeeds


def test_the_production_wsgi_entry_applies_the_rule_and_keeps_post_root_bare(listed, tenant_a):
    """The HTTP server's application: POST / goes to the command entry (which never serves an operator
    path), everything else to Django's full handler, where the rule holds."""
    app = protocol_application()
    assert isinstance(app.routes["/"], CommandEntry)
    status, headers, body = call(app, method="GET", path="/admin/login/", host=HOST_A)
    assert (status, dict(headers)["Content-Type"], body) == ("404 Not Found", *PAGE_404[1:])
    status, headers, body = call(app, b"{}", method="POST", path="/api/v1/tenants/", host=HOST_A)
    assert (status, dict(headers)["Content-Type"], body) == ("404 Not Found", *API_404[1:])
    assert call(app, method="GET", path="/admin/login/", host=OPS_HOST)[0] == "200 OK"
    status, _, body = call(app, b"{", host=HOST_A)
    assert (status, body) == ("400 Bad Request", b'{"code":"INVALID_COMMAND","type":"ERROR"}')


def _top_routes(patterns, prefix=""):
    for p in patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver) and route == "":
            yield from _top_routes(p.url_patterns, route)
        elif isinstance(p, URLPattern | URLResolver):
            yield "/" + route


def test_every_route_is_either_a_protocol_endpoint_or_an_operator_surface():
    """A new page outside the operator prefixes must be a deliberate protocol endpoint."""
    protocol = {
        "/",
        "/.well-known/did.json",
        "/health",
        "/public/<path:did>",
        "/metrics",
        "/didcomm",
        "/didcomm/invitation",
        "/favicon.ico",  # the console's icon for any browser on any host: a redirect to a static file
    }
    others = {r for r in _top_routes(get_resolver().url_patterns) if not r.startswith(OPERATOR_PATH_PREFIXES)}
    assert others == protocol


def test_the_development_default_is_every_host(tmp_path):
    out = _run_settings(PRINT_HOSTS, {"MEDIATOR_VAR_DIR": str(tmp_path)})
    assert out.stdout.strip() == "['*']", out.stderr


PRINT_HOSTS = "import django; django.setup(); from django.conf import settings; print(settings.MEDIATOR_OPERATOR_HOSTS)"


def _run_settings(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIATOR_", "DJANGO_"))}
    env.update({"PYTHONPATH": str(servers.ROOT), "DJANGO_SETTINGS_MODULE": "mediator_project.settings"}, **env_extra)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=servers.ROOT, env=env, capture_output=True, text=True, timeout=60
    )


PRODUCTION = {"MEDIATOR_ENV": "production", "DJANGO_SECRET_KEY": STRONG_SECRET, "MEDIATOR_DEPLOYMENT_KEY": "ab" * 32}


def test_production_fails_at_startup_without_operator_hosts(tmp_path):
    result = _import_settings({**PRODUCTION, "MEDIATOR_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert (
        "ImproperlyConfigured: MEDIATOR_OPERATOR_HOSTS must be set in production: the host names that serve "
        '/admin/, /api/v1/ and /dashboard/ (comma-separated host or host:port; "*" for every host)'
    ) in result.stderr


def test_production_reads_the_listed_operator_hosts(tmp_path):
    out = _run_settings(
        PRINT_HOSTS,
        {
            **PRODUCTION,
            "MEDIATOR_VAR_DIR": str(tmp_path),
            "MEDIATOR_OPERATOR_HOSTS": " Ops.Example:8443, admin.example. ",
        },
    )
    assert out.stdout.strip() == "['ops.example:8443', 'admin.example']", out.stderr


@pytest.mark.parametrize("value", ["https://ops.example", "ops example", "ops.example/admin"])
def test_a_malformed_operator_host_fails_at_startup(tmp_path, value):
    result = _import_settings({"MEDIATOR_VAR_DIR": str(tmp_path), "MEDIATOR_OPERATOR_HOSTS": value})
    assert result.returncode != 0
    assert f"ImproperlyConfigured: MEDIATOR_OPERATOR_HOSTS: not a host or host:port: {value!r}" in result.stderr


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_real_http_server_in_production_mode_serves_operators_only_on_their_host(tmp_path, django_user_model):
    from apps.tenants.services import tenant_create

    port = servers.free_port()
    tenant_create(slug="acme", domain="acme.example")
    user = django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")
    token = f"Token {api_token_issue(user=user).key}"
    env = servers.server_env(
        {
            **PRODUCTION,
            "MEDIATOR_DEPLOYMENT_KEY": django_settings.MEDIATOR_DEPLOYMENT_KEY,
            "MEDIATOR_VAR_DIR": str(tmp_path / "var"),
            "MEDIATOR_OPERATOR_HOSTS": OPS_HOST,
            "HTTP_PORT": str(port),
            "HTTP_WORKERS": "1",
            "HTTP_THREADS": "2",
        }
    )
    log_path = tmp_path / "granian.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mediator_project.http_server"],
        cwd=servers.ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                httpx.get(base + "/health", headers={"Host": "acme.example"}, timeout=1)
                break
            except httpx.HTTPError:
                assert time.time() < deadline, log_path.read_text()
                time.sleep(0.2)
        with httpx.Client(base_url=base, timeout=10) as http:
            for host in ("acme.example", "nobody.example"):
                resp = http.get("/admin/login/", headers={"Host": host})
                assert (resp.status_code, resp.headers["content-type"], resp.content) == PAGE_404
                resp = http.post("/api/v1/tenants/acme/suspend/", headers={"Host": host, "Authorization": token})
                assert (resp.status_code, resp.headers["content-type"], resp.content) == API_404
            doc = http.get("/", headers={"Host": "acme.example"})
            assert doc.status_code == 200 and doc.json()["id"] == "did:web:acme.example"
            bad = http.post("/", content=b"{", headers={"Host": "acme.example", "Content-Type": "application/json"})
            assert (bad.status_code, bad.json()) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
            assert http.get("/admin/login/", headers={"Host": OPS_HOST}).status_code == 200
            listing = http.get("/api/v1/tenants/", headers={"Host": OPS_HOST, "Authorization": token})
            assert listing.status_code == 200 and [t["slug"] for t in listing.json()["results"]] == ["acme"]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
