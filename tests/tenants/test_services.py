"""Tenant services: validation, aliases, audit entries, suspension and host resolution (with its cache)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from apps.tenants.models import AuditEntry, Tenant, TenantDomain
from apps.tenants.selectors import tenant_cache_clear, tenant_for_host
from apps.tenants.services import (
    tenant_create,
    tenant_resume,
    tenant_suspend,
    tenant_update,
)

ROOT = Path(__file__).resolve().parents[2]
# A Django secret production accepts (50 or more characters, 5 or more distinct).
STRONG_SECRET = "k3y-" + "0123456789abcdef" * 4


def test_create_sets_did_web_from_the_domain_and_records_an_audit_entry(db, actor):
    tenant = tenant_create(slug="acme", domain="Mediator.ACME.test:8443", aliases=["m.acme.test"], actor=actor)
    assert tenant.domain == "mediator.acme.test:8443"
    assert tenant.did == "did:web:mediator.acme.test%3A8443"
    assert tenant.public_url == "http://mediator.acme.test:8443"
    assert list(tenant.aliases.values_list("domain", flat=True)) == ["m.acme.test"]
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.actor_name, entry.tenant_slug) == ("tenant.create", "cli", "olivia", "acme")
    assert entry.before is None
    assert entry.after["domain"] == "mediator.acme.test:8443" and entry.after["aliases"] == ["m.acme.test"]
    # Never secrets: only 16-hex-digit public fingerprints.
    assert len(entry.after["signing_key"]) == 16 and "sealed" not in str(entry.after)


def test_fixture_defaults_follow_protocol_decisions(tenant_a):
    assert (tenant_a.max_registration_days, tenant_a.pending_event_ttl_days, tenant_a.pending_queue_cap) == (
        365,
        30,
        10_000,
    )
    assert (tenant_a.max_page_size, tenant_a.max_body_bytes, tenant_a.prekey_grace_hours) == (100, 6 * 1024 * 1024, 72)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"domain": "not a host"}, "domain"),
        ({"domain": "ok.test:99999"}, "domain"),
        ({"domain": "ok.test", "max_page_size": 101}, "max_page_size"),
        ({"domain": "ok.test", "max_registration_days": 0}, "max_registration_days"),
        ({"domain": "ok.test", "pending_queue_cap": -1}, "pending_queue_cap"),
        ({"domain": "ok.test", "registration_open": "yes"}, "registration_open"),
        ({"domain": "ok.test", "aliases": ["a.mediator.test"]}, "aliases"),
        ({"domain": "a.mediator.test"}, "domain"),
    ],
)
def test_create_rejects_invalid_input_with_a_field_error(tenant_a, kwargs, field):
    with pytest.raises(ValidationError) as exc:
        tenant_create(slug="new", **kwargs)
    errors = exc.value.message_dict if hasattr(exc.value, "error_dict") else {"__all__": exc.value.messages}
    assert field in errors
    assert not Tenant.objects.filter(slug="new").exists()


def test_update_changes_policy_and_aliases_and_audits_before_and_after(tenant_a, actor):
    tenant_update(tenant=tenant_a, actor=actor, max_identities=5, registration_open=False, aliases=["alias-a.test"])
    tenant_a.refresh_from_db()
    assert (tenant_a.max_identities, tenant_a.registration_open) == (5, False)
    entry = AuditEntry.objects.get(action="tenant.update")
    assert entry.before["max_identities"] == 0 and entry.after["max_identities"] == 5
    assert entry.before["aliases"] == [] and entry.after["aliases"] == ["alias-a.test"]
    # The identity of a tenant is fixed: its domain (and so its DID) cannot be edited.
    with pytest.raises(ValidationError) as exc:
        tenant_update(tenant=tenant_a, actor=actor, domain="other.test")
    assert exc.value.message_dict == {"domain": ["This field cannot be changed."]}


def test_an_update_that_changes_nothing_writes_no_audit_entry(tenant_a, actor):
    tenant_update(tenant=tenant_a, actor=actor, max_identities=0)
    assert AuditEntry.objects.count() == 0


def test_suspend_and_resume_are_audited(tenant_a, actor):
    tenant_suspend(tenant=tenant_a, actor=actor)
    tenant_resume(tenant=tenant_a, actor=actor)
    rows = list(AuditEntry.objects.order_by("id").values_list("action", "before", "after"))
    assert rows == [
        ("tenant.suspend", {"status": "active"}, {"status": "suspended"}),
        ("tenant.resume", {"status": "suspended"}, {"status": "active"}),
    ]


def test_host_resolution_serves_the_domain_aliases_and_default_ports(tenant_a, tenant_b, actor):
    tenant_update(tenant=tenant_b, actor=actor, aliases=["B-alias.test"])
    assert tenant_for_host("a.mediator.test").pk == tenant_a.pk
    assert tenant_for_host("A.Mediator.Test:443").pk == tenant_a.pk
    assert tenant_for_host("b-alias.test").pk == tenant_b.pk
    assert tenant_for_host("b-alias.test:80").pk == tenant_b.pk
    assert tenant_for_host("unknown.test") is None  # no "default" tenant in this test


def test_a_host_with_a_trailing_dot_is_the_same_host(tenant_a, tenant_b, actor):
    """`a.mediator.test.` is the absolute form of the same DNS name (RFC 1034 §3.1): the same tenant,
    not the default one, as the operator hosts and Django's ALLOWED_HOSTS read it."""
    tenant_update(tenant=tenant_b, actor=actor, aliases=["b-alias.test:8443"])
    assert tenant_for_host("a.mediator.test.").pk == tenant_a.pk
    assert tenant_for_host("A.Mediator.Test.:443").pk == tenant_a.pk
    assert tenant_for_host("b-alias.test.:8443").pk == tenant_b.pk
    assert tenant_for_host("a.mediator.test..") is None
    assert tenant_for_host("b-alias.test.:9999") is None


