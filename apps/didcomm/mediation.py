"""Mediation, v1 and v2 on one store: grants (CM 1.0/2.0/3.0), the recipients a client registers,
and DIDComm v1 connections (DID Exchange), a v1 client's grant being bound to its connection."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from apps.didcomm.core.did_key import key_from_did_key
from apps.didcomm.core.errors import DidcommError
from apps.didcomm.core.keys import ED25519
from apps.messaging.notify import notify_on_commit
from apps.push.services import devices_forget, subject_for_mediation
from apps.tenants.models import Tenant
from apps.tenants.services import Actor, audit_record
from apps.wire.encoding import b58encode

from .models import Connection, DidcommPolicy, Mediation, MediatorIdentity, Outbound, QueuedMessage, RecipientKey
from .outbound import outbound_create
from .policy import policy_for
from .queue import LIVE_REFRESH, WAKE
from .recipients import check_registrable, did_hash, lookup_form, proves_control

log = logging.getLogger("mediator.didcomm")


class ConnectionConflict(Exception):
    """A DID Exchange request from a key that already has a connection on another thread."""


def mediation_for(*, tenant: Tenant, client_did: str) -> Mediation | None:
    """The granted mediation of `client_did`, if any."""
    return Mediation.objects.filter(
        tenant=tenant, client_hash=did_hash(client_did), state=Mediation.State.GRANTED
    ).first()


@transaction.atomic
def mediation_request(*, tenant: Tenant, client_did: str) -> Mediation:
    """Grant or deny mediation to `client_did` by the tenant's policy (a revoked client stays denied)."""
    # The policy row lock serialises grants, so `max_grants` is never exceeded.
    policy = DidcommPolicy.objects.select_for_update().get(pk=policy_for(tenant=tenant).pk)
    existing = Mediation.objects.filter(tenant=tenant, client_hash=did_hash(client_did)).first()
    if existing is not None and existing.state in (Mediation.State.GRANTED, Mediation.State.REVOKED):
        return existing
    granted = policy.mediation == DidcommPolicy.Mediation.OPEN and (
        policy.max_grants == 0
        or Mediation.objects.filter(tenant=tenant, state=Mediation.State.GRANTED).count() < policy.max_grants
    )
    state = Mediation.State.GRANTED if granted else Mediation.State.DENIED
    if existing is not None:
        existing.state = state
        existing.save(update_fields=["state", "updated_at"])
        return existing
    return Mediation.objects.create(tenant=tenant, client_did=client_did, client_hash=did_hash(client_did), state=state)


@dataclass(frozen=True)
class UpdateResult:
    recipient_did: object
    action: object
    result: str  # success | no_change | client_error | server_error


class RecipientRefused(Exception):
    """A recipient update refused as a whole, nothing applied: `reason` CONFLICT (the DID is another
    client's) or UNPROVEN (the request does not prove control where that is required); `index` is
    the entry's position in `updates`."""

    CONFLICT = "conflict"
    UNPROVEN = "unproven"

    def __init__(self, reason: str, index: int, contested: int | None = None):
        super().__init__(reason)
        self.reason, self.index, self.contested = reason, index, contested


def recipients_update(
    *, mediation: Mediation, updates: list[dict], proof: frozenset[tuple[str, bytes]]
) -> list[UpdateResult]:
    """Apply keylist-update / recipient-update entries in order; one result per entry.

    `proof`: the keys the request was authcrypted or signed with (`recipients.key_forms`). Who may
    register a DID (docs/didcomm.md "Who may register a recipient"): a request that proves control
    of it (`recipients.proves_control`) always, taking it over from another client that registered
    it without proof; without proof, not a DID that is another client's own identity here, and
    otherwise as the tenant's `unproven_recipients` says. A DID another client holds is a conflict.
    A refusal raises RecipientRefused and applies nothing; the holder's row counts the conflict
    (`contested`, what the admin lists)."""
    try:
        return _recipients_apply(mediation=mediation, updates=updates, proof=proof)
    except RecipientRefused as refused:
        if refused.contested is not None:
            RecipientKey.objects.filter(pk=refused.contested).update(
                contested=F("contested") + 1, last_contested_at=timezone.now()
            )
        raise


