"""The operator API (/api/v1/): staff-only token auth, validation as JSON, audit entries, schema and docs."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from apps.tenants.models import AuditEntry, Tenant, TenantKey
from apps.tenants.services import api_token_issue
from tests.support.registration import register


def test_anonymous_requests_are_refused(client, tenant_a):
    resp = client.get("/api/v1/tenants/")
    assert resp.status_code == 401
    assert resp.json() == {"detail": "Authentication credentials were not provided."}


def test_a_bad_token_is_refused(client, tenant_a):
    resp = client.get("/api/v1/tenants/", HTTP_AUTHORIZATION="Token nope")
    assert (resp.status_code, resp.json()) == (401, {"detail": "Invalid token."})


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/tenants/"),
        ("post", "/api/v1/tenants/"),
        ("get", "/api/v1/tenants/tenant-a/"),
        ("patch", "/api/v1/tenants/tenant-a/"),
        ("post", "/api/v1/tenants/tenant-a/suspend/"),
        ("post", "/api/v1/tenants/tenant-a/rotate-keys/"),
        ("get", "/api/v1/tenants/tenant-a/statistics/"),
        ("get", "/api/v1/audit/"),
        ("get", "/api/v1/schema/"),
    ],
)
def test_a_non_staff_token_is_forbidden(plain_api, tenant_a, method, path):
    resp = getattr(plain_api, method)(path, {}, format="json")
    assert resp.status_code == 403
    assert b"You do not have permission to perform this action." in resp.content
    tenant_a.refresh_from_db()
    assert tenant_a.is_active and AuditEntry.objects.count() == 0


def test_list_and_retrieve(api, tenant_a, tenant_b):
    resp = api.get("/api/v1/tenants/")
    assert resp.status_code == 200
    body = resp.json()
    assert body["count"] == 2 and [t["slug"] for t in body["results"]] == ["tenant-a", "tenant-b"]
    resp = api.get("/api/v1/tenants/tenant-a/")
    data = resp.json()
    assert resp.status_code == 200
    assert data["did"] == "did:web:a.mediator.test" and data["status"] == "active" and data["aliases"] == []
    assert data["policy"]["max_registration_days"] == 365 and data["policy"]["rate_limit_per_did"] is None
    assert set(data["keys"]) == {"signing_key_fingerprint", "prekey_fingerprint", "rotated_at", "prekey_grace_hours"}
    assert "sealed" not in str(data)
    assert api.get("/api/v1/tenants/nope/").status_code == 404


def test_create_returns_201_and_is_audited(api, operator, client):
    resp = api.post(
        "/api/v1/tenants/",
        {
            "slug": "acme",
            "domain": "acme.test:8443",
            "aliases": ["m.acme.test"],
            "policy": {"max_identities": 10, "registration_open": False},
        },
        format="json",
    )
    assert resp.status_code == 201, resp.json()
    data = resp.json()
    assert (data["did"], data["aliases"], data["policy"]["max_identities"]) == (
        "did:web:acme.test%3A8443",
        ["m.acme.test"],
        10,
    )
    assert data["policy"]["registration_open"] is False
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.actor_id, entry.tenant_slug) == ("tenant.create", "api", operator.pk, "acme")
    # Its DID document is served on its host and on its alias at once.
    for host in ("acme.test:8443", "m.acme.test"):
        doc = client.get("/", HTTP_HOST=host)
        assert doc.status_code == 200 and doc.json()["id"] == "did:web:acme.test%3A8443"


@pytest.mark.parametrize(
    ("payload", "errors"),
    [
        ({"domain": "x.test"}, {"slug": ["This field is required."]}),
        (
            {"slug": "bad slug!", "domain": "x.test"},
            {"slug": ['Enter a valid "slug" consisting of letters, numbers, underscores or hyphens.']},
        ),
        ({"slug": "x", "domain": "not a host"}, {"domain": ["'not a host' is not a host name (host or host:port)"]}),
        (
            {"slug": "x", "domain": "x.test", "policy": {"max_page_size": 0}},
            {"policy": {"max_page_size": ["Must be between 1 and 100."]}},
        ),
        (
            {"slug": "x", "domain": "x.test", "policy": {"max_page_sise": 5}},
            {"policy": {"max_page_sise": ["Unknown field."]}},
        ),
        ({"slug": "x", "domain": "x.test", "colour": "red"}, {"colour": ["Unknown field."]}),
    ],
)
def test_create_validation_errors_are_clear_json(api, tenant_a, payload, errors):
    resp = api.post("/api/v1/tenants/", payload, format="json")
    assert resp.status_code == 400
    assert resp.json() == errors
    assert Tenant.objects.count() == 1 and AuditEntry.objects.count() == 0


def test_a_body_that_is_not_json_is_a_clear_400(api, tenant_a):
    # Conflicts (a slug or host already taken) are 409: tests/console/test_api_contract.py.
    resp = api.generic("POST", "/api/v1/tenants/", "{not json", content_type="application/json")
    assert resp.status_code == 400
    assert resp.json() == {
        "non_field_errors": [
            "JSON parse error - Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
        ]
    }


def test_update_policy_is_audited_with_before_and_after(api, tenant_a):
    resp = api.patch(
        "/api/v1/tenants/tenant-a/",
        {"name": "A", "policy": {"pending_queue_cap": 50, "rate_limit_per_ip": 10}, "aliases": ["a2.test"]},
        format="json",
    )
    assert resp.status_code == 200, resp.json()
    data = resp.json()
    assert (
        data["name"],
        data["policy"]["pending_queue_cap"],
        data["policy"]["rate_limit_per_ip"],
        data["aliases"],
    ) == ("A", 50, 10, ["a2.test"])
    entry = AuditEntry.objects.get()
    assert entry.action == "tenant.update" and entry.via == "api"
    assert (entry.before["pending_queue_cap"], entry.after["pending_queue_cap"]) == (10_000, 50)
    assert (entry.before["rate_limit_per_ip"], entry.after["rate_limit_per_ip"]) == (None, 10)
    resp = api.patch("/api/v1/tenants/tenant-a/", {"domain": "elsewhere.test"}, format="json")
    assert (resp.status_code, resp.json()) == (
        400,
        {"domain": ["The primary domain cannot be changed: its did:web follows it. Add an alias instead."]},
    )
    resp = api.patch("/api/v1/tenants/tenant-a/", {"slug": "b", "status": "suspended", "colour": 1}, format="json")
    assert (resp.status_code, resp.json()) == (
        400,
        {
            "colour": ["Unknown field."],
            "slug": ["The slug cannot be changed."],
            "status": ["Use POST …/suspend/ or …/resume/ to change the status."],
        },
    )
    resp = api.patch("/api/v1/tenants/tenant-a/", {"policy": {"max_body_bytes": "big"}}, format="json")
    assert (resp.status_code, resp.json()) == (400, {"policy": {"max_body_bytes": ["A valid integer is required."]}})


def test_suspend_resume_and_rotate(api, client, tenant_a):
    resp = api.post("/api/v1/tenants/tenant-a/suspend/")
    assert (resp.status_code, resp.json()["status"]) == (200, "suspended")
    assert client.get("/health", HTTP_HOST="a.mediator.test").status_code == 503
    resp = api.post("/api/v1/tenants/tenant-a/resume/")
    assert (resp.status_code, resp.json()["status"]) == (200, "active")
    before = api.get("/api/v1/tenants/tenant-a/").json()["keys"]
    resp = api.post("/api/v1/tenants/tenant-a/rotate-keys/", {"signing": True, "prekey": False}, format="json")
    after = resp.json()["keys"]
    assert resp.status_code == 200
    assert after["signing_key_fingerprint"] != before["signing_key_fingerprint"]
    assert after["prekey_fingerprint"] == before["prekey_fingerprint"] and after["rotated_at"] is not None
    assert list(TenantKey.objects.values_list("purpose", flat=True)) == ["signing"]
    resp = api.post("/api/v1/tenants/tenant-a/rotate-keys/", {"signing": False, "prekey": False}, format="json")
    assert (resp.status_code, resp.json()) == (400, {"keys": ["Choose the signing key, the pre-key, or both."]})
    # An empty body names no key: refused, not "both" by default.
    resp = api.post("/api/v1/tenants/tenant-a/rotate-keys/", {}, format="json")
    assert (resp.status_code, resp.json()) == (
        400,
        {"non_field_errors": ['Name the keys to rotate: {"signing": true, "prekey": true}.']},
    )
    assert TenantKey.objects.count() == 1
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "via"))
    assert actions == [("tenant.suspend", "api"), ("tenant.resume", "api"), ("tenant.rotate_keys", "api")]
    resp = api.get("/api/v1/audit/?tenant=tenant-a")
    assert [e["action"] for e in resp.json()["results"]] == ["tenant.rotate_keys", "tenant.resume", "tenant.suspend"]


def test_statistics_and_purge(api, post_a, tenant_a, alice, tenant_b):
    register(post_a, alice, tenant_a)
    resp = api.get("/api/v1/tenants/tenant-a/statistics/")
    data = resp.json()
    assert resp.status_code == 200
    assert {
        k: data[k]
        for k in (
            "registered_identities",
            "contracts",
            "live_contracts",
            "pending_events",
            "stored_events",
            "stored_event_bytes",
        )
    } == {
        "registered_identities": 1,
        "contracts": 1,
        "live_contracts": 1,
        "pending_events": 0,
        "stored_events": 0,
        "stored_event_bytes": 0,
    }
    assert data["last_activity"] is not None
    assert api.get("/api/v1/tenants/tenant-b/statistics/").json()["registered_identities"] == 0
    resp = api.post("/api/v1/tenants/tenant-a/purge-expired/", {}, format="json")
    assert resp.status_code == 200
    assert resp.json() == {
        "dry_run": True,
        "counts": {
            "pending_events": 0,
            "contract_requests": 0,
            "contracts": 0,
            "tombstones": 0,
            "nonces": 0,
            "didcomm_messages": 0,
            "didcomm_outbound": 0,
            "didcomm_message_ids": 0,
        },
        "summary": "would purge 0 pending events, 0 contract requests, 0 contracts, 0 tombstones, 0 nonces, "
        "0 didcomm messages, 0 didcomm outbound, 0 didcomm message ids",
    }
    assert AuditEntry.objects.count() == 0
    resp = api.post("/api/v1/tenants/tenant-a/purge-expired/", {"dry_run": False}, format="json")
    assert resp.json()["dry_run"] is False and AuditEntry.objects.get().action == "tenant.purge_expired"


def test_the_openapi_schema_and_offline_docs_are_served(api, staff_client):
    resp = api.get("/api/v1/schema/?format=json")
    assert resp.status_code == 200
    schema = resp.json()
    assert schema["info"]["title"] == "Decentrl mediator operator API"
    assert {"/api/v1/tenants/", "/api/v1/tenants/{slug}/rotate-keys/", "/api/v1/tenants/{slug}/statistics/"} <= set(
        schema["paths"]
    )
    operations = [op for ops in schema["paths"].values() for op in ops.values()]
    titles = {op["operationId"]: op["summary"] for op in operations}
    assert titles["audit_list"] == "List operator actions (audit log)"
    assert titles["tenants_rotate_keys_create"] == "Rotate a tenant's keys"
    assert all(op["summary"] and "_" not in op["summary"] for op in operations), titles
    for op in operations:
        assert {"401", "403"} <= set(op["responses"]), op["operationId"]
    create = schema["paths"]["/api/v1/tenants/"]["post"]["responses"]
    assert create["400"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ValidationErrors"}
    assert "Authorization: Token <key>" in schema["info"]["description"]
    body_size = schema["components"]["schemas"]["Policy"]["properties"]["max_body_bytes"]
    assert body_size["title"] == "Largest request body (bytes)"
    assert body_size["description"].endswith("Allowed 1024 (1.0 KiB)–67108864 (64.0 MiB). Default 6291456 (6.0 MiB).")
    assert {"tokenAuth", "cookieAuth"} <= set(schema["components"]["securitySchemes"])
    for path in ("/api/v1/docs/", "/api/v1/redoc/"):
        resp = staff_client.get(path)
        assert resp.status_code == 200
        html = resp.content.decode()
        # The UI bundles come from the sidecar (our own static files), not a CDN.
        assert "cdn.jsdelivr.net" not in html and "/static/drf_spectacular_sidecar/" in html
    assert staff_client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js").status_code == 200


def test_the_operator_token_command_prints_a_staff_token_once(operator, plain_user):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("operator_token", "olivia", stdout=out)
    key = out.getvalue().strip()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/tenants/").status_code == 200
    with pytest.raises(CommandError, match="shown once"):
        call_command("operator_token", "olivia", stdout=StringIO())
    rotated = StringIO()
    call_command("operator_token", "olivia", "--rotate", stdout=rotated)
    assert rotated.getvalue().strip() != key
    assert api.get("/api/v1/tenants/").status_code == 401  # the old key went with --rotate
    with pytest.raises(CommandError):
        call_command("operator_token", "mallory")


def test_a_logged_in_operator_can_call_the_api_with_the_session_and_its_csrf_token(operator, tenant_a):
    """What Swagger UI's "Try it out" sends from the console: the session cookie and X-CSRFToken."""
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(operator)
    assert browser.get("/api/v1/tenants/tenant-a/").json()["slug"] == "tenant-a"
    resp = browser.post("/api/v1/tenants/tenant-a/suspend/")
    assert (resp.status_code, resp.json()) == (403, {"detail": "CSRF Failed: CSRF cookie not set."})
    script = browser.get("/api/v1/docs/?script")  # Swagger UI start-up script: sets the cookie, carries the token
    assert script["Content-Type"].startswith("application/javascript")
    token = browser.cookies["csrftoken"].value
    resp = browser.post("/api/v1/tenants/tenant-a/suspend/", content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert (resp.status_code, resp.json()["status"]) == (200, "suspended")
    assert AuditEntry.objects.get().via == "api"


@pytest.mark.parametrize("path", ["/api/v1/docs/?format=xml", "/api/v1/docs/", "/api/v1/redoc/"])
def test_the_docs_pages_never_500_on_a_token_header_or_another_method(operator, path):
    client = Client(raise_request_exception=False)
    refused, shown = (404, 404) if "format=xml" in path else (403, 200)  # no such format: 404 first
    for header in ("Token a b", "Token nope", f"Token {api_token_issue(user=operator).key}"):
        # The pages authenticate by the admin session only: a token header is not a login there.
        assert client.get(path, HTTP_AUTHORIZATION=header).status_code == refused, header
    client.force_login(operator)
    assert client.get(path).status_code == shown
    assert client.options(path).status_code == (refused if refused == 404 else 405)
    assert client.post(path).status_code == (refused if refused == 404 else 405)
