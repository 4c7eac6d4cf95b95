"""DIDComm v1 writes and reads: the tenant's v1 DID and OOB 1.1 invitation, connections (DID Exchange),
v1 mediation on the shared grant/recipient/queue store, and the outbound POST queue.

The v1 side of a tenant's mediator is its current `MediatorIdentity`'s Ed25519 key: the invitation
key, the key of our did:peer:4 in DID Exchange responses, and the routing key of every grant. A
rotation therefore moves v1 too; retired identities keep decrypting for the grace period.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.didcomm.core import envelope_v1
from apps.didcomm.core.did_key import did_key_from_key
from apps.didcomm.core.did_peer import peer4_didcomm_v1
from apps.didcomm.core.keys import ED25519, PublicKey
from apps.tenants.models import Tenant
from apps.tenants.services import Actor, audit_record
from apps.wire.encoding import b58encode, b64url_nopad

from . import protocols, services
from .models import Connection, DidcommPolicy, Mediation, MediatorIdentity, Outbound, RecipientKey

log = logging.getLogger("mediator.didcomm")


class ConnectionConflict(Exception):
    """A DID Exchange request from a key that already has a connection on another thread."""


# --- the tenant's v1 identity -------------------------------------------------------------------


def verkey_of(identity: MediatorIdentity) -> str:
    """The identity's Ed25519 key as a raw base58 verkey (invitation, connection and routing key)."""
    return b58encode(bytes(identity.authentication_public))


def did_key_of(identity: MediatorIdentity) -> str:
    return did_key_from_key(PublicKey(ED25519, bytes(identity.authentication_public)))


def v1_did(identity: MediatorIdentity) -> str:
    """Our did:peer:4 for DID Exchange responses: the identity's key, the http(s) then the ws(s) endpoint."""
    return peer4_didcomm_v1(
        PublicKey(ED25519, bytes(identity.authentication_public)), [identity.http_uri, identity.ws_uri]
    )


def invitation_id(identity: MediatorIdentity) -> str:
    """The OOB 1.1 invitation's @id: stable per identity (multi-use), distinct from the v2 one."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "didcomm-v1:" + identity.did))


def invitation_v1_for(*, tenant: Tenant) -> tuple[dict, str]:
    """The tenant's Out-of-Band 1.1 invitation (multi-use) and its `?oob=` URL form."""
    identity = services.identity_current(tenant=tenant)
    invitation = {
        "@type": protocols.OOB_V1_INVITATION,
        "@id": invitation_id(identity),
        "label": tenant.name or tenant.slug,
        "goal_code": "aries.vc.mediate",
        "goal": "Request mediation",
        "accept": ["didcomm/aip1", "didcomm/aip2;env=rfc19"],
        "handshake_protocols": [protocols.DIDX_11[:-1], protocols.DIDX_10[:-1]],
        "services": [
            {
                "id": "#inline",
                "type": "did-communication",
                "recipientKeys": [did_key_of(identity)],
                "serviceEndpoint": identity.http_uri,
            }
        ],
    }
    encoded = b64url_nopad(json.dumps(invitation, separators=(",", ":")).encode("utf-8"))
    return invitation, f"{identity.http_uri}?oob={encoded}"


def pack_reply(message: dict, *, identity: MediatorIdentity, their_verkey: str, routing_keys: list[str]) -> dict:
    """Authcrypt `message` from the identity to `their_verkey`, wrapped in a routing/1.0 forward
    (anoncrypt) for each of their routing keys, innermost first."""
    envelope = envelope_v1.pack(
        json.dumps(message, separators=(",", ":")).encode("utf-8"),
        to_verkeys=[their_verkey],
        sender=identity.authentication_key,
    )
    to = their_verkey
    for routing_key in routing_keys:
        forward = {"@type": protocols.FORWARD_V1, "@id": str(uuid.uuid4()), "to": to, "msg": envelope}
        envelope = envelope_v1.pack(json.dumps(forward).encode("utf-8"), to_verkeys=[routing_key])
        to = routing_key
    return envelope


# --- connections --------------------------------------------------------------------------------


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
    """Operator action: delete a v1 connection; its mediation, keys, queued and outbound messages go with it."""
    locked = Connection.objects.select_for_update().get(pk=connection.pk)
    mediation = Mediation.objects.filter(connection=locked).first()
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
        after={"connection_id": locked.pk, "removed": True},
    )
    locked.delete()


# --- mediation (CM 1.0) on the shared store -----------------------------------------------------


@transaction.atomic
def mediation_request_v1(*, connection: Connection) -> Mediation:
    """CM 1.0 mediate-request: grant or deny by the tenant's policy (as v2), bound to the connection."""
    mediation = services.mediation_request(tenant=connection.tenant, client_did=connection.their_did)
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


# --- outbound POSTs -----------------------------------------------------------------------------


@transaction.atomic
def outbound_reply(*, connection: Connection, envelope: dict, policy: DidcommPolicy) -> Outbound:
    """Queue a packed reply for POSTing to the connection's endpoint (the agent asked no return route)."""
    expires = timezone.now() + timedelta(hours=policy.message_ttl_hours)
    return services.outbound_create(
        connection=connection, queued=None, body=json.dumps(envelope, separators=(",", ":")), expires_at=expires
    )
