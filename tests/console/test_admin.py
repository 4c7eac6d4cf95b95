"""The operator console, exercised as a staff user: pages render with live figures, writes go through
services with validation and audit, actions confirm first, and non-staff users are refused."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.console.services import purge_kinds
from apps.didcomm.models import DidcommPolicy
from apps.messaging.models import Contract, ContractRequest, PendingEvent
from apps.tenants.models import AuditEntry, Tenant, TenantKey
from apps.tenants.services import fingerprint
from apps.wire.display import words
from tests.support.operators import push_section_form
from tests.support.registration import contract_both_ways, register

CHANGELIST = "/admin/tenants/tenant/"
ADD = "/admin/tenants/tenant/add/"


def change_url(tenant) -> str:
    return reverse("admin:tenants_tenant_change", args=[tenant.pk])


def action_url(tenant, name: str) -> str:
    return f"/admin/tenants/tenant/{tenant.pk}/{name}/"


def _text(resp) -> str:
    return resp.content.decode()


def _add_form(**overrides) -> dict:
    data = {
        "slug": "acme",
        "name": "Acme Corp",
        "domain": "mediator.acme.test",
        "aliases": "acme-mediator.test\nmediator.acme.test:8443",
        "public_url": "",
        "registration_open": "on",
        "max_identities": "500",
        "max_registration_days": "365",
        "pending_event_ttl_days": "30",
        "pending_queue_cap": "10000",
        "contract_request_ttl_days": "30",
        "metering_retention_days": "90",
        "rate_limit_per_did": "",
        "rate_limit_per_ip": "",
        "max_body_bytes": str(6 * 1024 * 1024),
        "max_page_size": "100",
        "max_events_per_save": "100",
        "max_tags_per_event": "20",
        "max_tag_length": "256",
        "public_event_max_bytes": "65536",
        "public_max_tags": "20",
        "public_channel_id_max_length": "128",
        "public_publish_per_minute": "30",
        "prekey_grace_hours": "72",
        **didcomm_form(),
        **push_section_form(),
    }
    data.update(overrides)
    return data


def didcomm_form(**overrides) -> dict:
    """The tenant form's DIDComm policy fields at the model's defaults, as a browser posts them
    (every field of DidcommPolicy.EDITABLE, so that a field added there needs no change here)."""
    data = {}
    for name in DidcommPolicy.EDITABLE:
        default = DidcommPolicy._meta.get_field(name).get_default()
        if default is True:
            data[f"didcomm_{name}"] = "on"
        elif default is not False:
            data[f"didcomm_{name}"] = "" if default is None else str(default)
    data.update({f"didcomm_{k}": v for k, v in overrides.items()})
    return data


@pytest.fixture
def busy_a(post_a, tenant_a, alice, bob):
    """Tenant A with two registrations, a contract, two pending events for alice and a stored event."""
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, bob, alice, tenant_a)
    for blob in ("one", "two"):
        assert post_a.command(bob, blob, recipient_did=alice.did, channel="TWO_WAY_PRIVATE")[0] == 200
    event = {
        "sender_did": alice.did,
        "recipient_did": bob.did,
        "timestamp": 1,
        "payload": "x" * 100,
        "encrypted_tags": ["tag-secret"],
    }
    assert post_a.command(alice, {"type": "SAVE_EVENTS", "events": [event]}, recipient_did=tenant_a.did)[0] == 200
    return tenant_a


def test_the_changelist_shows_every_tenant_with_live_figures(
    staff_client, busy_a, tenant_b, django_assert_max_num_queries
):
    with django_assert_max_num_queries(12):
        resp = staff_client.get(CHANGELIST)
    assert resp.status_code == 200
    html = _text(resp)
    assert "tenant-a" in html and "tenant-b" in html and "a.mediator.test" in html
    cl = resp.context["cl"]
    figures = {t.slug: (t.stat_identities, t.stat_pending) for t in cl.result_list}
    assert figures == {"tenant-a": (2, 2), "tenant-b": (0, 0)}


def test_the_change_page_shows_figures_and_fingerprints_but_no_secrets(staff_client, busy_a, alice):
    resp = staff_client.get(change_url(busy_a))
    assert resp.status_code == 200
    html = _text(resp)
    decentrl = html[html.index('id="figures-decentrl"') : html.index('id="figures-didcomm"')]
    cells = re.findall(r"<td data-figure>(.*?)</td>", decentrl)
    # identities, contracts live/stored, pending, largest queue, pending requests, events, bytes, last activity
    assert [cells[i] for i in (0, 1, 2, 4, 5, 6)] == ["2", "3 / 3", "2", "0", "1", "100 B"]
    # the largest queue's DID shortened, the full one in its title and copy button
    assert cells[3].startswith('<span class="queue-cell">2 <span class="did-cell">')
    assert f'title="{alice.did}"' in cells[3] and f'data-copy="{alice.did}"' in cells[3]
    assert f">{alice.did}<" not in html
    assert busy_a.signing_private_sealed not in html and busy_a.prekey_private_sealed not in html
    assert "tag-secret" not in html and "x" * 100 not in html
    assert Contract.objects.first().signed_contract not in html


def test_creating_a_tenant_goes_through_the_service_and_is_audited(staff_client, operator):
    resp = staff_client.post(ADD, _add_form())
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    tenant = Tenant.objects.get(slug="acme")
    assert tenant.did == "did:web:mediator.acme.test"
    assert tenant.public_url == "http://mediator.acme.test"
    assert tenant.max_identities == 500
    assert sorted(tenant.aliases.values_list("domain", flat=True)) == ["acme-mediator.test", "mediator.acme.test:8443"]
    assert len(bytes(tenant.signing_public)) == 32 and tenant.signing_private_sealed.startswith("v1:")
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.actor_id, entry.tenant_id) == (
        "tenant.create",
        "admin",
        operator.pk,
        tenant.pk,
    )


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"domain": "not a host!"}, "domain", "is not a host name"),
        ({"domain": "a.mediator.test"}, "domain", "a.mediator.test is already served by tenant tenant-a"),
        ({"aliases": "a.mediator.test"}, "aliases", "a.mediator.test is already served by tenant tenant-a"),
        ({"max_page_size": "500"}, "max_page_size", "Must be between 1 and 100."),
        ({"max_registration_days": "0"}, "max_registration_days", "Must be between 1 and 3 650."),
    ],
)
def test_the_add_form_shows_validation_errors(staff_client, tenant_a, overrides, field, message):
    resp = staff_client.post(ADD, _add_form(**overrides))
    assert resp.status_code == 200
    errors = resp.context["adminform"].form.errors
    assert any(message in e for e in errors[field]), errors
    assert not Tenant.objects.filter(slug="acme").exists()
    assert AuditEntry.objects.count() == 0


def test_editing_policy_is_audited_with_before_and_after(staff_client, tenant_a):
    data = _add_form(
        name="Tenant A renamed", max_identities="3", aliases="a-alias.test", public_url="https://a.example"
    )
    for fixed in ("slug", "domain"):
        data.pop(fixed)
    data.pop("registration_open")  # unchecked: registration closed
    resp = staff_client.post(change_url(tenant_a), data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    tenant_a.refresh_from_db()
    assert (tenant_a.name, tenant_a.max_identities, tenant_a.registration_open) == ("Tenant A renamed", 3, False)
    assert tenant_a.public_url == "https://a.example" and tenant_a.domain == "a.mediator.test"
    entry = AuditEntry.objects.get(action="tenant.update")
    assert (entry.before["max_identities"], entry.after["max_identities"]) == (0, 3)
    assert (entry.before["registration_open"], entry.after["registration_open"]) == (True, False)
    assert entry.after["aliases"] == ["a-alias.test"]


def test_saving_a_tenant_with_a_blank_public_url_keeps_its_url(staff_client, tenant_a):
    data = _add_form(name="Tenant A", public_url="", aliases="")
    for fixed in ("slug", "domain"):
        data.pop(fixed)
    resp = staff_client.post(change_url(tenant_a), data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    tenant_a.refresh_from_db()
    assert tenant_a.public_url == "http://a.mediator.test"
    assert AuditEntry.objects.get(action="tenant.update").after.get("public_url", "http://a.mediator.test") == (
        "http://a.mediator.test"
    )


def test_suspend_asks_for_confirmation_then_suspends_and_resumes(staff_client, tenant_a, client):
    url = action_url(tenant_a, "suspend")
    resp = staff_client.get(url)
    assert resp.status_code == 200 and "MEDIATOR_UNAVAILABLE" in _text(resp)
    tenant_a.refresh_from_db()
    assert tenant_a.is_active  # a GET changes nothing
    assert staff_client.post(url).status_code == 302
    tenant_a.refresh_from_db()
    assert tenant_a.status == "suspended"
    assert client.get("/health", HTTP_HOST="a.mediator.test").status_code == 503
    # The page of a suspended tenant offers Resume only; suspending it again is refused.
    page = _text(staff_client.get(change_url(tenant_a)))
    assert f'href="{action_url(tenant_a, "resume")}"' in page and action_url(tenant_a, "suspend") not in page
    resp = staff_client.post(url, follow=True)
    assert "tenant-a is already suspended." in _text(resp)
    assert staff_client.post(action_url(tenant_a, "resume")).status_code == 302
    tenant_a.refresh_from_db()
    assert tenant_a.status == "active"
    assert list(AuditEntry.objects.order_by("id").values_list("action", "via")) == [
        ("tenant.suspend", "admin"),
        ("tenant.resume", "admin"),
    ]


def test_rotate_keys_from_the_change_page(staff_client, tenant_a):
    old_signing, old_prekey = bytes(tenant_a.signing_public), bytes(tenant_a.prekey_public)
    url = action_url(tenant_a, "rotate-keys")
    assert staff_client.get(url).status_code == 200
    assert staff_client.post(url, {"keys": "prekey"}).status_code == 302
    tenant_a.refresh_from_db()
    assert bytes(tenant_a.signing_public) == old_signing and bytes(tenant_a.prekey_public) != old_prekey
    assert list(TenantKey.objects.values_list("purpose", flat=True)) == ["prekey"]
    assert AuditEntry.objects.get().action == "tenant.rotate_keys"
    html = _text(staff_client.get(change_url(tenant_a)))
    assert f"prekey {fingerprint(old_prekey)} · retired" in html
    assert TenantKey.objects.get().private_sealed not in html


def test_purge_shows_a_dry_run_first_then_purges(staff_client, busy_a, alice):
    old = timezone.now() - timedelta(days=31)
    PendingEvent.objects.filter(tenant=busy_a).update(created_at=old)
    ContractRequest.objects.create(
        tenant=busy_a,
        recipient_did=alice.did,
        sender_did="did:x",
        encrypted_contract_request="e",
        requestor_ephemeral_public_key="k",
        acknowledged_at=timezone.now(),
    )
    Contract.objects.filter(tenant=busy_a, owner_did=alice.did).exclude(recipient_did=busy_a.did).update(expires_at=1)
    url = action_url(busy_a, "purge")

    resp = staff_client.get(url)
    assert resp.status_code == 200
    cells = dict(re.findall(r'data-kind="(\w+)">(\d+)<', _text(resp)))
    assert cells == {
        "nonces": "0",
        "pending_events": "2",
        "contract_requests": "1",
        "contracts": "1",
        "tombstones": "0",
        "didcomm_messages": "0",
        "didcomm_outbound": "0",
        "didcomm_message_ids": "0",
    }
    assert PendingEvent.objects.filter(tenant=busy_a).count() == 2  # nothing deleted by the dry run
    assert AuditEntry.objects.count() == 0

    assert staff_client.post(url).status_code == 302
    assert PendingEvent.objects.filter(tenant=busy_a).count() == 0
    assert ContractRequest.objects.filter(tenant=busy_a).count() == 0
    assert Contract.objects.filter(tenant=busy_a).count() == 2
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.after) == (
        "tenant.purge_expired",
        {
            "pending_events": 2,
            "contract_requests": 1,
            "contracts": 1,
            "tombstones": 0,
            "nonces": 0,
            "didcomm_messages": 0,
            "didcomm_outbound": 0,
            "didcomm_message_ids": 0,
        },
    )


def test_bulk_actions_suspend_and_purge_dry_run(staff_client, tenant_a, tenant_b):
    ids = [str(tenant_a.pk), str(tenant_b.pk)]
    resp = staff_client.post(CHANGELIST, {"action": "suspend_selected", "_selected_action": ids})
    assert resp.status_code == 302
    assert set(Tenant.objects.values_list("status", flat=True)) == {"suspended"}
    resp = staff_client.post(CHANGELIST, {"action": "purge_selected", "_selected_action": ids})
    assert resp.status_code == 200 and 'id="purge-plan"' in _text(resp)
    headings = re.findall(r'<th class="text-right font-semibold py-2 px-4">([^<]+)</th>', _text(resp))
    assert headings == [words(k) for k in purge_kinds()]  # "DIDComm messages", not "Didcomm"
    assert "Pending events" in headings and "Contract requests" in headings
    resp = staff_client.post(CHANGELIST, {"action": "purge_selected", "_selected_action": ids, "confirm": "yes"})
    assert resp.status_code == 302
    assert AuditEntry.objects.filter(action="tenant.purge_expired").count() == 2


def test_registrations_and_contracts_list_dids_and_expiry_only(staff_client, busy_a, alice, bob):
    resp = staff_client.get(action_url(busy_a, "registrations"))
    html = _text(resp)
    assert resp.status_code == 200 and alice.did in html and bob.did in html and "2 in total" in html
    resp = staff_client.get(action_url(busy_a, "contracts"))
    html = _text(resp)
    assert resp.status_code == 200 and "3 in total" in html
    for contract in Contract.objects.all():
        assert contract.signed_contract not in html
        for secret in ("requestor_signature", "recipient_ephemeral_public_key"):
            assert secret not in html


def test_the_audit_log_is_visible_and_read_only(staff_client, tenant_a, actor):
    from apps.tenants.services import tenant_suspend

    tenant_suspend(tenant=tenant_a, actor=actor)
    entry = AuditEntry.objects.get()
    resp = staff_client.get("/admin/tenants/auditentry/")
    assert resp.status_code == 200 and "tenant.suspend" in _text(resp)
    footer = re.sub(r"\s+", " ", re.search(r"(\d+\s+audit [a-z ]+)\n", _text(resp)).group(1)).strip()
    assert footer == "1 audit entry"
    resp = staff_client.get(f"/admin/tenants/auditentry/{entry.pk}/change/")
    assert resp.status_code == 200 and "&quot;suspended&quot;" in _text(resp)
    assert staff_client.get("/admin/tenants/auditentry/add/").status_code == 403
    assert staff_client.post(f"/admin/tenants/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403


def test_tenants_cannot_be_deleted_from_the_console(staff_client, tenant_a):
    assert staff_client.post(change_url(tenant_a).replace("/change/", "/delete/"), {"post": "yes"}).status_code == 403
    assert Tenant.objects.filter(pk=tenant_a.pk).exists()


@pytest.mark.parametrize(
    "path", [CHANGELIST, ADD, "/admin/tenants/auditentry/", "suspend/", "purge/", "registrations/"]
)
def test_non_staff_users_are_refused(client, plain_user, tenant_a, path):
    client.force_login(plain_user)
    url = action_url(tenant_a, path.strip("/")) if not path.startswith("/") else path
    resp = client.get(url)
    assert resp.status_code == 302 and resp["Location"].startswith("/admin/login/")
    resp = client.post(url)
    assert resp.status_code == 302 and resp["Location"].startswith("/admin/login/")
    tenant_a.refresh_from_db()
    assert tenant_a.is_active and AuditEntry.objects.count() == 0


def test_staff_without_permissions_cannot_act(client, django_user_model, tenant_a):
    viewer = django_user_model.objects.create_user("vic", password="pw-pw-pw-pw", is_staff=True)
    client.force_login(viewer)
    assert client.get(CHANGELIST).status_code == 403
    assert client.post(action_url(tenant_a, "suspend")).status_code == 403
    tenant_a.refresh_from_db()
    assert tenant_a.is_active


def test_the_login_page_and_dashboard_render(client, staff_client):
    assert client.get("/admin/login/").status_code == 200
    resp = staff_client.get("/admin/")
    assert resp.status_code == 200 and "Mediator operator console" in _text(resp)


@pytest.mark.parametrize("path", ["999999/suspend/", "999999/resume/", "abc/purge/", "999999/registrations/"])
def test_actions_on_a_missing_tenant_are_404(staff_client, path):
    assert staff_client.get(f"/admin/tenants/tenant/{path}").status_code == 404


def test_registrations_show_alias_short_did_and_a_copy_button(staff_client, busy_a, alice, bob):
    html = _text(staff_client.get(action_url(busy_a, "registrations")))
    cells = re.findall(r'<span class="did-cell">(.*?)</button></span>', html, re.S)
    assert len(cells) == 2
    newest = cells[0]  # bob registered last
    assert '<span class="did-alias">bob</span>' in newest
    assert f'data-copy="{bob.did}"' in newest and f'title="{bob.did}"' in newest
    short = re.search(r'<code class="did-short"[^>]*>([^<]+)</code>', newest).group(1)
    assert short.startswith("did:decentrl:") and "…" in short and len(short) < 40


@pytest.mark.parametrize(
    ("q", "found"), [("alice", ["alice"]), ("bob", ["bob"]), ("nobody", []), ("", ["bob", "alice"])]
)
def test_registrations_can_be_searched_by_alias_or_did_part(staff_client, busy_a, alice, bob, q, found):
    html = _text(staff_client.get(action_url(busy_a, "registrations"), {"q": q}))
    assert re.findall(r'<span class="did-alias">([^<]+)</span>', html) == found
    assert f"{len(found)} in total" in html


def test_contracts_can_be_filtered_by_expiry_and_searched(staff_client, busy_a, alice, bob):
    url = action_url(busy_a, "contracts")
    assert "3 in total" in _text(staff_client.get(url, {"state": "live"}))
    assert "0 in total" in _text(staff_client.get(url, {"state": "expired"}))
    Contract.objects.filter(tenant=busy_a, requestor_did=bob.did, recipient_did=alice.did).update(expires_at=1)
    assert "1 in total" in _text(staff_client.get(url, {"state": "expired"}))
    # alice's DID is a party of her registration and of the contract with bob, stored by both owners.
    assert "3 in total" in _text(staff_client.get(url, {"q": alice.did[-20:]}))
    # An unknown state is ignored rather than an error.
    assert "3 in total" in _text(staff_client.get(url, {"state": "bogus"}))
