"""Operators: the admin's grant pages and revoke action, the operator API's grants with recipient
DIDs and queue depths, its permissions, and the /metrics figures (no DID labels)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from apps.didcomm.models import Mediation, QueuedMessage
from apps.ops.metrics import DATABASE_COLLECTOR
from apps.tenants.services import Actor, api_token_issue
from tests.support.didcomm_agent import CM2, forward_for, routed_did


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
    return user, api_token_issue(user=user).key


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
    return user, api_token_issue(user=user).key


def test_the_grant_list_shows_short_dids_with_a_copy_button_and_searches_recipients(grant, admin_client):
    import html as html_lib

    mediation, rcpt = grant
    page = html_lib.unescape(admin_client.get("/admin/didcomm/mediation/").content.decode())
    assert f'data-copy="{mediation.client_did}"' in page and 'class="did-short"' in page
    found = admin_client.get("/admin/didcomm/mediation/", {"q": rcpt.did[-40:]}).content.decode()
    assert f"/admin/didcomm/mediation/{mediation.pk}/change/" in found
    none = admin_client.get("/admin/didcomm/mediation/", {"q": "no-such-did"}).content.decode()
    assert f"/admin/didcomm/mediation/{mediation.pk}/change/" not in none


def test_a_revoked_grant_no_longer_routes(didcomm_a, grant, admin_client):
    mediation, rcpt = grant
    page = admin_client.get(f"/admin/didcomm/mediation/{mediation.pk}/change/")
    assert page.status_code == 200 and f'title="{rcpt.did}"'.encode() in page.content
    bulk = {"action": "revoke_selected", "_selected_action": [mediation.pk]}
    # The bulk action confirms first and says what goes; nothing is revoked yet.
    resp = admin_client.post("/admin/didcomm/mediation/", bulk)
    assert resp.status_code == 200 and "1 queued message</strong> and <strong>1 recipient DID" in resp.content.decode()
    assert Mediation.objects.get().state == "granted" and QueuedMessage.objects.count() == 1
    resp = admin_client.post("/admin/didcomm/mediation/", {**bulk, "confirm": "yes"})
    assert resp.status_code == 302
    assert Mediation.objects.get().state == "revoked"
    resp = didcomm_a.post(forward_for(rcpt, didcomm_a.mediator_did))
    assert resp.status_code == 400


def test_a_grant_page_is_read_only_with_a_revoke_button_that_confirms_what_it_deletes(grant, admin_client):
    from apps.tenants.models import AuditEntry

    mediation, rcpt = grant
    url = f"/admin/didcomm/mediation/{mediation.pk}/change/"
    page = admin_client.get(url).content.decode()
    # Nothing to save or delete; one action: Revoke. DIDs shortened, the full DID in title and copy button.
    for absent in ('name="_save"', 'name="_continue"', 'name="_addanother"', "/delete/"):
        assert absent not in page, absent
    assert f'href="/admin/didcomm/mediation/{mediation.pk}/revoke/"' in page
    assert f'data-copy="{mediation.client_did}"' in page and f'data-copy="{rcpt.did}"' in page
    assert f">{rcpt.did}<" not in page and f">{mediation.client_did}<" not in page
    assert admin_client.get(f"/admin/didcomm/mediation/{mediation.pk}/delete/").status_code == 403

    confirm = admin_client.get(f"/admin/didcomm/mediation/{mediation.pk}/revoke/")
    text = confirm.content.decode()
    assert confirm.status_code == 200
    assert (
        "This deletes <strong>1 queued message</strong> and <strong>1 recipient DID</strong>; they cannot be restored."
        in text
    )
    assert f'title="{rcpt.did}"' in text and ">Revoke the grant<" in text.replace("\n", "").replace("  ", "")
    assert Mediation.objects.get().state == "granted" and QueuedMessage.objects.count() == 1  # GET changes nothing

    resp = admin_client.post(f"/admin/didcomm/mediation/{mediation.pk}/revoke/")
    assert (resp.status_code, resp["Location"]) == (302, url)
    assert Mediation.objects.get().state == "revoked" and QueuedMessage.objects.count() == 0
    assert AuditEntry.objects.get(action="didcomm.revoke_grant").via == "admin"
    # A revoked grant's page offers no Revoke; asking again is answered, not repeated.
    assert f"/admin/didcomm/mediation/{mediation.pk}/revoke/" not in admin_client.get(url).content.decode()
    again = admin_client.post(f"/admin/didcomm/mediation/{mediation.pk}/revoke/")
    assert again.status_code == 302 and AuditEntry.objects.filter(action="didcomm.revoke_grant").count() == 1


def test_revoking_needs_the_change_permission_on_grants(grant, client, django_user_model):
    mediation, _ = grant
    viewer, _ = _staff(django_user_model, "view_mediation")
    client.force_login(viewer)
    assert client.get(f"/admin/didcomm/mediation/{mediation.pk}/change/").status_code == 200
    assert (
        f"/admin/didcomm/mediation/{mediation.pk}/revoke/"
        not in client.get(f"/admin/didcomm/mediation/{mediation.pk}/change/").content.decode()
    )
    assert client.get(f"/admin/didcomm/mediation/{mediation.pk}/revoke/").status_code == 403
    assert client.post(f"/admin/didcomm/mediation/{mediation.pk}/revoke/").status_code == 403
    assert Mediation.objects.get().state == "granted"


def test_metrics_show_the_queue_per_tenant_without_dids(client, grant):
    DATABASE_COLLECTOR.invalidate()
    text = client.get("/metrics").content.decode()
    assert 'mediator_message_queue_size{tenant="tenant-a"} 1.0' in text
    assert "did:" not in text


# --- the policy through the operator API ----------------------------------------------------------

DEFAULT_POLICY = {
    "tenant": "tenant-a",
    "enabled": True,
    "mediation": "open",
    "max_grants": 0,
    "max_recipients_per_grant": 100,
    "queue_cap": 1000,
    "overflow": "evict",
    "message_ttl_hours": 72,
    "rate_limit_per_sender": None,
    "rate_limit_per_ip": None,
    "rate_limit_per_ip_burst": None,
    "unproven_recipients": "accept",
}


@pytest.fixture
def api(django_user_model):
    from rest_framework.test import APIClient

    user = django_user_model.objects.create_user("olivia", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=["didcomm", "tenants"],
            codename__in=["change_didcommpolicy", "change_tenant"],
        )
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user).key}")
    return client


def test_the_api_reads_the_policy_with_its_defaults(api, tenant_a, tenant_b):
    resp = api.get("/api/v1/didcomm/policies/tenant-a/")
    assert (resp.status_code, resp.json()) == (200, DEFAULT_POLICY)
    listed = api.get("/api/v1/didcomm/policies/").json()
    assert [p["tenant"] for p in listed["results"]] == ["tenant-a"]  # rows exist once used (or read)
    assert api.get("/api/v1/didcomm/policies/no-such-tenant/").status_code == 404


def test_the_api_refuses_a_bad_policy_in_its_error_shape_and_writes_nothing(api, tenant_a):
    from apps.tenants.models import AuditEntry

    resp = api.patch("/api/v1/didcomm/policies/tenant-a/", {"queue_cap": 5, "queue_size": 5}, format="json")
    assert (resp.status_code, resp.json()) == (400, {"queue_size": ["Unknown field."]})
    resp = api.patch(
        "/api/v1/didcomm/policies/tenant-a/",
        {
            "queue_cap": 0,
            "overflow": "drop",
            "mediation": "maybe",
            "message_ttl_hours": 10_000,
            "rate_limit_per_ip": -1,
            "max_recipients_per_grant": "many",
            "enabled": "perhaps",
            "unproven_recipients": "sometimes",
        },
        format="json",
    )
    assert resp.status_code == 400
    assert resp.json() == {
        "queue_cap": ["Ensure this value is greater than or equal to 1."],
        "overflow": ['"drop" is not a valid choice.'],
        "mediation": ['"maybe" is not a valid choice.'],
        "message_ttl_hours": ["Ensure this value is less than or equal to 8784."],
        "rate_limit_per_ip": ["Ensure this value is greater than or equal to 0."],
        "max_recipients_per_grant": ["A valid integer is required."],
        "enabled": ["Must be a valid boolean."],
        "unproven_recipients": ['"sometimes" is not a valid choice.'],
    }
    assert api.patch("/api/v1/didcomm/policies/tenant-a/", [1], format="json").status_code == 400
    assert api.get("/api/v1/didcomm/policies/tenant-a/").json() == DEFAULT_POLICY
    assert not AuditEntry.objects.filter(action="didcomm.update_policy").exists()


def test_the_api_edits_the_policy_audited_and_the_mediator_follows_it(api, didcomm_a, didcomm_b, wallet):
    from apps.tenants.models import AuditEntry

    change = {"mediation": "closed", "queue_cap": 2, "overflow": "reject", "rate_limit_per_ip": 0}
    resp = api.patch("/api/v1/didcomm/policies/tenant-a/", change, format="json")
    assert (resp.status_code, resp.json()) == (200, {**DEFAULT_POLICY, **change})
    entry = AuditEntry.objects.get(action="didcomm.update_policy")
    assert (entry.via, entry.actor_name, entry.tenant_slug) == ("api", "olivia", "tenant-a")
    assert entry.before == {"mediation": "open", "queue_cap": 1000, "overflow": "evict", "rate_limit_per_ip": None}
    assert entry.after == change
    # An unchanged PATCH changes nothing and records nothing.
    assert api.patch("/api/v1/didcomm/policies/tenant-a/", change, format="json").status_code == 200
    assert AuditEntry.objects.filter(action="didcomm.update_policy").count() == 1
    # Tenant A now denies mediation; tenant B (its own policy) still grants it.
    _, answer, _ = didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    assert answer["type"] == CM2 + "mediate-deny"
    _, answer, _ = didcomm_b.send(wallet, wallet.message(CM2 + "mediate-request"))
    assert answer["type"] == CM2 + "mediate-grant"
    assert api.get("/api/v1/didcomm/policies/tenant-b/").json() == {**DEFAULT_POLICY, "tenant": "tenant-b"}


def test_the_tenant_form_edits_the_didcomm_policy_with_the_same_bounds_and_audits(admin_client, tenant_a):
    from apps.didcomm.models import DidcommPolicy
    from apps.didcomm.policy import policy_for
    from apps.tenants.models import AuditEntry
    from tests.console.test_admin import _add_form, didcomm_form

    policy_for(tenant=tenant_a)
    url = f"/admin/tenants/tenant/{tenant_a.pk}/change/"
    form = {
        k: v for k, v in _add_form(name="Tenant A", aliases="", public_url="").items() if k not in ("slug", "domain")
    }
    resp = admin_client.post(url, {**form, **didcomm_form(queue_cap="0")})
    assert resp.status_code == 200
    assert resp.context["adminform"].form.errors["didcomm_queue_cap"] == [
        "Ensure this value is greater than or equal to 1."
    ]
    assert DidcommPolicy.objects.get().queue_cap == 1000
    resp = admin_client.post(url, {**form, **didcomm_form(queue_cap="7", overflow="reject")})
    assert resp.status_code == 302 and DidcommPolicy.objects.get().queue_cap == 7
    entry = AuditEntry.objects.get(action="didcomm.update_policy")
    assert (entry.via, entry.before, entry.after) == (
        "admin",
        {"queue_cap": 1000, "overflow": "evict"},
        {"queue_cap": 7, "overflow": "reject"},
    )
    # The old policy page is not a second form: it opens the tenant's page at its DIDComm section.
    old = admin_client.get(f"/admin/didcomm/didcommpolicy/{tenant_a.pk}/change/")
    assert (old.status_code, old["Location"]) == (302, f"{url}#didcomm-policy")
    listing = admin_client.get("/admin/didcomm/didcommpolicy/").content.decode()
    assert "/admin/didcomm/didcommpolicy/add/" not in listing and "UC-021" not in listing
    assert "Refuse the new message<" in listing


def test_the_tenant_page_labels_the_didcomm_policy_in_words_with_units_ranges_and_defaults(admin_client, tenant_a):
    page = admin_client.get(f"/admin/tenants/tenant/{tenant_a.pk}/change/").content.decode()
    section = page[page.index('id="didcomm-policy"') :]
    for text in (
        "DIDComm message lifetime (hours)",
        "Queued DIDComm messages not picked up within this many hours are purged. Allowed 1–8 784. Default 72.",
        "DIDComm queue cap (messages per recipient)",
        "Decentrl events have their own cap (Queues and storage: Pending queue cap). Allowed 1–100 000. Default 1 000.",
        "DIDComm rate limit per IP address (requests per minute)",
        "Blank = the deployment default (MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP, now 0).",
        "Evict the oldest queued message (the sender gets 202)",
        "Refuse the new message (the sender gets a problem report, HTTP 507)",
    ):
        assert text in section, text
    for stock in ("Message ttl hours", "Rate limit per ip", "UC-021", "DIDComm policy of tenant"):
        assert stock not in page, stock
    # Decentrl's queue section points at DIDComm's own cap.
    assert "DIDComm messages have their own queue cap and lifetime under DIDComm policy." in page


def test_a_user_who_may_only_view_the_didcomm_policy_sees_it_read_only_on_the_tenant_page(
    client, django_user_model, tenant_a
):
    from apps.didcomm.models import DidcommPolicy
    from apps.didcomm.policy import policy_update

    policy_update(tenant=tenant_a, actor=Actor(None, "cli"), queue_cap=42)
    user = django_user_model.objects.create_user("vera", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["change_tenant", "view_didcommpolicy"]))
    client.force_login(user)
    page = client.get(f"/admin/tenants/tenant/{tenant_a.pk}/change/").content.decode()
    assert 'name="didcomm_queue_cap"' not in page
    section = page[page.index('id="didcomm-policy"') :]
    assert "DIDComm queue cap (messages per recipient)</th><td data-figure>42<" in section
    # Saving the tenant form leaves the policy alone (the user may not change it).
    from tests.console.test_admin import _add_form

    form = {
        k: v for k, v in _add_form(name="Tenant A", aliases="", public_url="").items() if k not in ("slug", "domain")
    }
    resp = client.post(f"/admin/tenants/tenant/{tenant_a.pk}/change/", {**form, "didcomm_queue_cap": "7"})
    assert resp.status_code == 302 and DidcommPolicy.objects.get().queue_cap == 42


# --- rotation of the DIDComm identity -------------------------------------------------------------


def test_the_api_rotates_the_didcomm_identity_and_the_old_did_keeps_working(api, didcomm_a, tenant_a, wallet):
    from apps.tenants.models import AuditEntry

    old = didcomm_a.mediator_did
    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(old)
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    signing_before = tenant_a.signing_public
    resp = api.post("/api/v1/tenants/tenant-a/rotate-didcomm-identity/")
    assert resp.status_code == 200
    body = resp.json()
    new = didcomm_a.mediator_did
    assert new != old and body["did"] == new
    assert body["invitation_url"] == didcomm_a.http.get("/didcomm/invitation?form=url").content.decode()
    assert [p["did"] for p in body["previous"]] == [old]
    assert (body["http_uri"], body["ws_uri"]) == ("http://a.mediator.test/didcomm", "ws://a.mediator.test/didcomm/ws")
    # Only the DIDComm identity: the Decentrl keys stay.
    tenant_a.refresh_from_db()
    assert bytes(tenant_a.signing_public) == bytes(signing_before)
    entry = AuditEntry.objects.get(action="didcomm.rotate_identity")
    assert (entry.via, entry.before, entry.after) == ("api", {"didcomm_did": old}, {"didcomm_did": new})
    # The old DID still takes forwards in its grace period; the client has the announcement queued.
    assert didcomm_a.post(forward_for(rcpt, old)).status_code == 202
    assert QueuedMessage.objects.filter(recipient__isnull=True).count() == 1
    assert api.post("/api/v1/tenants/no-such-tenant/rotate-didcomm-identity/").status_code == 404


def test_the_tenant_page_shows_the_invitation_with_copy_and_qr_and_rotates_after_confirmation(
    admin_client, didcomm_a, tenant_a
):
    from apps.didcomm.invitation import invitation_for, invitation_qr_svg, invitation_v1_for
    from apps.didcomm.policy import policy_update
    from apps.tenants.models import AuditEntry

    _, url = invitation_for(tenant=tenant_a)
    page = admin_client.get(f"/admin/tenants/tenant/{tenant_a.pk}/change/").content.decode()
    assert (
        '<textarea id="didcomm-oob-url" readonly rows="3" class="font-mono text-xs w-full" '
        f'aria-label="DIDComm v2 (Out-of-Band 2.0): URL">{url}'
    ) in page
    assert '<button type="button" data-copy-target="didcomm-oob-url"' in page
    qr = invitation_qr_svg(url, alt="QR code of the DIDComm v2 invitation of tenant-a")
    assert "/static/didcomm/copy.js" in page
    assert '<figure id="didcomm-oob-qr">' + qr + "</figure>" in page
    # the QR's text alternative
    assert qr.startswith('<svg role="img" aria-label="QR code of the DIDComm v2 invitation of tenant-a" viewBox=')
    assert "<title>QR code of the DIDComm v2 invitation of tenant-a</title>" in qr
    # the Aries OOB 1.1 invitation (ACA-Py, Credo) beside it: its own Copy button and QR, the same helper
    _, url_v1 = invitation_v1_for(tenant=tenant_a)
    assert url_v1.startswith("http://a.mediator.test/didcomm?oob=")
    assert (
        '<textarea id="didcomm-oob-v1-url" readonly rows="3" class="font-mono text-xs w-full" '
        f'aria-label="DIDComm v1 (Aries Out-of-Band 1.1): ACA-Py --mediator-invitation, Credo: URL">{url_v1}'
    ) in page
    assert '<button type="button" data-copy-target="didcomm-oob-v1-url"' in page
    qr_v1 = invitation_qr_svg(url_v1, alt="QR code of the DIDComm v1 invitation of tenant-a")
    assert '<figure id="didcomm-oob-v1-qr">' + qr_v1 + "</figure>" in page
    assert "DIDComm v1 (Aries Out-of-Band 1.1): ACA-Py --mediator-invitation, Credo" in page
    assert "<script>" not in page.split("didcomm-invitation", 1)[1].split("</fieldset>", 1)[0]

    confirm = admin_client.get(f"/admin/tenants/tenant/{tenant_a.pk}/rotate-didcomm/")
    assert confirm.status_code == 200 and b"Rotate the DIDComm identity of tenant-a" in confirm.content
    assert didcomm_a.mediator_did == invitation_for(tenant=tenant_a)[0]["from"]  # nothing rotated on GET
    resp = admin_client.post(f"/admin/tenants/tenant/{tenant_a.pk}/rotate-didcomm/")
    assert resp.status_code == 302
    assert AuditEntry.objects.get(action="didcomm.rotate_identity").via == "admin"
    _, new_url = invitation_for(tenant=tenant_a)
    page = admin_client.get(f"/admin/tenants/tenant/{tenant_a.pk}/change/").content.decode()
    assert new_url != url and new_url in page
    new_url_v1 = invitation_v1_for(tenant=tenant_a)[1]
    assert new_url_v1 != url_v1 and new_url_v1 in page and url_v1 not in page

    policy_update(tenant=tenant_a, actor=Actor(None, "cli"), enabled=False)
    page = admin_client.get(f"/admin/tenants/tenant/{tenant_a.pk}/change/").content.decode()
    assert (
        "DIDComm is disabled: switch it on under" in page
        and "didcomm-oob-url" not in page
        and "didcomm-oob-v1-url" not in page
    )


def test_the_identity_and_connection_pages_show_dids_shortened(admin_client, tenant_a):
    from apps.didcomm.identity import identity_current
    from apps.didcomm.models import Connection

    identity = identity_current(tenant=tenant_a)
    page = admin_client.get(f"/admin/didcomm/mediatoridentity/{identity.pk}/change/").content.decode()
    assert f'data-copy="{identity.did}"' in page and f">{identity.did}<" not in page
    their = "did:peer:4" + "z" * 400
    connection = Connection.objects.create(
        tenant=tenant_a, identity=identity, their_did=their, their_verkey="v" * 44, thread_id="t",
        protocol="didexchange/1.1", state=Connection.State.COMPLETED,
    )  # fmt: skip
    page = admin_client.get(f"/admin/didcomm/connection/{connection.pk}/change/").content.decode()
    assert f'data-copy="{their}"' in page and f">{their}<" not in page
