"""A device has no foreign key to its subject, so each place that ends a subject removes its
devices and sets the subject's device count back to zero (docs/push.md, "When a subject ends"):
a revoked DIDComm grant, a removed v1 connection, a Decentrl identity whose registrations were
purged. Nothing else's devices go."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apps.didcomm.identity import identity_current
from apps.didcomm.mediation import connection_remove, mediation_revoke
from apps.didcomm.models import Connection, Mediation
from apps.didcomm.recipients import did_hash
from apps.messaging import maintenance
from apps.messaging.models import Contract, PendingQueueDepth
from apps.push import services
from apps.push.models import Device
from apps.tenants.models import AuditEntry
from apps.tenants.services import Actor

T0 = 1_900_000_000
ACTOR = Actor(user=None, via="cli")


def _devices(tenant, subject: str) -> int:
    """The subject's device count on its queue-depth row (the storing statements' wake gate)."""
    return (
        PendingQueueDepth.objects.filter(tenant=tenant, recipient_did=subject).values_list("devices", flat=True).get()
    )


def v1_connection(tenant) -> Connection:
    """A completed DIDComm v1 connection of `tenant` (no grant yet)."""
    return Connection.objects.create(
        tenant=tenant,
        identity=identity_current(tenant=tenant),
        their_did="did:peer:v1-client",
        their_verkey="v" * 43,
        thread_id="thread-1",
        protocol="didexchange/1.1",
        state=Connection.State.COMPLETED,
    )


def _granted(tenant, client: str, **extra) -> Mediation:
    return Mediation.objects.create(
        tenant=tenant, client_did=client, client_hash=did_hash(client), state=Mediation.State.GRANTED, **extra
    )


def _with_devices(tenant, subject: str) -> str:
    services.device_set(tenant=tenant, subject=subject, service="fcm", token=f"fcm-{len(subject)}", platform=None)
    services.device_set(tenant=tenant, subject=subject, service="apns", token="ab" * 32, platform=None)
    return subject


@pytest.mark.django_db
def test_a_revoked_grant_takes_its_clients_devices_and_no_other(tenant_a, tenant_b):
    ended = _granted(tenant_a, "did:example:gone")
    kept = _granted(tenant_a, "did:example:kept")
    other_tenant = _granted(tenant_b, "did:example:gone")
    subject = _with_devices(tenant_a, services.subject_for_mediation(ended.client_hash))
    kept_subject = _with_devices(tenant_a, services.subject_for_mediation(kept.client_hash))
    _with_devices(tenant_b, services.subject_for_mediation(other_tenant.client_hash))

    mediation_revoke(mediation=ended, actor=ACTOR)

    assert Device.objects.filter(tenant=tenant_a, subject=subject).count() == 0 and _devices(tenant_a, subject) == 0
    assert _devices(tenant_a, kept_subject) == 2 and Device.objects.filter(tenant=tenant_b).count() == 2
    assert AuditEntry.objects.get(action="didcomm.revoke_grant").after["push_devices_removed"] == 2


@pytest.mark.django_db
def test_a_removed_v1_connection_takes_its_clients_devices(tenant_a):
    connection = v1_connection(tenant_a)
    mediation = _granted(tenant_a, connection.their_did, connection=connection)
    subject = _with_devices(tenant_a, services.subject_for_mediation(mediation.client_hash))

    connection_remove(connection=connection, actor=ACTOR)

    assert not Mediation.objects.exists() and not Device.objects.exists() and _devices(tenant_a, subject) == 0
    assert AuditEntry.objects.get(action="didcomm.remove_connection").after["push_devices_removed"] == 2


def _registration(tenant, did: str, expires_at: int, n: int) -> Contract:
    return Contract.objects.create(
        tenant=tenant,
        owner_did=did,
        requestor_did=did,
        recipient_did=tenant.did,
        expires_at=expires_at,
        contract_hash=f"{n:064x}",
        signed_contract="{}",
    )


@pytest.mark.django_db
def test_a_decentrl_identity_whose_registrations_are_purged_loses_its_devices(tenant_a, tenant_b):
    gone, renewed = "did:example:gone", "did:example:renewed"
    _registration(tenant_a, gone, T0 - 100, 1)
    _registration(tenant_a, renewed, T0 - 100, 2)
    _registration(tenant_a, renewed, T0 + 86_400, 3)  # still registered: its devices stay
    _registration(tenant_b, gone, T0 - 100, 4)
    for tenant, did in ((tenant_a, gone), (tenant_a, renewed), (tenant_b, gone)):
        _with_devices(tenant, services.subject_for_did(did))
    now = datetime.fromtimestamp(T0, tz=UTC)

    # A dry run counts and removes nothing.
    assert maintenance.purge_expired_contracts(tenant=tenant_a, now=now, retention_days=0, dry_run=True) == 2
    assert Device.objects.count() == 6
    assert maintenance.purge_expired_contracts(tenant=tenant_a, now=now, retention_days=0) == 2

    assert Device.objects.filter(tenant=tenant_a, subject=gone).count() == 0 and _devices(tenant_a, gone) == 0
    assert _devices(tenant_a, renewed) == 2 and _devices(tenant_b, gone) == 2
