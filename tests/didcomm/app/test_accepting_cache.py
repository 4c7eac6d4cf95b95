"""The per-process cache of a tenant's DIDComm policy and accepting identities (identity.accepting_for, on apps/tenants/selectors.py's TenantCache):
a warm cache reads neither, an edit in this process is seen at once, and a rotation made by another
process never makes a message to the new DID undecryptable (one reload on an unknown kid)."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from apps.didcomm import identity, policy
from apps.didcomm.models import DidcommPolicy, MediatorIdentity, QueuedMessage
from apps.tenants.models import Tenant
from apps.tenants.services import Actor
from tests.support.didcomm_agent import CM2, Agent, forward_for, routed_did

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("_cache_on")]


@pytest.fixture
def _cache_on():
    identity.ACCEPTING.clear()
    with override_settings(MEDIATOR_TENANT_CACHE_SECONDS=60):
        yield
    identity.ACCEPTING.clear()


def _granted(didcomm, wallet: Agent, med: str) -> Agent:
    didcomm.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(med)
    didcomm.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    return rcpt


def _tables(queries) -> set[str]:
    return {t for t in ("didcomm_didcommpolicy", "didcomm_mediatoridentity") if any(t in q["sql"] for q in queries)}


def test_a_warm_cache_reads_neither_policy_nor_identities(didcomm_a, tenant_a, wallet):
    med = didcomm_a.mediator_did
    rcpt = _granted(didcomm_a, wallet, med)
    with CaptureQueriesContext(connection) as first:
        assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    with CaptureQueriesContext(connection) as second:
        assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    assert _tables(second.captured_queries) == set()
    assert QueuedMessage.objects.count() == 2
    cached = identity.accepting_for(tenant=tenant_a)
    assert cached.fresh is False and [i.did for i in cached.identities_now()] == [med]
    assert "agreement_key" in cached.identities[0].__dict__  # unsealed once, kept in memory
    del first


def test_a_policy_edit_in_this_process_is_seen_at_once(didcomm_a, tenant_a, wallet):
    med = didcomm_a.mediator_did
    rcpt = _granted(didcomm_a, wallet, med)
    assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    policy.policy_update(tenant=tenant_a, actor=Actor(None, "cli"), queue_cap=1, overflow="reject")
    resp = didcomm_a.post(forward_for(rcpt, med))
    assert resp.status_code == 507
    assert json.loads(resp.content)["body"]["code"] == "e.p.me.res.storage.full"
    policy.policy_update(tenant=tenant_a, actor=Actor(None, "cli"), enabled=False)
    assert didcomm_a.post(forward_for(rcpt, med)).status_code == 404


def test_a_rotation_in_another_process_reloads_once_on_an_unknown_kid(didcomm_a, tenant_a, wallet):
    old = didcomm_a.mediator_did
    rcpt = _granted(didcomm_a, wallet, old)
    assert didcomm_a.post(forward_for(rcpt, old)).status_code == 202
    stale = identity.ACCEPTING._entries[tenant_a.pk]
    new = identity.identity_rotate(tenant=tenant_a, actor=Actor(None, "cli")).did
    # Another process's cache still holds only the old identity:
    identity.ACCEPTING._entries[tenant_a.pk] = stale
    assert [i.did for i in identity.accepting_for(tenant=tenant_a).identities_now()] == [old]
    assert didcomm_a.post(forward_for(rcpt, new)).status_code == 202
    assert [i.did for i in identity.accepting_for(tenant=tenant_a).identities_now()] == [new, old]
    assert didcomm_a.post(forward_for(rcpt, old)).status_code == 202  # the grace period
    assert QueuedMessage.objects.filter(recipient__isnull=False).count() == 3


def test_an_envelope_for_no_identity_of_ours_is_still_refused_after_the_reload(didcomm_a, tenant_a, wallet):
    med = didcomm_a.mediator_did
    rcpt = _granted(didcomm_a, wallet, med)
    assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    stranger = Agent()
    resp = didcomm_a.post(forward_for(rcpt, stranger.did))
    assert resp.status_code == 400
    assert json.loads(resp.content)["body"]["code"] == "e.p.trust.crypto.unknown-key"
    assert QueuedMessage.objects.filter(recipient__isnull=False).count() == 1


def test_identity_and_policy_saves_clear_the_cache(tenant_a):
    identity.accepting_for(tenant=tenant_a)  # creates the policy and identity: a save, not kept
    assert identity.ACCEPTING._entries == {}
    identity.accepting_for(tenant=tenant_a)
    assert tenant_a.pk in identity.ACCEPTING._entries
    DidcommPolicy.objects.get(tenant=tenant_a).save()
    assert identity.ACCEPTING._entries == {}
    identity.accepting_for(tenant=tenant_a)
    MediatorIdentity.objects.filter(tenant=tenant_a).first().save()
    assert identity.ACCEPTING._entries == {}
    identity.accepting_for(tenant=tenant_a)
    tenant_a.save()
    assert identity.ACCEPTING._entries == {}


def test_a_tenant_whose_url_or_grace_changed_elsewhere_is_not_served_from_the_cache(tenant_a):
    # Another process saved the tenant: this one reads the new row, its own cache was never cleared.
    identity.accepting_for(tenant=tenant_a)  # creates the policy and identity: a save, not kept
    identity.accepting_for(tenant=tenant_a)
    warm = identity.accepting_for(tenant=tenant_a)
    assert warm.fresh is False and warm.grace_hours == tenant_a.prekey_grace_hours
    old_did = warm.identities[0].did

    Tenant.objects.filter(pk=tenant_a.pk).update(public_url="https://moved.example")  # no signal here
    tenant_a.public_url = "https://moved.example"
    moved = identity.accepting_for(tenant=tenant_a)
    assert moved.fresh is True
    assert (moved.identities[0].http_uri, moved.identities[0].ws_uri) == (
        "https://moved.example/didcomm",
        "wss://moved.example/didcomm/ws",
    )
    assert [i.did for i in moved.identities] == [moved.identities[0].did, old_did] and old_did != moved.identities[
        0
    ].did

    identity.accepting_for(tenant=tenant_a)
    Tenant.objects.filter(pk=tenant_a.pk).update(prekey_grace_hours=tenant_a.prekey_grace_hours + 5)
    tenant_a.prekey_grace_hours += 5
    longer = identity.accepting_for(tenant=tenant_a)
    assert longer.fresh is True and longer.grace_hours == tenant_a.prekey_grace_hours
    assert longer.grace.total_seconds() == tenant_a.prekey_grace_hours * 3600
