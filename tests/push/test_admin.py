"""The push providers' console page (apps/push/admin.py): credentials are write-only (checked with
the provider's `check` on save, sealed, never in the page), and a refused check stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from apps.didcomm.models import Mediation
from apps.didcomm.recipients import did_hash
from apps.push import services
from apps.push.models import Device, PushPolicy, PushProvider
from apps.tenants.models import AuditEntry
from apps.tenants.services import Actor
from tests.console.test_admin import _add_form
from tests.push.test_ended_subjects import v1_connection
from tests.support.operators import push_section_form
from tests.support.registration import register

SECRET = "operator-secret-" * 3
URL = "https://gateway.example/wake"


def _post(admin_client, tenant, **fields):
    data = {"tenant": tenant.pk, "kind": "webhook", "enabled": "on", "settings": f'{{"url": "{URL}"}}'}
    data.update(fields)
    return admin_client.post("/admin/push/pushprovider/add/", data)


@pytest.mark.django_db
def test_the_credentials_are_checked_sealed_and_never_shown_back(admin_client, tenant_a):
    resp = _post(admin_client, tenant_a, credentials_json=f'{{"secret": "{SECRET}"}}')
    assert resp.status_code == 302, resp.content.decode()[:2000]
    provider = PushProvider.objects.get()
    assert provider.credentials() == {"secret": SECRET} and SECRET not in provider.credentials_sealed
    for url in ("/admin/push/pushprovider/", f"/admin/push/pushprovider/{provider.pk}/change/"):
        page = admin_client.get(url).content.decode()
        assert SECRET not in page and provider.credentials_sealed not in page
    # Saving without credentials keeps the sealed ones.
    resp = admin_client.post(
        f"/admin/push/pushprovider/{provider.pk}/change/", {"enabled": "", "settings": f'{{"url": "{URL}"}}'}
    )
    assert resp.status_code == 302
    provider.refresh_from_db()
    assert provider.enabled is False and provider.credentials() == {"secret": SECRET}


@pytest.mark.django_db
def test_credentials_the_provider_refuses_store_nothing(admin_client, tenant_a):
    resp = _post(admin_client, tenant_a, credentials_json='{"secret": "short"}')
    assert resp.status_code == 200 and "the secret is at least 32 characters" in resp.content.decode()
    resp = _post(
        admin_client,
        tenant_a,
        credentials_json=f'{{"secret": "{SECRET}"}}',
        settings='{"url": "http://gateway.example/"}',
    )
    assert resp.status_code == 200 and "the URL must be https" in resp.content.decode()
    assert PushProvider.objects.count() == 0


@pytest.mark.django_db
def test_a_grants_page_says_whether_a_device_is_registered_and_when_it_was_woken(admin_client, tenant_a):
    mediation = Mediation.objects.create(
        tenant=tenant_a, client_did="did:example:c", client_hash=did_hash("did:example:c"), state="granted"
    )
    url = f"/admin/didcomm/mediation/{mediation.pk}/change/"
    assert "none registered" in admin_client.get(url).content.decode()
    subject = services.subject_for_mediation(mediation.client_hash)
    services.device_set(tenant=tenant_a, subject=subject, service="fcm", token="tok-secret-1", platform=None)
    Device.objects.update(last_woken_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    page = admin_client.get(url).content.decode()
    assert "Firebase Cloud Messaging: last woken 2026-01-02T03:04:05Z" in page and "tok-secret-1" not in page


# --- the push section of the tenant page (the inlines; apps/console/admin.py names them) ---------

APNS_KEY_ID, TEAM_ID = "ABC123DEFG", "TEAM123456"


def _tenant_form() -> dict:
    """The tenant's change form as posted, with an empty push section."""
    return {
        k: v for k, v in _add_form(name="Tenant A", aliases="", public_url="").items() if k not in ("slug", "domain")
    }


def _webhook_fields(**overrides) -> dict:
    fields = {"kind": "webhook", "enabled": "on", "settings": f'{{"url": "{URL}"}}', "credentials_json": ""}
    fields.update(overrides)
    return fields


def _page(client, tenant) -> str:
    resp = client.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    assert resp.status_code == 200
    return resp.content.decode()


def _save(client, tenant, *providers, initial=0, policy=None):
    data = _tenant_form()
    data.update(push_section_form(*providers, policy=policy, initial_providers=initial))
    return client.post(f"/admin/tenants/tenant/{tenant.pk}/change/", data)


