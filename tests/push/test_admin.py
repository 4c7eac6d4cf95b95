"""The push providers' console page (apps/push/admin.py): credentials are write-only (checked with
the provider's `check` on save, sealed, never in the page), and a refused check stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apps.didcomm.models import Mediation
from apps.didcomm.recipients import did_hash
from apps.push import services
from apps.push.models import Device, PushProvider

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