@transaction.atomic
def _recipients_apply(
    *, mediation: Mediation, updates: list[dict], proof: frozenset[tuple[str, bytes]]
) -> list[UpdateResult]:
    policy = policy_for(tenant=mediation.tenant)
    # The mediation row lock serialises updates of one client (its recipient cap); the holder's row
    # lock a take-over against the holder's own updates and forwards to it.
    Mediation.objects.select_for_update().filter(pk=mediation.pk).first()
    results = []
    for index, update in enumerate(updates):
        did, action = update.get("recipient_did"), update.get("action")
        try:
            form = check_registrable(did)
        except DidcommError:
            results.append(UpdateResult(did, action, "client_error"))
            continue
        assert isinstance(did, str)  # check_registrable accepts only a DID string
        h = did_hash(form)
        if action == "add":
            proven = proves_control(did, proof)
            owner = RecipientKey.objects.select_for_update().filter(tenant=mediation.tenant, lookup_hash=h).first()
            if owner is not None and owner.mediation_id == mediation.pk:
                if proven and not owner.proven:
                    owner.proven = True
                    owner.save(update_fields=["proven"])
                results.append(UpdateResult(did, action, "no_change"))
                continue
            if owner is not None:
                if not proven or owner.proven:
                    raise RecipientRefused(RecipientRefused.CONFLICT, index, owner.pk)
                _recipient_take_over(owner, mediation=mediation, recipient_did=did)
                results.append(UpdateResult(did, action, "success"))
                continue
            if not proven and (
                policy.unproven_recipients == DidcommPolicy.UnprovenRecipients.REFUSE
                or _client_identity(mediation=mediation, did=did, form=form)
            ):
                raise RecipientRefused(RecipientRefused.UNPROVEN, index)
            if RecipientKey.objects.filter(mediation=mediation).count() >= policy.max_recipients_per_grant:
                results.append(UpdateResult(did, action, "client_error"))
                continue
            try:
                with transaction.atomic():
                    RecipientKey.objects.create(
                        tenant=mediation.tenant, mediation=mediation, recipient_did=did, lookup_hash=h, proven=proven
                    )
            except IntegrityError:  # another client registered it at the same moment
                raise RecipientRefused(RecipientRefused.CONFLICT, index) from None
            results.append(UpdateResult(did, action, "success"))
        elif action == "remove":
            deleted, _ = RecipientKey.objects.filter(mediation=mediation, lookup_hash=h).delete()
            results.append(UpdateResult(did, action, "success" if deleted else "no_change"))
        else:
            results.append(UpdateResult(did, action, "client_error"))
    return results


def _client_identity(*, mediation: Mediation, did: str, form: str) -> bool:
    """Whether the DID is another client's own identity at the tenant (the DID of its grant, or the
    Ed25519 key of its DIDComm v1 connection): its controller authenticates to us with it, so only a
    request proving control may register it."""
    # A grant is keyed by its client's DID as sent (`skid`'s DID: an Ed25519 did:key stays Ed25519).
    hashes = {did_hash(form), did_hash(did.split("#", 1)[0])}
    others = Mediation.objects.filter(tenant=mediation.tenant, client_hash__in=hashes).exclude(pk=mediation.pk)
    if others.exists():
        return True
    if not did.startswith("did:key:"):
        return False
    key = key_from_did_key(did.split("#", 1)[0])  # resolved by check_registrable already
    if key.crv != ED25519:
        return False  # an X25519 did:key does not name the Ed25519 key a v1 connection is known by
    verkey = b58encode(key.raw)
    connections = Connection.objects.filter(tenant=mediation.tenant, their_verkey=verkey)
    if mediation.connection_id is not None:
        connections = connections.exclude(pk=mediation.connection_id)
    return connections.exists()


def _recipient_take_over(row: RecipientKey, *, mediation: Mediation, recipient_did: str) -> None:
    """A client that proves control of a DID another client registered without proof takes it over,
    with the messages queued for it (they are encrypted to the DID's keys: its holder could not read
    them): their pending outbound POSTs to the previous holder are dropped, and they go out as the
    new holder's would (a POST to a v1 connection's endpoint, a wake of its live sockets, pickup)."""
    Outbound.objects.filter(queued__recipient=row).delete()
    moved = list(QueuedMessage.objects.filter(recipient=row).values_list("pk", "message_id", "expires_at"))
    QueuedMessage.objects.filter(recipient=row).update(mediation=mediation)
    connection = Connection.objects.filter(pk=mediation.connection_id).first() if mediation.connection_id else None
    if connection is not None and connection.endpoint.startswith(("http://", "https://")):
        for pk, _, expires_at in moved:
            outbound_create(connection=connection, queued=QueuedMessage(pk=pk), body="", expires_at=expires_at)
    if moved:  # the wake carries no items: a live socket reads them from the queue
        notify_on_commit(
            tenant_id=mediation.tenant_id,
            did=mediation.client_did,
            message={"type": WAKE, "ids": [str(mid) for _, mid, _ in moved]},
        )
    row.mediation = mediation
    row.recipient_did = recipient_did
    row.proven = True
    row.contested += 1
    row.last_contested_at = timezone.now()
    row.save(update_fields=["mediation", "recipient_did", "proven", "contested", "last_contested_at"])
    log.warning("didcomm recipient taken over by a client proving control tenant=%s", mediation.tenant.slug)


def recipients_page(*, mediation: Mediation, limit: int, offset: int) -> tuple[list[str], int]:
    """(recipient DIDs as registered, in registration order; total count)."""
    qs = RecipientKey.objects.filter(mediation=mediation).order_by("id")
    total = qs.count()
    return list(qs.values_list("recipient_did", flat=True)[offset : offset + limit]), total


