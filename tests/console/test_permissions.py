"""The operator API enforces the Django model permissions the console enforces (issue 13 item 2):
one table of operations, each tried in the console and through /api/v1/ by staff users holding no,
some and all of the permissions; both surfaces allow or refuse the same users, and a refusal
changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from apps.console.api import SchemaPermission
from apps.didcomm.identity import identity_current
from apps.didcomm.models import DidcommPolicy, MediatorIdentity
from apps.didcomm.policy import policy_for
from apps.tenants.models import AuditEntry, Tenant
from apps.tenants.permissions import METHOD_VERBS, OperatorPermissions
from apps.tenants.services import Actor, api_token_issue, audit_record, tenant_suspend
from apps.usage.models import ReportRun
from tests.console.test_admin import _add_form, didcomm_form

DENIED = {"detail": "You do not have permission to perform this action."}

# Permission sets of the staff users: none, two partial roles, and every permission an operation
# below needs (granted one by one: none of them is a superuser).
ROLES = {
    "none": set(),
    "viewer": {
        "tenants.view_tenant",
        "tenants.view_auditentry",
        "usage.view_reportrun",
        "didcomm.view_didcommpolicy",
    },
    # change implies view, in the console and the API alike
    "editor": {"tenants.change_tenant", "didcomm.change_didcommpolicy"},
    "all": {
        "tenants.view_tenant",
        "tenants.add_tenant",
        "tenants.change_tenant",
        "tenants.view_auditentry",
        "usage.view_reportrun",
        "usage.add_reportrun",
        "didcomm.view_didcommpolicy",
        "didcomm.change_didcommpolicy",
    },
}
VIEW_TENANT = {"tenants.view_tenant", "tenants.change_tenant"}
VIEW_DIDCOMM_POLICY = {"didcomm.view_didcommpolicy", "didcomm.change_didcommpolicy"}


@dataclass(frozen=True)
class World:
    a: Tenant
    b: Tenant  # suspended
    entry: AuditEntry
    run: ReportRun  # succeeded, no rows


@dataclass(frozen=True)
class Op:
    name: str
    needs: set[str]  # any one of these permissions allows the operation
    admin: Callable[[Client, World], object] | None
    admin_ok: int | None
    api: Callable[[APIClient, World], object] | None
    api_ok: int | None
    # A bulk action is not offered to a viewer: the changelist shows again (200); without view it is 403.
    admin_denied: tuple[int, ...] = (403,)


def _change_form() -> dict:
    data = _add_form(name="Renamed", aliases="", public_url="https://a.example")
    del data["slug"], data["domain"]
    return data


OPS = [
    Op(
        "tenant list",
        VIEW_TENANT,
        lambda c, w: c.get("/admin/tenants/tenant/"),
        200,
        lambda c, w: c.get("/api/v1/tenants/"),
        200,
    ),
    Op(
        "tenant retrieve and statistics",  # the console's change page shows the live figures
        VIEW_TENANT,
        lambda c, w: c.get(f"/admin/tenants/tenant/{w.a.pk}/change/"),
        200,
        lambda c, w: c.get("/api/v1/tenants/tenant-a/"),
        200,
    ),
    Op("tenant statistics", VIEW_TENANT, None, None, lambda c, w: c.get("/api/v1/tenants/tenant-a/statistics/"), 200),
    Op(
        "tenant registrations",
        VIEW_TENANT,
        lambda c, w: c.get(f"/admin/tenants/tenant/{w.a.pk}/registrations/"),
        200,
        None,
        None,
    ),
    Op(
        "tenant create",
        {"tenants.add_tenant"},
        lambda c, w: c.post("/admin/tenants/tenant/add/", _add_form()),
        302,
        lambda c, w: c.post("/api/v1/tenants/", {"slug": "acme", "domain": "mediator.acme.test"}, format="json"),
        201,
    ),
    Op(
        "tenant update",
        {"tenants.change_tenant"},
        lambda c, w: c.post(f"/admin/tenants/tenant/{w.a.pk}/change/", _change_form()),
        302,
        lambda c, w: c.patch("/api/v1/tenants/tenant-a/", {"name": "Renamed"}, format="json"),
        200,
    ),
    Op(
        "tenant suspend",
        {"tenants.change_tenant"},
        lambda c, w: c.post(f"/admin/tenants/tenant/{w.a.pk}/suspend/"),
        302,
        lambda c, w: c.post("/api/v1/tenants/tenant-a/suspend/"),
        200,
    ),
    Op(
        "tenant resume",
        {"tenants.change_tenant"},
        lambda c, w: c.post(f"/admin/tenants/tenant/{w.b.pk}/resume/"),
        302,
        lambda c, w: c.post("/api/v1/tenants/tenant-b/resume/"),
        200,
    ),
    Op(
        "tenant rotate keys",
        {"tenants.change_tenant"},
        lambda c, w: c.post(f"/admin/tenants/tenant/{w.a.pk}/rotate-keys/", {"keys": "both"}),
        302,
        lambda c, w: c.post("/api/v1/tenants/tenant-a/rotate-keys/", {"signing": True, "prekey": True}, format="json"),
        200,
    ),
    Op(
        "tenant rotate DIDComm identity",
        {"tenants.change_tenant"},
        lambda c, w: c.post(f"/admin/tenants/tenant/{w.a.pk}/rotate-didcomm/"),
        302,
        lambda c, w: c.post("/api/v1/tenants/tenant-a/rotate-didcomm-identity/"),
        200,
    ),
    Op(
        "didcomm policy retrieve",
        VIEW_DIDCOMM_POLICY,
        lambda c, w: c.get(f"/admin/didcomm/didcommpolicy/{w.a.pk}/change/"),
        302,  # a policy is shown on its tenant's page
        lambda c, w: c.get("/api/v1/didcomm/policies/tenant-a/"),
        200,
    ),
    Op(
        "didcomm policy list",
        VIEW_DIDCOMM_POLICY,
        lambda c, w: c.get("/admin/didcomm/didcommpolicy/"),
        200,
        lambda c, w: c.get("/api/v1/didcomm/policies/"),
        200,
    ),
    Op(
        "didcomm policy update",
        {"didcomm.change_didcommpolicy"},
        # edited on the tenant's page (which also needs tenants.change_tenant: every role here holding
        # change_didcommpolicy holds it)
        lambda c, w: c.post(
            f"/admin/tenants/tenant/{w.a.pk}/change/", {**_change_form(), **didcomm_form(mediation="closed")}
        ),
        302,
        lambda c, w: c.patch("/api/v1/didcomm/policies/tenant-a/", {"mediation": "closed"}, format="json"),
        200,
    ),
    Op(
        "tenant purge expired",
        {"tenants.change_tenant"},
        lambda c, w: c.post(f"/admin/tenants/tenant/{w.a.pk}/purge/"),
        302,
        lambda c, w: c.post("/api/v1/tenants/tenant-a/purge-expired/", {"dry_run": False}, format="json"),
        200,
    ),
    Op(
        "tenant bulk suspend",
        {"tenants.change_tenant"},
        lambda c, w: c.post("/admin/tenants/tenant/", {"action": "suspend_selected", "_selected_action": [w.a.pk]}),
        302,
        None,
        None,
        admin_denied=(403, 200),
    ),
    Op(
        "audit list",
        {"tenants.view_auditentry"},
        lambda c, w: c.get("/admin/tenants/auditentry/"),
        200,
        lambda c, w: c.get("/api/v1/audit/"),
        200,
    ),
    Op(
        "audit retrieve",
        {"tenants.view_auditentry"},
        lambda c, w: c.get(f"/admin/tenants/auditentry/{w.entry.pk}/change/"),
        200,
        lambda c, w: c.get(f"/api/v1/audit/{w.entry.pk}/"),
        200,
    ),
    Op(
        "report list",
        {"usage.view_reportrun"},
        lambda c, w: c.get("/admin/usage/reportrun/"),
        200,
        lambda c, w: c.get("/api/v1/usage/reports/"),
        200,
    ),
    Op(
        "report retrieve",
        {"usage.view_reportrun"},
        lambda c, w: c.get(f"/admin/usage/reportrun/{w.run.pk}/change/"),
        302,  # the admin's run page is the dashboard's run page (one run page)
        lambda c, w: c.get(f"/api/v1/usage/reports/{w.run.pk}/"),
        200,
    ),
    Op(
        "report csv",
        {"usage.view_reportrun"},
        None,
        None,
        lambda c, w: c.get(f"/api/v1/usage/reports/{w.run.pk}/csv"),
        200,
    ),
    # The staff pages under /dashboard/ check what the API checks (issue 33 item 7).
    Op(
        "dashboard",
        {"usage.view_reportrun"},
        lambda c, w: c.get("/dashboard/"),
        200,
        None,
        None,
    ),
    Op(
        "dashboard report list",
        {"usage.view_reportrun"},
        lambda c, w: c.get("/dashboard/reports/"),
        200,
        None,
        None,
    ),
    Op(
        "dashboard report page",
        {"usage.view_reportrun"},
        lambda c, w: c.get(f"/dashboard/reports/{w.run.pk}/"),
        200,
        lambda c, w: c.get(f"/api/v1/usage/reports/{w.run.pk}/"),
        200,
    ),
    Op(
        "dashboard report status",
        {"usage.view_reportrun"},
        lambda c, w: c.get(f"/dashboard/reports/{w.run.pk}/status"),
        200,
        None,
        None,
    ),
    Op(
        "dashboard report csv",
        {"usage.view_reportrun"},
        lambda c, w: c.get(f"/dashboard/reports/{w.run.pk}/csv?table=daily"),
        200,
        lambda c, w: c.get(f"/api/v1/usage/reports/{w.run.pk}/csv"),
        200,
    ),
    Op(
        "dashboard refresh",
        {"usage.add_reportrun"},
        lambda c, w: c.post("/dashboard/refresh", {"days": "7"}),
        302,
        None,
        None,
    ),
    Op(
        "dashboard report cancel",
        {"usage.add_reportrun"},
        lambda c, w: c.post(f"/dashboard/reports/{w.run.pk}/cancel"),
        302,
        None,
        None,
    ),
    Op(
        "report request",
        {"usage.add_reportrun"},
        lambda c, w: c.post("/admin/usage/reportrun/generate/", {"date_from": "2026-01-01", "date_to": "2026-01-02"}),
        302,
        lambda c, w: c.post(
            "/api/v1/usage/reports/", {"date_from": "2026-01-01", "date_to": "2026-01-02"}, format="json"
        ),
        202,
    ),
]


@pytest.fixture
def world(db, tenant_a, tenant_b) -> World:
    tenant_suspend(tenant=tenant_b, actor=Actor(user=None, via="cli"))
    entry = audit_record(actor=Actor(user=None, via="cli"), action="note", tenant=tenant_a, before=None, after=None)
    run = ReportRun.objects.create(
        date_from=timezone.now().date(), date_to=timezone.now().date(), status=ReportRun.Status.SUCCEEDED
    )
    policy_for(tenant=tenant_a)
    identity_current(tenant=tenant_a)
    tenant_a.refresh_from_db()
    tenant_b.refresh_from_db()
    return World(a=tenant_a, b=tenant_b, entry=entry, run=run)


def _staff(django_user_model, role: str):
    user = django_user_model.objects.create_user(f"staff-{role}", password="pw-pw-pw-pw", is_staff=True)
    for name in ROLES[role]:
        app_label, codename = name.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return user


def _state() -> tuple:
    """Everything an operation could change."""
    return (
        list(Tenant.objects.order_by("slug").values_list("slug", "name", "status", "signing_public", "prekey_public")),
        AuditEntry.objects.count(),
        ReportRun.objects.count(),
        list(MediatorIdentity.objects.order_by("pk").values_list("did", "retired_at")),
        list(DidcommPolicy.objects.order_by("pk").values()),
    )


def _cases(surface: str):
    for op in OPS:
        if getattr(op, surface) is not None:
            for role in ROLES:
                yield pytest.param(op, role, id=f"{op.name}-{role}")


@pytest.mark.parametrize(("op", "role"), list(_cases("admin")))
def test_the_console_allows_exactly_the_users_holding_the_permission(client, django_user_model, world, op, role):
    client.force_login(_staff(django_user_model, role))
    before = _state()
    resp = op.admin(client, world)
    if ROLES[role] & op.needs:
        assert resp.status_code == op.admin_ok, resp.content[:500]
        assert "/admin/login/" not in resp.get("Location", "")
    else:
        assert resp.status_code in op.admin_denied
        assert _state() == before


@pytest.mark.parametrize(("op", "role"), list(_cases("api")))
def test_the_api_allows_exactly_the_users_holding_the_permission(django_user_model, world, op, role):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=_staff(django_user_model, role)).key}")
    before = _state()
    resp = op.api(api, world)
    if ROLES[role] & op.needs:
        assert resp.status_code == op.api_ok, resp.content[:500]
    else:
        assert (resp.status_code, resp["Content-Type"], resp.json()) == (403, "application/json", DENIED)
        assert _state() == before


@pytest.mark.parametrize("op", [op for op in OPS if op.admin and op.api], ids=lambda op: op.name)
def test_the_console_and_the_api_agree_for_every_role(client, django_user_model, world, op):
    """One user per role tries the read-only probe of each operation on both surfaces."""
    for role in ROLES:
        user = _staff(django_user_model, role)
        client.force_login(user)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user).key}")
        admin_allowed = op.admin(client, world).status_code != 403
        api_allowed = op.api(api, world).status_code != 403
        assert admin_allowed == api_allowed == bool(ROLES[role] & op.needs), role


def test_a_non_staff_user_holding_every_permission_is_refused_by_the_api(django_user_model, world):
    user = _staff(django_user_model, "all")
    user.is_staff = False
    user.save()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user).key}")
    resp = api.post("/api/v1/tenants/tenant-a/suspend/")
    assert (resp.status_code, resp.json()) == (403, DENIED)
    assert api.get("/api/v1/tenants/").status_code == 403


@pytest.mark.parametrize(
    ("role", "status"),
    [("none", 403), ("viewer", 403), ("editor", 405), ("all", 405)],
)
def test_a_method_no_route_handles_needs_its_permission_before_the_405(django_user_model, world, role, status):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=_staff(django_user_model, role)).key}")
    assert api.put("/api/v1/tenants/tenant-a/", {}, format="json").status_code == status


def test_the_generate_button_is_shown_only_to_users_who_may_request_a_run(client, django_user_model, world):
    client.force_login(_staff(django_user_model, "viewer"))
    assert b"generate-usage-report" not in client.get("/admin/usage/reportrun/").content
    client.force_login(_staff(django_user_model, "all"))
    assert b"generate-usage-report" in client.get("/admin/usage/reportrun/").content


def _api_views(patterns, prefix=""):
    for p in patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            yield from _api_views(p.url_patterns, route)
        elif isinstance(p, URLPattern) and route.startswith("api/v1/"):
            yield route, p.callback


def test_every_api_route_names_the_permission_of_each_of_its_actions():
    """Anything added under /api/v1/ is covered: OperatorPermissions is the default, and each
    route's actions (viewsets) or methods (plain views) are in its operator_actions table."""
    seen = set()
    for route, callback in _api_views(get_resolver().url_patterns):
        cls = callback.cls
        if route.startswith(("api/v1/schema", "api/v1/docs", "api/v1/redoc")):
            # Staff who may read something through the API (tests/console/test_api_contract.py).
            assert callback.initkwargs["permission_classes"] == [SchemaPermission], route
            continue
        assert cls.permission_classes == [OperatorPermissions], route
        table = cls.operator_actions
        if getattr(callback, "actions", None):
            wanted = {a for m, a in callback.actions.items() if m != "head"}
        else:
            wanted = {m.upper() for m in cls.http_method_names if hasattr(cls, m) and m not in ("options", "head")}
        assert wanted <= set(table), (route, wanted - set(table))
        assert set(table.values()) <= set(METHOD_VERBS.values()), route
        seen.add(cls.__name__)
    assert seen == {
        "TenantViewSet",
        "AuditEntryViewSet",
        "ReportRunListCreate",
        "ReportRunDetail",
        "ReportRunCsv",
        "GrantViewSet",
        "PolicyViewSet",
        "PushProviderViewSet",
        "PushPolicyViewSet",
        "PushDeviceViewSet",
    }