@pytest.mark.django_db
def test_the_tenant_page_sets_a_provider_and_never_shows_its_credentials(staff_client, tenant_a):
    resp = _save(staff_client, tenant_a, _webhook_fields(credentials_json=f'{{"secret": "{SECRET}"}}'))
    assert resp.status_code == 302, resp.content.decode()[:3000]
    provider = PushProvider.objects.get(tenant=tenant_a)
    assert provider.credentials() == {"secret": SECRET} and provider.state == PushProvider.State.UNCHECKED
    PushProvider.objects.update(state=PushProvider.State.FAILING, last_error="failed: http_401")
    page = _page(staff_client, tenant_a)
    assert SECRET not in page and provider.credentials_sealed not in page
    assert 'name="push_providers-0-credentials_json"' in page and "failed: http_401" in page and "Failing" in page
    # Saved again with the field empty: the sealed credentials stay, and the state starts over.
    existing = _webhook_fields(id=str(provider.pk), tenant=str(tenant_a.pk), enabled="")
    resp = _save(staff_client, tenant_a, existing, initial=1)
    assert resp.status_code == 302, resp.content.decode()[:3000]
    provider.refresh_from_db()
    assert (provider.enabled, provider.credentials(), provider.state) == (False, {"secret": SECRET}, "unchecked")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (_webhook_fields(credentials_json='{"secret": "short"}'), "the secret is at least 32 characters"),
        (_webhook_fields(credentials_json="not json"), "the credentials are not JSON"),
        (_webhook_fields(), "enter the credentials"),
        (
            _webhook_fields(credentials_json=f'{{"secret": "{SECRET}"}}', settings='{"url": "http://gw.example/"}'),
            "the URL must be https",
        ),
        (
            {"kind": "apns", "enabled": "on", "credentials_json": '{"signing_key": "not a key"}',
             "settings": f'{{"key_id": "{APNS_KEY_ID}", "team_id": "{TEAM_ID}", "bundle_id": "org.example.wallet",'
             ' "environment": "production"}'},
            "signing_key",
        ),
    ],
)  # fmt: skip
def test_a_credential_the_provider_refuses_is_a_form_error_and_nothing_is_saved(staff_client, tenant_a, fields, error):
    data = _tenant_form()
    data["name"] = "Renamed meanwhile"
    data.update(push_section_form(fields))
    resp = staff_client.post(f"/admin/tenants/tenant/{tenant_a.pk}/change/", data)
    page = resp.content.decode()
    assert resp.status_code == 200 and error in page
    assert "short" not in page.split('name="push_providers-0-credentials_json"')[1][:200]  # never rendered back
    assert PushProvider.objects.count() == 0
    tenant_a.refresh_from_db()
    assert tenant_a.name != "Renamed meanwhile"  # the page is saved as a whole, or not at all


@pytest.mark.django_db
def test_the_tenant_page_sets_the_wake_interval_and_the_visible_alert(staff_client, tenant_a):
    policy = {"wake_interval_s": "300", "visible": "on", "title_loc_key": "", "body_loc_key": "wake_body",
              "collapse_id": "wake"}  # fmt: skip
    resp = _save(staff_client, tenant_a, policy=policy)
    assert resp.status_code == 302, resp.content.decode()[:3000]
    choices = services.choices_of(tenant_id=tenant_a.pk)
    assert choices.wake_interval_s == 300
    assert (choices.wake.visible, choices.wake.title_loc_key, choices.wake.body_loc_key, choices.wake.collapse_id) == (
        True, None, "wake_body", "wake"
    )  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"visible": "on", "body_loc_key": ""}, "a visible alert needs the body&#x27;s localisation key"),
        ({"wake_interval_s": "86401"}, "the wake interval is at most 86400 seconds"),
        ({"wake_interval_s": "-1"}, "greater than or equal to 0"),
        ({"collapse_id": "has space"}, "1 to 64 of A-Z a-z 0-9 _ . -"),
    ],
)
def test_a_bad_push_policy_is_a_form_error_and_nothing_is_saved(staff_client, tenant_a, change, error):
    policy = {"wake_interval_s": "", "title_loc_key": "", "body_loc_key": "", "collapse_id": "", **change}
    resp = _save(staff_client, tenant_a, policy=policy)
    assert resp.status_code == 200 and error in resp.content.decode()
    assert not PushPolicy.objects.exists()


