"""The console's words (issue 33 item 25): plurals in the right number, acronyms in capitals,
record and page titles that say what they are, and empty lists explained."""

from __future__ import annotations

import pytest
from django.contrib import messages as django_messages
from django.contrib.auth.models import Permission

from apps.didcomm.models import Mediation
from apps.tenants.models import Tenant
from apps.usage.models import CommandMeter
from apps.wire.display import words

pytestmark = pytest.mark.django_db


def _messages(resp) -> list[str]:
    return [str(m) for m in django_messages.get_messages(resp.wsgi_request)]


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ("both", "Rotated the signing key and pre-key of tenant-a."),
        ("signing", "Rotated the signing key of tenant-a."),
        ("prekey", "Rotated the pre-key of tenant-a."),
    ],
)
def test_a_key_rotation_says_which_keys_in_words(staff_client, tenant_a, keys, said):
    resp = staff_client.post(f"/admin/tenants/tenant/{tenant_a.pk}/rotate-keys/", {"keys": keys}, follow=True)
    assert said in _messages(resp)


def test_an_unknown_key_choice_rotates_nothing(staff_client, tenant_a):
    before = bytes(tenant_a.signing_public)
    resp = staff_client.post(f"/admin/tenants/tenant/{tenant_a.pk}/rotate-keys/", {"keys": "all"})
    assert resp.status_code == 400
    tenant_a.refresh_from_db()
    assert bytes(tenant_a.signing_public) == before


def test_bulk_actions_count_in_the_right_number(staff_client, tenant_a, tenant_b):
    one = staff_client.post(
        "/admin/tenants/tenant/", {"action": "suspend_selected", "_selected_action": [tenant_a.pk]}, follow=True
    )
    assert "Suspended 1 mediator." in _messages(one)
    two = staff_client.post(
        "/admin/tenants/tenant/",
        {"action": "resume_selected", "_selected_action": [tenant_a.pk, tenant_b.pk]},
        follow=True,
    )
    assert "Resumed 2 mediators." in _messages(two)
    assert not any("(s)" in m for m in _messages(one) + _messages(two))


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("didcomm_messages", "DIDComm messages"),
        ("http_status", "HTTP status"),
        ("client_did", "Client DID"),
        ("pending_events", "Pending events"),
        ("rate_limit_per_ip", "Rate limit per IP"),
    ],
)
def test_labels_from_keys_keep_acronyms_in_capitals(key, label):
    assert words(key) == label


def test_the_purge_plan_names_didcomm_messages_in_capitals(staff_client, tenant_a):
    html = staff_client.get(f"/admin/tenants/tenant/{tenant_a.pk}/purge/").content.decode()
    assert "Didcomm" not in html


def test_a_meter_page_and_list_say_http_status_and_sender_did(staff_client, tenant_a):
    from django.utils import timezone

    meter = CommandMeter.objects.create(
        tenant=tenant_a,
        at=timezone.now(),
        transport="http",
        command_type="QUERY_EVENTS",
        code="OK",
        http_status=200,
        bytes_in=10,
        bytes_out=20,
        duration_ms=1.0,
    )
    for path in ("/admin/usage/commandmeter/", f"/admin/usage/commandmeter/{meter.pk}/change/"):
        html = staff_client.get(path).content.decode()
        assert "HTTP status" in html, path
        assert "Http status" not in html and "Sender did" not in html, path


def test_a_list_page_is_titled_by_what_it_lists(staff_client, tenant_a):
    html = staff_client.get("/admin/tenants/tenant/").content.decode()
    assert "<title>" in html and "Select tenant to change" not in html
    assert "Tenants | " in html


def test_an_empty_list_says_what_is_empty(staff_client, django_user_model):
    html = staff_client.get("/admin/tenants/apitoken/").content.decode()
    assert "yielded" not in html and "There are no API tokens yet." in html
    filtered = staff_client.get("/admin/tenants/tenant/?q=nothing-like-this").content.decode()
    assert "Nothing matches this search or these filters." in filtered
    viewer = django_user_model.objects.create_user("vera", password="pw-pw-pw-pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_apitoken"))
    staff_client.force_login(viewer)
    assert "There are no API tokens." in staff_client.get("/admin/tenants/apitoken/").content.decode()


def test_a_grant_is_titled_as_a_grant_not_as_a_capitalised_did(tenant_a):
    grant = Mediation(tenant=tenant_a, client_did="did:peer:2.Ez6LSabc", state=Mediation.State.GRANTED)
    assert str(grant).startswith("Grant to did:peer:2.Ez6LSabc")
    assert Tenant.objects.count() >= 1