def recipient_of_client(*, mediation: Mediation, recipient_did: str) -> RecipientKey | None:
    """One of the client's own recipients, by any form of its DID."""
    try:
        form = lookup_form(recipient_did)
    except DidcommError:
        return None
    return RecipientKey.objects.filter(mediation=mediation, lookup_hash=did_hash(form)).first()


@transaction.atomic
def mediation_revoke(*, mediation: Mediation, actor: Actor) -> Mediation:
    """Operator action: revoke a grant; its recipients, queued messages and push devices go with it."""
    locked = Mediation.objects.select_for_update().get(pk=mediation.pk)
    before = {"state": locked.state, "recipients": RecipientKey.objects.filter(mediation=locked).count()}
    QueuedMessage.objects.filter(mediation=locked).delete()
    RecipientKey.objects.filter(mediation=locked).delete()
    locked.state = Mediation.State.REVOKED
    locked.save(update_fields=["state", "updated_at"])
    devices = devices_forget(tenant_id=locked.tenant_id, subjects=[subject_for_mediation(locked.client_hash)])
    # The client's live sockets stop pushing (they keep its grant in memory).
    notify_on_commit(tenant_id=locked.tenant_id, did=locked.client_did, message={"type": LIVE_REFRESH})
    audit_record(
        actor=actor,
        action="didcomm.revoke_grant",
        tenant=locked.tenant,
        before=before,
        after={"state": locked.state, "mediation_id": locked.pk, "push_devices_removed": devices},
    )
    return locked


# --- DIDComm v1: connections, and the grant bound to one -----------------------------------------


def connection_for_key(*, tenant: Tenant, verkey: str) -> Connection | None:
    """The tenant's connection whose agent authcrypts from `verkey`."""
    return Connection.objects.select_related("identity").filter(tenant=tenant, their_verkey=verkey).first()


@transaction.atomic
def connection_accept(
    *,
    tenant: Tenant,
    identity: MediatorIdentity,
    their_did: str,
    their_verkey: str,
    endpoint: str,
    routing_keys: list[str],
    thread_id: str,
    protocol: str,
) -> Connection:
    """Record a DID Exchange request we answer (state `response`). The same request again (an agent
    retrying) returns the same connection; another thread from the same key is a conflict."""
    existing = Connection.objects.select_for_update().filter(tenant=tenant, their_verkey=their_verkey).first()
    if existing is not None:
        if existing.thread_id != thread_id or existing.their_did != their_did:
            raise ConnectionConflict()
        return existing
    try:
        with transaction.atomic():
            return Connection.objects.create(
                tenant=tenant,
                identity=identity,
                their_did=their_did,
                their_verkey=their_verkey,
                endpoint=endpoint,
                routing_keys=routing_keys,
                thread_id=thread_id,
                protocol=protocol,
                state=Connection.State.RESPONSE_SENT,
            )
    except IntegrityError:  # the same key raced us; its retry will find the row
        raise ConnectionConflict() from None


def connection_complete(*, connection: Connection) -> Connection:
    """didexchange complete: the connection is now `completed` (idempotent)."""
    Connection.objects.filter(pk=connection.pk).update(state=Connection.State.COMPLETED, updated_at=timezone.now())
    connection.state = Connection.State.COMPLETED
    return connection


@transaction.atomic
def connection_remove(*, connection: Connection, actor: Actor) -> None:
    """Operator action: delete a v1 connection; its mediation, keys, queued and outbound messages
    and its client's push devices go with it."""
    locked = Connection.objects.select_for_update().get(pk=connection.pk)
    mediation = Mediation.objects.filter(connection=locked).first()
    devices = (
        devices_forget(tenant_id=locked.tenant_id, subjects=[subject_for_mediation(mediation.client_hash)])
        if mediation
        else 0
    )
    before = {
        "state": locked.state,
        "mediation": mediation.state if mediation else None,
        "keys": RecipientKey.objects.filter(mediation=mediation).count() if mediation else 0,
    }
    audit_record(
        actor=actor,
        action="didcomm.remove_connection",
        tenant=locked.tenant,
        before=before,
        after={"connection_id": locked.pk, "removed": True, "push_devices_removed": devices},
    )
    locked.delete()


@transaction.atomic
def mediation_request_v1(*, connection: Connection) -> Mediation:
    """CM 1.0 mediate-request: grant or deny by the tenant's policy (as v2), bound to the connection."""
    mediation = mediation_request(tenant=connection.tenant, client_did=connection.their_did)
    if mediation.connection_id is None:
        Mediation.objects.filter(pk=mediation.pk, connection__isnull=True).update(connection=connection)
        mediation.connection_id = connection.pk
    return mediation


def mediation_of(*, connection: Connection) -> Mediation | None:
    """The connection's granted mediation, if any."""
    mediation = Mediation.objects.filter(connection=connection, state=Mediation.State.GRANTED).first()
    if mediation is not None:
        mediation.connection = connection
        mediation.tenant = connection.tenant
    return mediation