def _staff(django_user_model, name: str, *codenames: str):
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_an_operator_without_push_permissions_neither_sees_nor_changes_the_push_section(django_user_model, tenant_a):
    provider = PushProvider(tenant=tenant_a, kind="webhook", settings={"url": URL}, last_error="failed: http_401")
    provider.seal({"secret": SECRET})
    provider.save()
    client = _staff(django_user_model, "tina", "change_tenant")
    page = _page(client, tenant_a)
    assert "push_providers-TOTAL_FORMS" not in page and "push_policy-TOTAL_FORMS" not in page
    assert "failed: http_401" not in page
    # A POST carrying the section anyway changes nothing of it (the tenant itself is saved).
    resp = _save(
        client, tenant_a, _webhook_fields(id=str(provider.pk), enabled=""), initial=1,
        policy={"wake_interval_s": "5", "body_loc_key": ""},
    )  # fmt: skip
    assert resp.status_code == 302
    assert PushProvider.objects.get().enabled is True and not PushPolicy.objects.exists()
    assert client.get("/admin/push/pushprovider/").status_code == 403


@pytest.mark.django_db
def test_view_permission_shows_state_and_last_error_read_only(django_user_model, tenant_a):
    provider = PushProvider(tenant=tenant_a, kind="webhook", settings={"url": URL}, last_error="retry: timeout")
    provider.seal({"secret": SECRET})
    provider.save()
    viewer = _staff(django_user_model, "vic", "change_tenant", "view_pushprovider", "view_pushpolicy")
    page = _page(viewer, tenant_a)
    assert "retry: timeout" in page and "credentials_json" not in page and SECRET not in page
    # Push permissions without the right to change the tenant: read-only too (the page saves as a whole).
    pusher = _staff(django_user_model, "pat", "view_tenant", "change_pushprovider", "add_pushprovider")
    page = _page(pusher, tenant_a)
    assert "retry: timeout" in page and "credentials_json" not in page
    assert pusher.post(f"/admin/tenants/tenant/{tenant_a.pk}/change/", _tenant_form()).status_code == 403
    # And with both, the provider is editable there.
    editor = _staff(django_user_model, "eve", "change_tenant", "change_pushprovider")
    assert 'name="push_providers-0-credentials_json"' in _page(editor, tenant_a)


@pytest.mark.django_db
def test_the_add_page_has_no_push_section(staff_client):
    page = staff_client.get("/admin/tenants/tenant/add/").content.decode()
    assert "push_providers-TOTAL_FORMS" not in page and "push_policy-TOTAL_FORMS" not in page


