"""The tenant form and page an operator understands without the source (issue 18): fields in words
with units, bounds and defaults; pasted URLs cleaned; conflicts name the tenant; status-aware actions."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError

from apps.tenants.models import Tenant
from apps.tenants.services import normalize_domain, normalize_public_url, tenant_create
from tests.console.test_admin import ADD, _add_form, change_url

pytestmark = pytest.mark.django_db


def labels(html: str) -> dict[str, str]:
    return {
        m.group(1): re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", m.group(2))).strip()
        for m in re.finditer(r'<label[^>]*for="id_([a-z_]+)"[^>]*>(.*?)</label>', html, re.S)
    }


def test_every_field_of_the_add_form_is_labelled_in_words_with_its_unit(staff_client):
    found = labels(staff_client.get(ADD).content.decode())
    assert found["domain"].startswith("Primary domain")
    assert found["public_url"].startswith("Public URL")
    assert found["pending_event_ttl_days"].startswith("Pending event lifetime (days)")
    assert found["max_body_bytes"].startswith("Largest request body (bytes)")
    assert found["rate_limit_per_did"].startswith("Rate limit per DID (commands per minute)")
    assert not any(re.search(r"\b(Did|Public url|ttl)\b", text) for text in found.values()), found


def test_policy_help_gives_meaning_bounds_and_default(staff_client):
    html = staff_client.get(ADD).content.decode()
    assert "Allowed 1024 (1.0 KiB)–67108864 (64.0 MiB). Default 6291456 (6.0 MiB)." in html
    assert "Blank = the deployment default (MEDIATOR_RATE_LIMIT_PER_DID, now 0)." in html  # tests switch limits off
    assert "Allowed 1–3 650. Default 30." in html


def test_the_url_widgets_wear_the_theme(staff_client):
    html = staff_client.get(ADD).content.decode()
    for name in ("public_url", "aliases"):
        tag = re.search(rf'<(input|textarea)[^>]*name="{name}"[^>]*>', html).group(0)
        assert "border" in tag, tag


def test_a_pasted_url_is_reduced_to_its_host(staff_client):
    data = _add_form(domain="https://Mediator.Globex.example/", aliases="https://M.Globex.example", slug="globex")
    data["public_url"] = "HTTPS://Mediator.Globex.example/"
    resp = staff_client.post(ADD, data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors
    tenant = Tenant.objects.get(slug="globex")
    assert (tenant.domain, tenant.did, tenant.public_url) == (
        "mediator.globex.example",
        "did:web:mediator.globex.example",
        "https://mediator.globex.example",
    )
    assert list(tenant.aliases.values_list("domain", flat=True)) == ["m.globex.example"]


@pytest.mark.parametrize(
    "value",
    [
        "https://Mediator.Other.example/path",
        "https://mediator.other.example/?q=1",
        "HTTP://MEDIATOR.OTHER.EXAMPLE/a/b#frag",
        "mediator.other.example",
    ],
)
def test_a_pasted_url_is_reduced_to_its_lowercase_host_whatever_follows_it(value):
    assert normalize_domain(value) == "mediator.other.example"


def test_a_url_with_a_user_name_is_refused_with_a_reason():
    with pytest.raises(ValidationError) as exc:
        normalize_domain("https://user@mediator.example/")
    assert exc.value.messages == [
        "'https://user@mediator.example/' carries a user name or password: give the host (and :port) only"
    ]


def test_a_pasted_url_with_a_path_makes_a_tenant_in_the_console(staff_client):
    data = _add_form(domain="https://Mediator.Other.example/path", aliases="https://Alias.Other.example/x?y=1")
    resp = staff_client.post(ADD, data)
    assert resp.status_code == 302, resp.context["adminform"].form.errors
    tenant = Tenant.objects.get(slug="acme")
    assert tenant.domain == "mediator.other.example"
    assert list(tenant.aliases.values_list("domain", flat=True)) == ["alias.other.example"]


@pytest.mark.parametrize("cap", ["-1", "0", "10000001"])
def test_a_queue_cap_out_of_bounds_gets_one_message_whatever_side(staff_client, cap):
    resp = staff_client.post(ADD, _add_form(pending_queue_cap=cap))
    assert resp.context["adminform"].form.errors["pending_queue_cap"] == ["Must be between 1 and 10 000 000."]


def test_the_api_says_the_same_for_a_policy_value_out_of_bounds(api):
    for cap in (-1, 0):
        resp = api.post(
            "/api/v1/tenants/", {"slug": "x", "domain": "x.test", "policy": {"pending_queue_cap": cap}}, format="json"
        )
        assert resp.json() == {"policy": {"pending_queue_cap": ["Must be between 1 and 10 000 000."]}}


def test_alias_errors_show_with_the_other_errors_at_once(staff_client):
    data = _add_form(domain="not a host!", aliases="bad alias!", pending_queue_cap="-1")
    errors = staff_client.post(ADD, data).context["adminform"].form.errors
    assert set(errors) == {"domain", "aliases", "pending_queue_cap"}, errors
    assert errors["aliases"] == ["'bad alias!' is not a host name (host or host:port)"]


def test_public_urls_are_normalised_the_same_way_in_the_api(api):
    assert normalize_public_url("HTTPS://Mediator.Globex.example/") == "https://mediator.globex.example"
    resp = api.post(
        "/api/v1/tenants/",
        {
            "slug": "globex",
            "domain": "https://Mediator.Globex.example/",
            "public_url": "https://Mediator.Globex.example/",
        },
        format="json",
    )
    assert resp.status_code == 201, resp.json()
    assert (resp.json()["domain"], resp.json()["public_url"]) == (
        "mediator.globex.example",
        "https://mediator.globex.example",
    )


def test_a_conflict_names_the_tenant_that_serves_the_host(staff_client, tenant_a):
    tenant_create(slug="initech", domain="mediator.initech.example", aliases=["m.initech.example"])
    resp = staff_client.post(ADD, _add_form(domain="M.Initech.example", aliases=""))
    assert resp.context["adminform"].form.errors["domain"] == ["m.initech.example is already served by tenant initech."]


def test_the_tenant_page_is_status_aware_and_not_a_template(staff_client, tenant_a):
    html = staff_client.get(change_url(tenant_a)).content.decode()
    assert f"/admin/tenants/tenant/{tenant_a.pk}/suspend/" in html
    assert f"/admin/tenants/tenant/{tenant_a.pk}/resume/" not in html
    assert "Data and keys" in html
    assert "_addanother" not in html
    assert html.count(">Live figures<") + html.count("Live figures\n") <= 1
    add = staff_client.get(ADD).content.decode()
    assert "_addanother" in add and '<h2 class="font-semibold text-lg mb-4' in add and ">Add tenant</h2>" in add


def test_a_view_only_operator_sees_the_same_words_on_the_read_only_tenant_page(django_user_model, tenant_a):
    from django.contrib.auth.models import Permission
    from django.test import Client

    viewer = django_user_model.objects.create_user("vera", "vera@ops.test", "pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_tenant"))
    client = Client()
    client.force_login(viewer)
    resp = client.get(change_url(tenant_a))
    assert resp.status_code == 200
    html = re.sub(r"\s+", " ", resp.content.decode())
    assert 'name="pending_event_ttl_days"' not in html  # read-only: no input
    for words in (
        "Pending event lifetime (days)",
        "Largest request body (bytes)",
        "Rate limit per DID (commands per minute)",
    ):
        assert words in html, words
    assert not re.search(r"Pending event ttl days|Max body bytes|Rate limit per did\b", html)
