"""The operator API answers as its schema says (docs/operators.md#operator-api): ids and pages it
cannot serve are 404 and 400, never 500; every bad input, a body that is not JSON included, gets the
one 400 shape; members take only their JSON types; a name already taken is 409; the schema
generates without a warning and says what the validation enforces; reading it needs an operator
permission."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from rest_framework.test import APIClient

from apps.didcomm.models import Mediation
from apps.push.models import PushProvider
from apps.tenants.models import AuditEntry, Tenant
from apps.tenants.services import api_token_issue
from apps.usage.models import ReportRun

LISTS = [
    "/api/v1/tenants/",
    "/api/v1/audit/",
    "/api/v1/didcomm/grants/",
    "/api/v1/didcomm/policies/",
    "/api/v1/usage/reports/",
    "/api/v1/push/providers/tenant-a/",
]
LONG_HOST = ("a" * 60 + ".") * 4 + "b" * 10  # 254 characters, every label within 63
LIMIT = {"limit": ["Must be an integer between 1 and 500."]}
OFFSET = {"offset": ["Must be an integer between 0 and 2 147 483 647."]}


@pytest.fixture
def grant(tenant_a):
    return Mediation.objects.create(
        tenant=tenant_a, client_did="did:peer:2.client", client_hash="0" * 64, state="granted"
    )


def _schema(api) -> dict:
    resp = api.get("/api/v1/schema/?format=json")
    assert resp.status_code == 200
    return resp.json()


# --- ids and pages: 404 and 400, not 500 ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/didcomm/grants/abc/"),
        ("post", "/api/v1/didcomm/grants/abc/revoke/"),
        ("get", "/api/v1/didcomm/grants/null,null/"),
    ],
)
def test_a_grant_id_that_is_not_a_number_is_404_json(api, grant, method, path):
    resp = getattr(api, method)(path)
    assert (resp.status_code, resp["Content-Type"], resp.json()) == (404, "application/json", {"detail": "Not found."})
    assert Mediation.objects.get().state == "granted"


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/api/v1/didcomm/grants/99999999999999999999/", "Mediation"),
        ("/api/v1/didcomm/grants/9223372036854775808/", "Mediation"),
        ("/api/v1/audit/99999999999999999999/", "AuditEntry"),
        ("/api/v1/audit/abc/", "AuditEntry"),
        ("/api/v1/usage/reports/99999999999999999999/", "ReportRun"),
        ("/api/v1/usage/reports/99999999999999999999/csv", "ReportRun"),
    ],
)
def test_an_id_no_row_can_have_is_404(api, grant, path, model):
    resp = api.get(path)
    assert (resp.status_code, resp.json()) == (404, {"detail": f"No {model} matches the given query."})


def test_revoking_an_id_no_row_can_have_is_404(api, grant):
    resp = api.post("/api/v1/didcomm/grants/99999999999999999999/revoke/")
    assert (resp.status_code, resp.json()) == (404, {"detail": "No Mediation matches the given query."})


def test_the_largest_grant_id_is_an_ordinary_404(api, grant):
    resp = api.get("/api/v1/didcomm/grants/9223372036854775807/")
    assert (resp.status_code, resp.json()) == (404, {"detail": "No Mediation matches the given query."})
    assert api.get(f"/api/v1/didcomm/grants/{grant.pk}/").json()["client_did"] == "did:peer:2.client"


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize(
    ("query", "errors"),
    [
        ("limit=99999999999999999999", LIMIT),
        ("limit=501", LIMIT),
        ("limit=0", LIMIT),
        ("limit=true", LIMIT),
        ("limit=", LIMIT),
        ("limit=-1", LIMIT),
        ("offset=null", OFFSET),
        ("offset=null&offset=null", OFFSET),
        ("offset=99999999999999999999", OFFSET),
        ("offset=2147483648", OFFSET),
        ("offset=1.5", OFFSET),
    ],
)
def test_every_list_refuses_a_page_it_cannot_serve_with_a_400(api, grant, path, query, errors):
    resp = api.get(f"{path}?{query}")
    assert (resp.status_code, resp.json()) == (400, errors)


@pytest.mark.parametrize("path", LISTS)
def test_every_list_serves_its_largest_page_and_offset(api, grant, path):
    resp = api.get(f"{path}?limit=500&offset=2147483647")
    assert resp.status_code == 200 and resp.json()["results"] == []
    assert resp.json()["count"] >= 0


def test_the_schema_documents_the_page_bounds(api):
    params = {p["name"]: p["schema"] for p in _schema(api)["paths"]["/api/v1/tenants/"]["get"]["parameters"]}
    assert params == {
        "limit": {"type": "integer", "minimum": 1, "maximum": 500},
        "offset": {"type": "integer", "minimum": 0, "maximum": 2147483647},
    }


def test_options_on_a_grant_action_answers(api, grant):
    resp = api.options(f"/api/v1/didcomm/grants/{grant.pk}/revoke/")
    assert resp.status_code == 200 and resp.json()["name"] == "Revoke"


# --- one 400 shape; JSON types as documented --------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/v1/tenants/"),
        ("PATCH", "/api/v1/tenants/tenant-a/"),
        ("POST", "/api/v1/tenants/tenant-a/purge-expired/"),
        ("PATCH", "/api/v1/didcomm/policies/tenant-a/"),
        ("POST", "/api/v1/usage/reports/"),
        ("POST", "/api/v1/push/providers/tenant-a/"),
        ("PATCH", "/api/v1/push/providers/tenant-a/webhook/"),
        ("PATCH", "/api/v1/push/policies/tenant-a/"),
    ],
)
def test_a_body_that_is_not_json_answers_the_documented_400_shape(api, tenant_a, method, path):
    PushProvider.objects.create(tenant=tenant_a, kind="webhook", settings={"url": "https://gw.example/"})
    resp = api.generic(method, path, "\x00", content_type="application/json")
    assert (resp.status_code, resp.json()) == (
        400,
        {"non_field_errors": ["JSON parse error - Expecting value: line 1 column 1 (char 0)"]},
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "errors"),
    [
        (
            "patch",
            "/api/v1/tenants/tenant-a/",
            {"policy": {"registration_open": 0}},
            {"policy": {"registration_open": ["Must be a valid boolean."]}},
        ),
        (
            "patch",
            "/api/v1/tenants/tenant-a/",
            {"policy": {"max_identities": "5"}},
            {"policy": {"max_identities": ["A valid integer is required."]}},
        ),
        ("patch", "/api/v1/tenants/tenant-a/", {"name": 5}, {"name": ["Not a valid string."]}),
        ("post", "/api/v1/tenants/", {"slug": "x", "domain": 0}, {"domain": ["Not a valid string."]}),
        ("post", "/api/v1/tenants/", {"slug": 0, "domain": "x.test"}, {"slug": ["Not a valid string."]}),
        ("post", "/api/v1/tenants/tenant-a/purge-expired/", {"dry_run": 0}, {"dry_run": ["Must be a valid boolean."]}),
        ("post", "/api/v1/tenants/tenant-a/rotate-keys/", {"signing": 1}, {"signing": ["Must be a valid boolean."]}),
        ("patch", "/api/v1/didcomm/policies/tenant-a/", {"enabled": 0}, {"enabled": ["Must be a valid boolean."]}),
        (
            "patch",
            "/api/v1/didcomm/policies/tenant-a/",
            {"queue_cap": "5"},
            {"queue_cap": ["A valid integer is required."]},
        ),
        (
            "post",
            "/api/v1/usage/reports/",
            {"date_from": "2026-01-01", "date_to": "2026-01-01", "tenants": [0]},
            {"tenants": {"0": ["Not a valid string."]}},
        ),
        (
            "post",
            "/api/v1/usage/reports/",
            {"date_from": "2026-01-01", "date_to": "2026-01-01", "tenant": ["tenant-a"]},
            {"tenant": ["Unknown field."]},
        ),
    ],
)
def test_a_member_of_another_json_type_is_refused_and_nothing_changes(api, tenant_a, method, path, body, errors):
    before = Tenant.objects.values().get()
    resp = getattr(api, method)(path, body, format="json")
    assert (resp.status_code, resp.json()) == (400, errors)
    assert Tenant.objects.values().get() == before
    assert AuditEntry.objects.count() == 0 and ReportRun.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"slug": "x", "domain": ""}, {"domain": ["This field may not be blank."]}),
        ({"slug": "x", "domain": " x.test"}, {"domain": ["' x.test' is not a host name (host or host:port)"]}),
        ({"slug": "x", "domain": "x.test:0"}, {"domain": ["'x.test:0' is not a host name (host or host:port)"]}),
        (
            {"slug": "x", "domain": "x.test:65536"},
            {"domain": ["'x.test:65536' is not a host name (host or host:port)"]},
        ),
        (
            {"slug": "x", "domain": "ftp://x.test"},
            {"domain": ["'ftp://x.test' is not a host name (host or host:port)"]},
        ),
        ({"slug": "x", "domain": "x.test."}, {"domain": ["'x.test.' is not a host name (host or host:port)"]}),
        (
            {"slug": "x", "domain": "x.test", "aliases": [LONG_HOST]},
            {"aliases": {"0": ["Ensure this field has no more than 253 characters."]}},
        ),
        (
            {"slug": "x", "domain": "x.test", "public_url": "ftp://x.test"},
            {"public_url": ["Enter a valid http or https URL."]},
        ),
        # Not a URI (RFC 3986): the schema's response says `format: uri`.
        (
            {"slug": "x", "domain": "x.test", "public_url": "http://x.test/,y^"},
            {"public_url": ["Enter a valid http or https URL."]},
        ),
        (
            {"slug": "x", "domain": "x.test", "public_url": "http://x.test/%zz"},
            {"public_url": ["Enter a valid http or https URL."]},
        ),
    ],
)
def test_a_host_or_url_outside_the_documented_pattern_is_refused(api, tenant_a, body, errors):
    resp = api.post("/api/v1/tenants/", body, format="json")
    assert (resp.status_code, resp.json()) == (400, errors)
    assert Tenant.objects.count() == 1


def test_what_the_pattern_allows_is_accepted(api, tenant_a):
    resp = api.post(
        "/api/v1/tenants/",
        {
            "slug": "x",
            "domain": "X.Test:65535",
            "aliases": ["0", "a-b.c:1", "https://Pasted.Example/path?q"],
            "public_url": "HTTP://0/a%5Eb;c?d=/e#f",
            "policy": {"registration_open": False},
        },
        format="json",
    )
    assert resp.status_code == 201, resp.json()
    data = resp.json()
    assert (data["domain"], data["aliases"], data["public_url"]) == (
        "x.test:65535",
        ["0", "a-b.c:1", "pasted.example"],
        "http://0/a%5Eb;c?d=/e",
    )


def test_the_schema_documents_what_the_api_refuses(api):
    schemas = _schema(api)["components"]["schemas"]
    create = schemas["TenantCreateRequest"]
    assert create["additionalProperties"] is False and create["required"] == ["domain", "slug"]
    assert (create["properties"]["domain"]["minLength"], create["properties"]["domain"]["maxLength"]) == (1, 253)
    assert create["properties"]["domain"]["pattern"].startswith("^([A-Za-z0-9]")
    assert create["properties"]["public_url"]["pattern"].startswith("^[Hh][Tt][Tt][Pp][Ss]?://")
    assert all(s.get("additionalProperties") is False for name, s in schemas.items() if name.endswith("Request"))
    rotate = schemas["RotateRequest"]
    assert [branch["required"] for branch in rotate["anyOf"]] == [["signing"], ["prekey"]]


def test_the_report_request_has_a_body_a_client_can_build(api):
    doc = _schema(api)
    post = doc["paths"]["/api/v1/usage/reports/"]["post"]
    ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    body = doc["components"]["schemas"][ref]
    assert set(body["properties"]) == {"date_from", "date_to", "tenants"} and body["required"] == [
        "date_from",
        "date_to",
    ]
    assert not any(p.get("readOnly") for p in body["properties"].values())
    assert "202" in post["responses"] and "200" not in post["responses"]
    detail = doc["paths"]["/api/v1/usage/reports/{id}/"]["get"]["responses"]["200"]["content"]["application/json"]
    assert detail["schema"]["$ref"] == "#/components/schemas/ReportRunDetail"
    csv = doc["paths"]["/api/v1/usage/reports/{id}/csv"]["get"]
    assert list(csv["responses"]["200"]["content"]) == ["text/csv"]
    assert [p["name"] for p in csv["parameters"]] == ["id", "table"]


def test_the_schema_generates_with_no_warning_and_no_error():
    out = io.StringIO()
    call_command("spectacular", "--fail-on-warn", "--validate", "--format", "openapi-json", stdout=out, stderr=out)
    assert '"openapi": "3.0.3"' in out.getvalue()


# --- conflicts: 409 with the field map ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "errors"),
    [
        (
            {"slug": "x", "domain": "a.mediator.test"},
            {"domain": ["a.mediator.test is already served by tenant tenant-a"]},
        ),
        (
            {"slug": "x", "domain": "x.test", "aliases": ["a.mediator.test"]},
            {"aliases": ["a.mediator.test is already served by tenant tenant-a"]},
        ),
        ({"slug": "tenant-a", "domain": "x.test"}, {"slug": ["Tenant with this Slug already exists."]}),
    ],
)
def test_a_name_another_tenant_has_is_409(api, tenant_a, payload, errors):
    resp = api.post("/api/v1/tenants/", payload, format="json")
    assert (resp.status_code, resp.json()) == (409, errors)
    assert Tenant.objects.count() == 1 and AuditEntry.objects.count() == 0


def test_an_alias_another_tenant_serves_is_409_on_patch(api, tenant_a, tenant_b):
    resp = api.patch("/api/v1/tenants/tenant-b/", {"aliases": ["a.mediator.test"]}, format="json")
    assert (resp.status_code, resp.json()) == (
        409,
        {"aliases": ["a.mediator.test is already served by tenant tenant-a"]},
    )
    both = api.patch("/api/v1/tenants/tenant-b/", {"aliases": ["a.mediator.test", "bad host!"]}, format="json")
    assert both.status_code == 400  # a malformed host among them: a 400 for the whole request
    assert list(tenant_b.aliases.all()) == []


# --- the schema and the docs pages need an operator permission ---------------------------------------


def _staff_token(django_user_model, *codenames: str) -> str:
    user = django_user_model.objects.create_user("stella", password="pw-123456", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return api_token_issue(user=user).key


def test_a_staff_user_without_permissions_cannot_read_the_schema_or_its_pages(client, django_user_model):
    token = _staff_token(django_user_model)
    resp = client.get("/api/v1/schema/", HTTP_AUTHORIZATION=f"Token {token}")
    assert (resp.status_code, resp.json()) == (403, {"detail": "You do not have permission to perform this action."})
    client.force_login(django_user_model.objects.get(username="stella"))
    for page in ("/api/v1/schema/", "/api/v1/docs/", "/api/v1/redoc/"):
        assert client.get(page).status_code == 403, page


@pytest.mark.parametrize(
    "codename",
    [
        "view_tenant",
        "view_auditentry",
        "view_mediation",
        "view_reportrun",
        "change_didcommpolicy",
        "view_pushprovider",
        "view_pushpolicy",
        "view_device",
    ],
)
def test_a_staff_user_with_one_api_permission_reads_the_schema_and_its_pages(client, django_user_model, codename):
    token = _staff_token(django_user_model, codename)
    resp = client.get("/api/v1/schema/?format=json", HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 200 and resp.json()["info"]["title"] == "Decentrl mediator operator API"
    client.force_login(django_user_model.objects.get(username="stella"))
    for page in ("/api/v1/docs/", "/api/v1/redoc/"):
        assert client.get(page).status_code == 200, page


def test_without_credentials_the_schema_is_refused(client, db):
    resp = client.get("/api/v1/schema/")
    assert (resp.status_code, resp.json()) == (401, {"detail": "Authentication credentials were not provided."})
    resp = client.get("/api/v1/schema/", HTTP_AUTHORIZATION="Token nope")
    assert (resp.status_code, resp.json()) == (401, {"detail": "Invalid token."})


def test_a_superuser_token_reads_the_schema(api):
    assert _schema(api)["openapi"] == "3.0.3"


def test_a_plain_user_still_gets_403(plain_api):
    assert plain_api.get("/api/v1/schema/").status_code == 403


def test_a_tenant_viewer_reads_the_schema_and_only_the_calls_it_may_make(django_user_model):
    token = _staff_token(django_user_model, "view_tenant")
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert c.get("/api/v1/schema/").status_code == 200
    assert c.get("/api/v1/tenants/").status_code == 200
    assert c.get("/api/v1/audit/").status_code == 403