@pytest.mark.django_db
def test_a_v1_connections_page_and_the_registrations_list_say_whether_a_device_is_registered(
    admin_client, tenant_a, post_a, alice
):
    connection = v1_connection(tenant_a)
    url = f"/admin/didcomm/connection/{connection.pk}/change/"
    assert "none registered (no grant)" in admin_client.get(url).content.decode()
    mediation = Mediation.objects.create(
        tenant=tenant_a, client_did=connection.their_did, client_hash=did_hash(connection.their_did),
        state="granted", connection=connection,
    )  # fmt: skip
    assert "none registered" in admin_client.get(url).content.decode()
    subject = services.subject_for_mediation(mediation.client_hash)
    services.device_set(tenant=tenant_a, subject=subject, service="fcm", token="tok-secret-2", platform="android")
    page = admin_client.get(url).content.decode()
    assert "Firebase Cloud Messaging (android): last woken never" in page and "tok-secret-2" not in page

    register(post_a, alice, tenant_a)
    listing = f"/admin/tenants/tenant/{tenant_a.pk}/registrations/"
    assert "none registered" in admin_client.get(listing).content.decode()
    token = "ef" * 32
    services.device_set(tenant=tenant_a, subject=services.subject_for_did(alice.did), service="apns", token=token,
                        platform="ios")  # fmt: skip
    Device.objects.filter(service="apns").update(last_woken_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    page = admin_client.get(listing).content.decode()
    assert "Apple Push Notification service (ios): last woken 2026-01-02T03:04:05Z" in page and token not in page


# --- audit: each save and removal of a provider and each edit of the policy, from the console -----


def _audits(action: str) -> list[tuple]:
    return list(
        AuditEntry.objects.filter(action=action)
        .order_by("id")
        .values_list("via", "actor_name", "tenant_slug", "before", "after")
    )


@pytest.mark.django_db
def test_the_tenant_page_audits_each_provider_save_and_removal_without_credentials(staff_client, tenant_a):
    resp = _save(staff_client, tenant_a, _webhook_fields(credentials_json=f'{{"secret": "{SECRET}"}}'))
    assert resp.status_code == 302, resp.content.decode()[:3000]
    provider = PushProvider.objects.get()
    changed = _webhook_fields(
        id=str(provider.pk), tenant=str(tenant_a.pk), enabled="", settings=f'{{"url": "{URL}/2"}}'
    )
    assert _save(staff_client, tenant_a, changed, initial=1).status_code == 302
    rotated = _webhook_fields(id=str(provider.pk), tenant=str(tenant_a.pk), enabled="", settings=f'{{"url": "{URL}/2"}}',
                              credentials_json=f'{{"secret": "{SECRET}!"}}')  # fmt: skip
    assert _save(staff_client, tenant_a, rotated, initial=1).status_code == 302
    assert _audits("push.save_provider") == [
        ("admin", "olivia", "tenant-a", None,
         {"kind": "webhook", "enabled": True, "settings": {"url": URL}, "credentials_changed": True}),
        ("admin", "olivia", "tenant-a", {"kind": "webhook", "enabled": True, "settings": {"url": URL}},
         {"kind": "webhook", "enabled": False, "settings": {"url": f"{URL}/2"}, "credentials_changed": False}),
        ("admin", "olivia", "tenant-a", {"kind": "webhook"}, {"kind": "webhook", "credentials_changed": True}),
    ]  # fmt: skip
    removed = _webhook_fields(id=str(provider.pk), tenant=str(tenant_a.pk), DELETE="on")
    assert _save(staff_client, tenant_a, removed, initial=1).status_code == 302
    assert not PushProvider.objects.exists()
    assert _audits("push.delete_provider") == [
        ("admin", "olivia", "tenant-a", {"kind": "webhook", "enabled": False, "settings": {"url": f"{URL}/2"}}, None)
    ]
    assert not any(SECRET in str(row) for row in AuditEntry.objects.values_list("before", "after"))


@pytest.mark.django_db
def test_the_tenant_page_audits_a_policy_edit_and_not_an_unchanged_one(staff_client, tenant_a):
    policy = {"wake_interval_s": "300", "visible": "on", "title_loc_key": "", "body_loc_key": "wake_body",
              "collapse_id": ""}  # fmt: skip
    assert _save(staff_client, tenant_a, policy=policy).status_code == 302
    assert _audits("push.update_policy") == [
        ("admin", "olivia", "tenant-a", {"wake_interval_s": None, "visible": False, "body_loc_key": ""},
         {"wake_interval_s": 300, "visible": True, "body_loc_key": "wake_body"}),
    ]  # fmt: skip
    data = _tenant_form()
    data.update(
        push_section_form(policy={**policy, "id": str(PushPolicy.objects.get().pk), "tenant": str(tenant_a.pk)})
    )
    data["push_policy-INITIAL_FORMS"] = "1"
    assert staff_client.post(f"/admin/tenants/tenant/{tenant_a.pk}/change/", data).status_code == 302
    data["push_policy-0-wake_interval_s"] = ""
    assert staff_client.post(f"/admin/tenants/tenant/{tenant_a.pk}/change/", data).status_code == 302
    assert _audits("push.update_policy")[1:] == [
        ("admin", "olivia", "tenant-a", {"wake_interval_s": 300}, {"wake_interval_s": None}),
    ]


@pytest.mark.django_db
def test_the_providers_page_audits_a_removal_and_each_of_a_bulk_removal(admin_client, tenant_a, tenant_b):
    first = _post(admin_client, tenant_a, credentials_json=f'{{"secret": "{SECRET}"}}')
    second = _post(admin_client, tenant_b, credentials_json=f'{{"secret": "{SECRET}"}}')
    assert (first.status_code, second.status_code) == (302, 302)
    assert [row[:3] for row in _audits("push.save_provider")] == [
        ("admin", "admin", "tenant-a"),
        ("admin", "admin", "tenant-b"),
    ]
    a, b = PushProvider.objects.order_by("tenant__slug")
    resp = admin_client.post(f"/admin/push/pushprovider/{a.pk}/delete/", {"post": "yes"})
    assert resp.status_code == 302 and not PushProvider.objects.filter(pk=a.pk).exists()
    services.provider_save(provider=PushProvider(tenant=tenant_a, kind="webhook"), actor=Actor(None, "cli"),
                           enabled=True, settings_={"url": URL}, credentials={"secret": SECRET})  # fmt: skip
    resp = admin_client.post(
        "/admin/push/pushprovider/",
        {"action": "delete_selected", "_selected_action": [p.pk for p in PushProvider.objects.all()], "post": "yes"},
    )
    assert resp.status_code == 302 and not PushProvider.objects.exists()
    before = {"kind": "webhook", "enabled": True, "settings": {"url": URL}}
    assert sorted(_audits("push.delete_provider"), key=lambda row: row[2]) == [
        ("admin", "admin", "tenant-a", before, None),
        ("admin", "admin", "tenant-a", before, None),
        ("admin", "admin", "tenant-b", before, None),
    ]
