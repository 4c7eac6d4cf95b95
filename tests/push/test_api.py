"""The push part of the operator API (apps/push/api.py, docs/push.md#the-operator-api): a tenant's
providers (credentials write-only), its push policy (the defaults when none) and its device counts
(no token, no subject); every error in the API's shape with nothing changed; each write audited
once with exact before and after (credentials only as `credentials_changed`); each action refused
without its model permission; every query scoped to the tenant of the path."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from apps.push import services
from apps.push.models import Device, PushPolicy, PushProvider
from apps.tenants.models import AuditEntry
from apps.tenants.services import Actor, api_token_issue
from apps.wire.display import utc_iso
from tests.push.test_devices import _sub

pytestmark = pytest.mark.django_db

SECRET = "operator-secret-" * 3
SECRET2 = "rotated-secret-0" * 3
URL = "https://gateway.example/wake"
URL2 = "https://gateway2.example/wake"
WEBHOOK = "Webhook (the operator's own push gateway)"
DENIED = {"detail": "You do not have permission to perform this action."}
CLI = Actor(user=None, via="cli")
DEFAULT_POLICY = {
    "tenant": "tenant-a",
    "wake_interval_s": None,
    "effective_wake_interval_s": settings.PUSH_WAKE_INTERVAL_S,
    "visible": False,
    "title_loc_key": "",
    "body_loc_key": "",
    "collapse_id": "",
}
APNS_TOKEN = "ab" * 32
APNS_SETTINGS = {"key_id": "ABC123DEFG", "team_id": "TEAM123456", "bundle_id": "org.example.wallet",
                 "environment": "production"}  # fmt: skip


def _webhook(tenant, *, secret: str = SECRET, url: str = URL, enabled: bool = True) -> PushProvider:
    return services.provider_save(
        provider=PushProvider(tenant=tenant, kind="webhook"),
        actor=CLI,
        enabled=enabled,
        settings_={"url": url},
        credentials={"secret": secret},
    )


def _shown(provider: PushProvider) -> dict:
    provider.refresh_from_db()
    return {
        "tenant": provider.tenant.slug,
        "kind": provider.kind,
        "enabled": provider.enabled,
        "settings": provider.settings,
        "has_credentials": True,
        "state": provider.state,
        "last_error": provider.last_error,
        "last_success_at": None,
        "last_failure_at": None,
        "updated_at": utc_iso(provider.updated_at),
    }


def _audits(action: str) -> list[tuple]:
    return list(
        AuditEntry.objects.filter(action=action)
        .order_by("id")
        .values_list("via", "actor_name", "tenant_slug", "before", "after")
    )


def _state() -> tuple:
    """Everything a push operation could change."""
    return (
        list(PushProvider.objects.order_by("pk").values()),
        list(PushPolicy.objects.order_by("pk").values()),
        list(Device.objects.order_by("pk").values()),
        AuditEntry.objects.count(),
    )


# --- providers ----------------------------------------------------------------------------------


def test_a_provider_is_added_with_its_credentials_sealed_never_answered_and_audited(api, tenant_a):
    body = {"kind": "webhook", "settings": {"url": URL}, "credentials": {"secret": SECRET}}
    resp = api.post("/api/v1/push/providers/tenant-a/", body, format="json")
    assert resp.status_code == 201, resp.json()
    provider = PushProvider.objects.get()
    assert resp.json() == _shown(provider)
    assert resp.json()["state"] == "unchecked" and resp.json()["enabled"] is True
    assert SECRET not in resp.content.decode() and provider.credentials_sealed not in resp.content.decode()
    assert provider.credentials() == {"secret": SECRET} and SECRET not in provider.credentials_sealed
    assert _audits("push.save_provider") == [
        (
            "api",
            "olivia",
            "tenant-a",
            None,
            {"kind": "webhook", "enabled": True, "settings": {"url": URL}, "credentials_changed": True},
        )
    ]
    assert SECRET not in str(AuditEntry.objects.values().get())


def test_a_kind_the_tenant_already_has_is_409_and_another_tenant_may_have_it(api, tenant_a, tenant_b):
    _webhook(tenant_a)
    body = {"kind": "webhook", "settings": {"url": URL2}, "credentials": {"secret": SECRET2}}
    before = _state()
    resp = api.post("/api/v1/push/providers/tenant-a/", body, format="json")
    assert (resp.status_code, resp.json()) == (409, {"kind": ["The tenant already has a webhook provider."]})
    assert _state() == before
    assert api.post("/api/v1/push/providers/tenant-b/", body, format="json").status_code == 201
    assert PushProvider.objects.get(tenant=tenant_a).settings == {"url": URL}


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"kind": "webhook", "settings": {"url": URL}, "credentials": {"secret": "short"}},
            {"non_field_errors": [f"{WEBHOOK}: the secret is at least 32 characters"]},
        ),
        (
            {"kind": "webhook", "settings": {"url": "http://gateway.example/"}, "credentials": {"secret": SECRET}},
            {"non_field_errors": [f"{WEBHOOK}: the URL must be https"]},
        ),
        (
            {"kind": "webhook", "credentials": {"secret": SECRET}},
            {"non_field_errors": [f"{WEBHOOK}: the URL is required"]},
        ),
        (
            {"kind": "apns", "settings": {}, "credentials": {"signing_key": "not a key"}},
            {"non_field_errors": ["Apple Push Notification service: key_id"]},
        ),
        (
            {"kind": "apns", "settings": APNS_SETTINGS, "credentials": {"signing_key": "not a key"}},
            {"non_field_errors": ["Apple Push Notification service: signing_key_missing"]},
        ),
        ({"kind": "webhook", "settings": {"url": URL}}, {"credentials": ["This field is required."]}),
        ({"settings": {"url": URL}, "credentials": {"secret": SECRET}}, {"kind": ["This field is required."]}),
        (
            {"kind": "sms", "settings": {"url": URL}, "credentials": {"secret": SECRET}},
            {"kind": ['"sms" is not a valid choice.']},
        ),
        (
            {"kind": "webhook", "settings": {"url": URL}, "credentials": SECRET},
            {"credentials": ['Expected a dictionary of items but got type "str".']},
        ),
        (
            {"kind": "webhook", "settings": [URL], "credentials": {"secret": SECRET}},
            {"settings": ['Expected a dictionary of items but got type "list".']},
        ),
        (
            {"kind": "webhook", "enabled": 1, "settings": {"url": URL}, "credentials": {"secret": SECRET}},
            {"enabled": ["Must be a valid boolean."]},
        ),
        (
            {"kind": "webhook", "settings": {"url": URL}, "credentials": {"secret": SECRET}, "secret": SECRET},
            {"secret": ["Unknown field."]},
        ),
    ],
)
def test_a_provider_that_cannot_be_added_is_a_400_and_nothing_is_stored(api, tenant_a, body, errors):
    resp = api.post("/api/v1/push/providers/tenant-a/", body, format="json")
    assert (resp.status_code, resp.json()) == (400, errors)
    assert "short" not in resp.content.decode() and "not a key" not in resp.content.decode()
    assert PushProvider.objects.count() == 0 and AuditEntry.objects.count() == 0


def test_the_list_and_a_provider_are_the_tenants_own(api, tenant_a, tenant_b):
    mine = _webhook(tenant_a)
    other = _webhook(tenant_b, url=URL2)
    listed = api.get("/api/v1/push/providers/tenant-a/")
    assert (listed.status_code, listed.json()) == (
        200,
        {"count": 1, "next": None, "previous": None, "results": [_shown(mine)]},
    )
    assert api.get("/api/v1/push/providers/tenant-a/webhook/").json() == _shown(mine)
    assert api.get("/api/v1/push/providers/tenant-b/webhook/").json() == _shown(other)
    other.delete()
    # Tenant B has none any more; tenant A's is not found through B's path.
    assert api.get("/api/v1/push/providers/tenant-b/").json()["results"] == []
    resp = api.get("/api/v1/push/providers/tenant-b/webhook/")
    assert (resp.status_code, resp.json()) == (404, {"detail": "No PushProvider matches the given query."})
    assert api.patch("/api/v1/push/providers/tenant-b/webhook/", {"enabled": False}, format="json").status_code == 404
    assert api.delete("/api/v1/push/providers/tenant-b/webhook/").status_code == 404
    assert PushProvider.objects.get().enabled is True


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/push/providers/no-such-tenant/"),
        ("post", "/api/v1/push/providers/no-such-tenant/"),
        ("get", "/api/v1/push/providers/no-such-tenant/webhook/"),
        ("patch", "/api/v1/push/providers/no-such-tenant/webhook/"),
        ("delete", "/api/v1/push/providers/no-such-tenant/webhook/"),
        ("get", "/api/v1/push/policies/no-such-tenant/"),
        ("patch", "/api/v1/push/policies/no-such-tenant/"),
        ("get", "/api/v1/push/devices/no-such-tenant/"),
    ],
)
def test_a_tenant_that_does_not_exist_is_404(api, tenant_a, method, path):
    resp = getattr(api, method)(path, {}, format="json")
    assert (resp.status_code, resp.json()) == (404, {"detail": "No Tenant matches the given query."})
    assert PushPolicy.objects.count() == 0


@pytest.mark.parametrize("kind", ["sms", "fcm"])
def test_a_kind_the_tenant_has_not_is_404(api, tenant_a, kind):
    _webhook(tenant_a)
    resp = api.get(f"/api/v1/push/providers/tenant-a/{kind}/")
    assert (resp.status_code, resp.json()) == (404, {"detail": "No PushProvider matches the given query."})


def test_a_provider_is_changed_audited_with_the_changed_fields_and_its_credentials_kept(api, tenant_a):
    provider = _webhook(tenant_a)
    PushProvider.objects.update(state=PushProvider.State.FAILING, last_error="failed: http_401")
    resp = api.patch(
        "/api/v1/push/providers/tenant-a/webhook/", {"enabled": False, "settings": {"url": URL2}}, format="json"
    )
    assert resp.status_code == 200, resp.json()
    assert resp.json() == _shown(provider)
    assert (resp.json()["enabled"], resp.json()["settings"], resp.json()["state"], resp.json()["last_error"]) == (
        False,
        {"url": URL2},
        "unchecked",
        "",
    )
    assert provider.credentials() == {"secret": SECRET}
    assert _audits("push.save_provider")[1:] == [
        (
            "api",
            "olivia",
            "tenant-a",
            {"kind": "webhook", "enabled": True, "settings": {"url": URL}},
            {"kind": "webhook", "enabled": False, "settings": {"url": URL2}, "credentials_changed": False},
        )
    ]


def test_new_credentials_are_sealed_and_audited_only_as_changed(api, tenant_a):
    provider = _webhook(tenant_a)
    resp = api.patch("/api/v1/push/providers/tenant-a/webhook/", {"credentials": {"secret": SECRET2}}, format="json")
    assert resp.status_code == 200 and SECRET2 not in resp.content.decode()
    provider.refresh_from_db()
    assert provider.credentials() == {"secret": SECRET2}
    assert _audits("push.save_provider")[1:] == [
        ("api", "olivia", "tenant-a", {"kind": "webhook"}, {"kind": "webhook", "credentials_changed": True})
    ]
    assert not AuditEntry.objects.filter(before__icontains="secret").exists()
    assert all(SECRET2 not in str(e) for e in AuditEntry.objects.values_list("before", "after"))


@pytest.mark.parametrize(
    "body",
    [{}, {"enabled": True}, {"settings": {"url": URL}}, {"credentials": {"secret": SECRET}}],
    ids=["empty", "same-enabled", "same-settings", "same-credentials"],
)
def test_a_change_that_changes_nothing_writes_nothing(api, tenant_a, body):
    provider = _webhook(tenant_a)
    PushProvider.objects.update(state=PushProvider.State.OK)
    before = _state()
    resp = api.patch("/api/v1/push/providers/tenant-a/webhook/", body, format="json")
    assert (resp.status_code, resp.json()) == (200, _shown(provider))
    assert resp.json()["state"] == "ok"
    assert _state() == before


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"credentials": {"secret": "short"}}, {"non_field_errors": [f"{WEBHOOK}: the secret is at least 32 characters"]}),
        ({"settings": {"url": "ftp://gateway.example/"}}, {"non_field_errors": [f"{WEBHOOK}: the URL is not an http(s) URL"]}),
        (
            {"kind": "fcm"},
            {"kind": ["The kind cannot be changed: add a provider of the other kind and remove this one."]},
        ),
        ({"tenant": "tenant-b"}, {"tenant": ["The tenant cannot be changed."]}),
        ({"has_credentials": False}, {"has_credentials": ["Unknown field."]}),
        ({"enabled": "false"}, {"enabled": ["Must be a valid boolean."]}),
        ({"settings": None}, {"settings": ["This field may not be null."]}),
        ({"credentials": None}, {"credentials": ["This field may not be null."]}),
    ],
)  # fmt: skip
def test_a_change_the_api_refuses_is_a_400_and_nothing_changes(api, tenant_a, body, errors):
    _webhook(tenant_a)
    before = _state()
    resp = api.patch("/api/v1/push/providers/tenant-a/webhook/", body, format="json")
    assert (resp.status_code, resp.json()) == (400, errors)
    assert _state() == before


def test_a_provider_is_removed_audited_and_its_devices_stay(api, tenant_a):
    _webhook(tenant_a, enabled=False)
    services.device_set(tenant=tenant_a, subject="did:example:a", service="fcm", token="tok-1", platform=None)
    resp = api.delete("/api/v1/push/providers/tenant-a/webhook/")
    assert (resp.status_code, resp.content) == (204, b"")
    assert not PushProvider.objects.exists() and Device.objects.count() == 1
    assert _audits("push.delete_provider") == [
        ("api", "olivia", "tenant-a", {"kind": "webhook", "enabled": False, "settings": {"url": URL}}, None)
    ]
    resp = api.delete("/api/v1/push/providers/tenant-a/webhook/")
    assert (resp.status_code, resp.json()) == (404, {"detail": "No PushProvider matches the given query."})
    assert len(_audits("push.delete_provider")) == 1


# --- the policy ---------------------------------------------------------------------------------


def test_the_policy_reads_the_defaults_without_creating_a_row(api, tenant_a):
    resp = api.get("/api/v1/push/policies/tenant-a/")
    assert (resp.status_code, resp.json()) == (200, DEFAULT_POLICY)
    assert not PushPolicy.objects.exists()


def test_the_policy_is_changed_audited_and_the_sender_follows_it(api, tenant_a, tenant_b):
    change = {"wake_interval_s": 300, "visible": True, "body_loc_key": "wake_body", "collapse_id": "wake"}
    resp = api.patch("/api/v1/push/policies/tenant-a/", change, format="json")
    assert (resp.status_code, resp.json()) == (200, {**DEFAULT_POLICY, **change, "effective_wake_interval_s": 300})
    assert _audits("push.update_policy") == [
        (
            "api",
            "olivia",
            "tenant-a",
            {"wake_interval_s": None, "visible": False, "body_loc_key": "", "collapse_id": ""},
            change,
        )
    ]
    choices = services.choices_of(tenant_id=tenant_a.pk)
    assert (choices.wake_interval_s, choices.wake.visible, choices.wake.body_loc_key, choices.wake.collapse_id) == (
        300,
        True,
        "wake_body",
        "wake",
    )
    # The same change again changes nothing and writes nothing; one field is audited alone.
    assert api.patch("/api/v1/push/policies/tenant-a/", change, format="json").status_code == 200
    assert len(_audits("push.update_policy")) == 1
    resp = api.patch("/api/v1/push/policies/tenant-a/", {"wake_interval_s": None, "visible": True}, format="json")
    assert resp.json()["effective_wake_interval_s"] == settings.PUSH_WAKE_INTERVAL_S
    assert _audits("push.update_policy")[1][3:] == ({"wake_interval_s": 300}, {"wake_interval_s": None})
    # Tenant B keeps the defaults.
    assert api.get("/api/v1/push/policies/tenant-b/").json() == {**DEFAULT_POLICY, "tenant": "tenant-b"}


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"visible": True}, {"body_loc_key": ["a visible alert needs the body's localisation key"]}),
        ({"visible": True, "body_loc_key": ""}, {"body_loc_key": ["a visible alert needs the body's localisation key"]}),
        ({"wake_interval_s": 86_401}, {"wake_interval_s": ["Ensure this value is less than or equal to 86400."]}),
        ({"wake_interval_s": -1}, {"wake_interval_s": ["Ensure this value is greater than or equal to 0."]}),
        ({"wake_interval_s": "5"}, {"wake_interval_s": ["A valid integer is required."]}),
        ({"visible": 1}, {"visible": ["Must be a valid boolean."]}),
        ({"collapse_id": "has space"}, {"collapse_id": ["1 to 64 of A-Z a-z 0-9 _ . -"]}),
        ({"title_loc_key": "k" * 65}, {"title_loc_key": ["1 to 64 of A-Z a-z 0-9 _ . -"]}),
        ({"body_loc_key": None}, {"body_loc_key": ["This field may not be null."]}),
        ({"body_loc_key": 5}, {"body_loc_key": ["Not a valid string."]}),
        ({"tenant": "tenant-b"}, {"tenant": ["Unknown field."]}),
    ],
)  # fmt: skip
def test_a_policy_the_api_refuses_is_a_400_and_nothing_is_stored(api, tenant_a, body, errors):
    resp = api.patch("/api/v1/push/policies/tenant-a/", body, format="json")
    assert (resp.status_code, resp.json()) == (400, errors)
    assert not PushPolicy.objects.exists() and AuditEntry.objects.count() == 0


def test_a_stored_body_key_lets_a_visible_alert_be_turned_on_alone(api, tenant_a):
    services.policy_update(tenant=tenant_a, actor=CLI, body_loc_key="wake_body")
    resp = api.patch("/api/v1/push/policies/tenant-a/", {"visible": True}, format="json")
    assert resp.status_code == 200 and resp.json()["visible"] is True
    resp = api.patch("/api/v1/push/policies/tenant-a/", {"body_loc_key": ""}, format="json")
    assert (resp.status_code, resp.json()) == (
        400,
        {"body_loc_key": ["a visible alert needs the body's localisation key"]},
    )
    assert PushPolicy.objects.get().body_loc_key == "wake_body"


# --- devices ------------------------------------------------------------------------------------


def test_the_device_counts_are_per_service_and_say_no_token_or_subject(api, tenant_a, tenant_b):
    for subject in ("did:example:one", "didcomm:" + "1" * 64):
        services.device_set(tenant=tenant_a, subject=subject, service="fcm", token=f"tok-{subject[-3:]}", platform=None)
    services.device_set(tenant=tenant_a, subject="did:example:one", service="apns", token=APNS_TOKEN, platform="ios")
    services.device_set(tenant=tenant_b, subject="did:example:b", service="webpush", token=_sub(), platform=None)
    resp = api.get("/api/v1/push/devices/tenant-a/")
    assert (resp.status_code, resp.json()) == (
        200,
        {"tenant": "tenant-a", "total": 3, "services": {"fcm": 2, "apns": 1, "webpush": 0}},
    )
    text = resp.content.decode()
    assert "did:" not in text and "tok-" not in text and APNS_TOKEN not in text
    assert api.get("/api/v1/push/devices/tenant-b/").json()["services"] == {"fcm": 0, "apns": 0, "webpush": 1}


# --- permissions --------------------------------------------------------------------------------

PROVIDER_BODY = {"kind": "webhook", "settings": {"url": URL2}, "credentials": {"secret": SECRET2}}
# (name, method, path, body, the permission it needs, its success status); tenant B has a webhook provider.
OPERATIONS = [
    ("provider list", "get", "/api/v1/push/providers/tenant-b/", None, "view_pushprovider", 200),
    ("provider read", "get", "/api/v1/push/providers/tenant-b/webhook/", None, "view_pushprovider", 200),
    ("provider add", "post", "/api/v1/push/providers/tenant-a/", PROVIDER_BODY, "add_pushprovider", 201),
    ("provider change", "patch", "/api/v1/push/providers/tenant-b/webhook/", {"enabled": False}, "change_pushprovider", 200),
    ("provider remove", "delete", "/api/v1/push/providers/tenant-b/webhook/", None, "delete_pushprovider", 204),
    ("policy read", "get", "/api/v1/push/policies/tenant-a/", None, "view_pushpolicy", 200),
    ("policy change", "patch", "/api/v1/push/policies/tenant-a/", {"wake_interval_s": 5}, "change_pushpolicy", 200),
    ("device counts", "get", "/api/v1/push/devices/tenant-a/", None, "view_device", 200),
]  # fmt: skip
# Every push permission but the ones that allow an operation (change implies view, as in the admin).
ALL = {"view_pushprovider", "add_pushprovider", "change_pushprovider", "delete_pushprovider",
       "view_pushpolicy", "add_pushpolicy", "change_pushpolicy", "view_device", "change_device"}  # fmt: skip
ALLOWING = {"view_pushprovider": {"view_pushprovider", "change_pushprovider"},
            "view_pushpolicy": {"view_pushpolicy", "change_pushpolicy"},
            "view_device": {"view_device", "change_device"}}  # fmt: skip


def _client(django_user_model, *codenames: str, staff: bool = True, name: str = "stella") -> APIClient:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=staff)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="push", codename__in=codenames))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user).key}")
    return client


@pytest.fixture
def world(tenant_a, tenant_b):
    _webhook(tenant_b)
    services.device_set(tenant=tenant_a, subject="did:example:one", service="fcm", token="tok-1", platform=None)


def _call(client, method, path, body):
    return getattr(client, method)(path, body, format="json") if body is not None else getattr(client, method)(path)


@pytest.mark.parametrize(("name", "method", "path", "body", "needs", "ok"), OPERATIONS, ids=[o[0] for o in OPERATIONS])
def test_each_operation_needs_its_model_permission(django_user_model, world, name, method, path, body, needs, ok):
    others = sorted(ALL - ALLOWING.get(needs, {needs}))
    before = _state()
    resp = _call(_client(django_user_model, *others), method, path, body)
    assert (resp.status_code, resp["Content-Type"], resp.json()) == (403, "application/json", DENIED)
    assert _state() == before
    resp = _call(_client(django_user_model, needs, name="sam"), method, path, body)
    assert resp.status_code == ok, resp.content[:500]


@pytest.mark.parametrize("view", ["view_pushprovider", "view_pushpolicy", "view_device"])
def test_change_implies_view(django_user_model, world, view):
    change = view.replace("view_", "change_")
    path = {"view_pushprovider": "/api/v1/push/providers/tenant-b/", "view_pushpolicy": "/api/v1/push/policies/tenant-a/",
            "view_device": "/api/v1/push/devices/tenant-a/"}[view]  # fmt: skip
    assert _client(django_user_model, change).get(path).status_code == 200


@pytest.mark.parametrize(("name", "method", "path", "body", "needs", "ok"), OPERATIONS, ids=[o[0] for o in OPERATIONS])
def test_a_non_staff_user_with_every_permission_and_no_token_are_refused(
    client, django_user_model, world, name, method, path, body, needs, ok
):
    before = _state()
    resp = _call(_client(django_user_model, *ALL, staff=False), method, path, body)
    assert (resp.status_code, resp.json()) == (403, DENIED)
    resp = _call(APIClient(), method, path, body)
    assert (resp.status_code, resp.json()) == (401, {"detail": "Authentication credentials were not provided."})
    assert _state() == before


@pytest.mark.parametrize(
    ("path", "codename"),
    [
        ("/api/v1/push/providers/tenant-b/webhook/", "change_pushprovider"),
        ("/api/v1/push/policies/tenant-a/", "change_pushpolicy"),
        ("/api/v1/push/devices/tenant-a/", "change_device"),
    ],
)
def test_a_method_no_route_handles_needs_its_permission_before_the_405(django_user_model, world, path, codename):
    before = _state()
    assert (
        _client(django_user_model, codename.replace("change_", "view_")).put(path, {}, format="json").status_code == 403
    )
    resp = _client(django_user_model, codename, name="sam").put(path, {}, format="json")
    assert (resp.status_code, resp.json()) == (405, {"detail": 'Method "PUT" not allowed.'})
    assert _state() == before


def test_a_push_permission_alone_reads_the_schema_which_documents_the_push_api(django_user_model, db):
    doc = _client(django_user_model, "view_device").get("/api/v1/schema/?format=json").json()
    paths = {p: sorted(ops) for p, ops in doc["paths"].items() if p.startswith("/api/v1/push/")}
    assert paths == {
        "/api/v1/push/devices/{slug}/": ["get"],
        "/api/v1/push/policies/{slug}/": ["get", "patch"],
        "/api/v1/push/providers/{slug}/": ["get", "post"],
        "/api/v1/push/providers/{slug}/{kind}/": ["delete", "get", "patch"],
    }
    schemas = doc["components"]["schemas"]
    assert "credentials" not in schemas["PushProvider"]["properties"]
    assert schemas["PushProviderCreateRequest"]["properties"]["credentials"]["writeOnly"] is True
    assert schemas["PushProviderCreateRequest"]["required"] == ["credentials", "kind"]
    assert "409" in doc["paths"]["/api/v1/push/providers/{slug}/"]["post"]["responses"]
    assert list(doc["paths"]["/api/v1/push/providers/{slug}/{kind}/"]["delete"]["responses"])[0] == "204"