@override_settings(MEDIATOR_TENANT_CACHE_SECONDS=60)
def test_the_host_cache_answers_without_queries_and_forgets_on_save(tenant_a, actor):
    tenant_cache_clear()
    assert tenant_for_host("a.mediator.test").is_active
    with CaptureQueriesContext(connection) as ctx:
        cached = tenant_for_host("a.mediator.test")
    assert len(ctx.captured_queries) == 0 and cached.pk == tenant_a.pk
    tenant_suspend(tenant=tenant_a, actor=actor)  # a save: the signal clears this process's cache
    assert tenant_for_host("a.mediator.test").is_active is False
    TenantDomain.objects.create(tenant=tenant_a, domain="late-alias.test")
    assert tenant_for_host("late-alias.test").pk == tenant_a.pk


@override_settings(MEDIATOR_TENANT_CACHE_SECONDS=60)
def test_each_request_gets_its_own_copy_of_the_cached_tenant(tenant_a):
    tenant_cache_clear()
    first, second = tenant_for_host("a.mediator.test"), tenant_for_host("a.mediator.test")
    assert first is not second and first._state is not second._state
    assert (first.pk, first.did, first._state.db, first._state.adding) == (tenant_a.pk, tenant_a.did, "default", False)
    # What one request sets on its copy (attributes, the related-object cache) never reaches another's.
    first.max_body_bytes = 1
    first._state.fields_cache["probe"] = object()
    third = tenant_for_host("a.mediator.test")
    assert third.max_body_bytes == tenant_a.max_body_bytes
    assert "probe" not in third._state.fields_cache and "probe" not in second._state.fields_cache


@override_settings(MEDIATOR_TENANT_CACHE_SECONDS=0)
def test_without_the_cache_every_lookup_is_one_query(tenant_a):
    with CaptureQueriesContext(connection) as ctx:
        tenant_for_host("a.mediator.test")
    assert len(ctx.captured_queries) == 1


def _import_settings(env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIATOR_", "DJANGO_"))}
    env.update({"PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "mediator_project.settings"}, **env_extra)
    code = "import django; django.setup(); print('loaded')"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_production_settings_fail_loudly_without_a_deployment_key(tmp_path):
    result = _import_settings(
        {"MEDIATOR_ENV": "production", "DJANGO_SECRET_KEY": STRONG_SECRET, "MEDIATOR_VAR_DIR": str(tmp_path)}
    )
    assert result.returncode != 0
    assert (
        "ImproperlyConfigured: MEDIATOR_DEPLOYMENT_KEY (or MEDIATOR_DEPLOYMENT_KEY_FILE) must be set in production"
        in result.stderr
    )


PRODUCTION_ENV = {
    "MEDIATOR_ENV": "production",
    "DJANGO_SECRET_KEY": STRONG_SECRET,
    "MEDIATOR_DEPLOYMENT_KEY": "ab" * 32,
    "MEDIATOR_OPERATOR_HOSTS": "ops.example",
}


@pytest.mark.parametrize("key", ["zzzz", "ab" * 16, "ab" * 33, "zz" * 32, "correct horse battery staple"])
def test_production_refuses_a_deployment_key_that_is_not_32_bytes_of_hex(tmp_path, key):
    result = _import_settings({**PRODUCTION_ENV, "MEDIATOR_DEPLOYMENT_KEY": key, "MEDIATOR_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "ImproperlyConfigured: MEDIATOR_DEPLOYMENT_KEY must be 64 hex characters (32 bytes) in production" in (
        result.stderr
    )


@pytest.mark.parametrize(
    "secret", ["x", "x" * 50, "abcd" * 20, "short-but-varied-0123456789", "django-insecure-" + STRONG_SECRET]
)
def test_production_refuses_a_weak_django_secret(tmp_path, secret):
    result = _import_settings({**PRODUCTION_ENV, "DJANGO_SECRET_KEY": secret, "MEDIATOR_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is weak: production needs 50 or more characters" in result.stderr


def test_production_starts_with_a_hex_deployment_key_and_a_strong_secret(tmp_path):
    result = _import_settings(
        {**PRODUCTION_ENV, "MEDIATOR_DEPLOYMENT_KEY": "AB" * 32, "MEDIATOR_VAR_DIR": str(tmp_path)}
    )
    assert (result.returncode, result.stdout.strip()) == (0, "loaded"), result.stderr


def test_development_still_generates_its_keys_into_var(tmp_path):
    result = _import_settings({"MEDIATOR_VAR_DIR": str(tmp_path)})
    assert (result.returncode, result.stdout.strip()) == (0, "loaded"), result.stderr
    key = (tmp_path / "deployment.key").read_text()
    assert len(bytes.fromhex(key)) == 32 and len((tmp_path / "django-secret.key").read_text()) >= 50


def test_production_settings_accept_the_deployment_key_from_a_file(tmp_path):
    key_file = tmp_path / "deployment.key"
    key_file.write_text("ab" * 32)
    result = _import_settings(
        {
            "MEDIATOR_ENV": "production",
            "DJANGO_SECRET_KEY": STRONG_SECRET,
            "MEDIATOR_DEPLOYMENT_KEY_FILE": str(key_file),
            "MEDIATOR_OPERATOR_HOSTS": "ops.example",
            "MEDIATOR_VAR_DIR": str(tmp_path),
        }
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "loaded"
