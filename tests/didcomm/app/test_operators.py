"""Operators: the admin's grant pages and revoke action, the operator API's grants with recipient
DIDs and queue depths, its permissions, and the /metrics figures (no DID labels)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from apps.didcomm.core.agent import CM2, forward_for, routed_did
from apps.didcomm.models import Mediation, QueuedMessage
from apps.ops.metrics import DATABASE_COLLECTOR


@pytest.fixture
def grant(didcomm_a, wallet):
    med = didcomm_a.mediator_did
    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(med)
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    return Mediation.objects.get(), rcpt


def _staff(django_user_model, *perms):
    user = django_user_model.objects.create_user("op", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="didcomm", codename__in=perms))
    return user, Token.objects.create(user=user).key


def test_the_api_lists_grants_and_revokes_with_the_model_permissions(client, django_user_model, grant, tenant_b):
    mediation, rcpt = grant
    _, token = _staff(django_user_model, "view_mediation")
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    listed = client.get("/api/v1/didcomm/grants/?tenant=tenant-a", **auth).json()
    assert listed["results"][0]["recipients"] == 1 and listed["results"][0]["queued"] == 1
    assert client.get("/api/v1/didcomm/grants/?tenant=tenant-b", **auth).json()["results"] == []
    detail = client.get(f"/api/v1/didcomm/grants/{mediation.pk}/", **auth).json()
    assert [(r["recipient_did"], r["queued"]) for r in detail["recipients"]] == [(rcpt.did, 1)]
    assert client.post(f"/api/v1/didcomm/grants/{mediation.pk}/revoke/", **auth).status_code == 403
    _, token2 = _staff_change(django_user_model)
    resp = client.post(f"/api/v1/didcomm/grants/{mediation.pk}/revoke/", HTTP_AUTHORIZATION=f"Token {token2}")
    assert resp.status_code == 200 and resp.json()["state"] == "revoked" and resp.json()["recipients"] == []
    assert QueuedMessage.objects.count() == 0


def _staff_change(django_user_model):
    user = django_user_model.objects.create_user("op2", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="didcomm", codename="change_mediation"))
    return user, Token.objects.create(user=user).key


def test_a_revoked_grant_no_longer_routes(didcomm_a, grant, admin_client):
    mediation, rcpt = grant
    page = admin_client.get(f"/admin/didcomm/mediation/{mediation.pk}/change/")
    assert page.status_code == 200 and rcpt.did.encode() in page.content
    resp = admin_client.post(
        "/admin/didcomm/mediation/", {"action": "revoke_selected", "_selected_action": [mediation.pk]}
    )
    assert resp.status_code == 302
    assert Mediation.objects.get().state == "revoked"
    resp = didcomm_a.post(forward_for(rcpt, didcomm_a.mediator_did))
    assert resp.status_code == 400


def test_metrics_show_the_queue_per_tenant_without_dids(client, grant):
    DATABASE_COLLECTOR.invalidate()
    text = client.get("/metrics").content.decode()
    assert 'mediator_message_queue_size{tenant="tenant-a"} 1.0' in text
    assert "did:" not in text
