"""A tenant's mediator identities: the current did:peer:2 (created on first use, rotated when the
tenant's public URL changes or an operator asks), those still accepted within the grace period,
their DIDComm v1 forms, and the per-process cache of what every message needs (`accepting_for`).

The v1 side of a tenant's mediator is its current identity's Ed25519 key: the invitation key, the
key of our did:peer:4 in DID Exchange responses, and the routing key of every grant. A rotation
therefore moves v1 too; retired identities keep decrypting for the grace period.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from apps.didcomm.core.did_key import did_key_from_key
from apps.didcomm.core.did_peer import mediator_peer_did, peer4_didcomm_v1, resolve_peer2
from apps.didcomm.core.diddoc import DidDocument
from apps.didcomm.core.errors import DidcommError
from apps.didcomm.core.keys import ED25519, X25519, PrivateKey, PublicKey
from apps.messaging.notify import notify_on_commit
from apps.tenants.models import Tenant
from apps.tenants.selectors import TenantCache
from apps.tenants.services import Actor, audit_record
from apps.wire.encoding import b58encode

from . import protocols
from .models import DidcommPolicy, Mediation, MediatorIdentity
from .packing import pack_for_did, stamp
from .policy import policy_for
from .queue import LIVE_REFRESH, enqueue_for_client

log = logging.getLogger("mediator.didcomm")


def service_uris(tenant: Tenant) -> tuple[str, str]:
    """(http uri, ws uri) of the tenant's DIDComm endpoints, from its public URL."""
    base = tenant.public_url.rstrip("/")
    ws = "wss://" + base[len("https://") :] if base.startswith("https://") else "ws://" + base.split("://", 1)[-1]
    return base + "/didcomm", ws + "/didcomm/ws"


def _new_identity(tenant: Tenant) -> MediatorIdentity:
    http_uri, ws_uri = service_uris(tenant)
    auth, agreement = PrivateKey.generate(ED25519), PrivateKey.generate(X25519)
    did = mediator_peer_did(authentication=auth.public, agreement=agreement.public, http_uri=http_uri, ws_uri=ws_uri)
    identity = MediatorIdentity(tenant=tenant, did=did, http_uri=http_uri, ws_uri=ws_uri)
    identity.seal(authentication=auth, agreement=agreement)
    identity.save()
    return identity


def identity_current(*, tenant: Tenant) -> MediatorIdentity:
    """The tenant's current mediator DID, created on first use, and rotated when its public URL
    changed (a did:peer:2 carries its service URIs)."""
    identity = MediatorIdentity.objects.filter(tenant=tenant, retired_at__isnull=True).first()
    if identity is not None and (identity.http_uri, identity.ws_uri) == service_uris(tenant):
        identity.tenant = tenant
        return identity
    return identity_rotate(tenant=tenant, actor=None)


def identities_accepting(*, tenant: Tenant, now: datetime | None = None) -> list[MediatorIdentity]:
    """The current identity first, then those retired within the tenant's grace period."""
    current = identity_current(tenant=tenant)
    cutoff = (now or timezone.now()) - timedelta(hours=tenant.prekey_grace_hours)
    retired = MediatorIdentity.objects.filter(tenant=tenant, retired_at__gt=cutoff).order_by("-retired_at")
    out = [current, *retired]
    for identity in out:
        identity.tenant = tenant
    return out


# --- the per-process cache of what every message needs: policy and accepting identities --------
#
# Every DIDComm message needs the tenant's policy and the mediator identities that may decrypt it
# (with their unsealed keys and resolved did:peer:2 documents): three to four queries and a key
# unsealing each time. Each process keeps them per tenant (apps/tenants/selectors.py `TenantCache`:
# the TTL, and cleared by any save or delete of a policy, an identity or a tenant, apps.py). A rotation never
# makes a valid message undecryptable: an envelope whose recipient kid is not among the cached
# identities reloads them once from the database before it is refused (dispatch). Unsealed keys
# live in these objects only (memory), never in a log or a message.


@dataclass(frozen=True)
class Accepting:
    """A tenant's DIDComm policy and its accepting identities (current first), keys unsealed."""

    policy: DidcommPolicy
    identities: tuple[MediatorIdentity, ...]
    documents: dict[str, DidDocument]  # each DID of each identity (`dids`) -> its resolved did:peer:2 document
    grace: timedelta
    grace_hours: int  # the tenant's prekey_grace_hours it was made for
    # The tenant's public URL it was made for, when the current identity's service URIs are that
    # URL's (service_uris); None otherwise, so that it is never used.
    public_url: str | None
    fresh: bool = False  # read from the database for this call (a reload would find nothing newer)

    def identities_now(self, now: datetime | None = None) -> list[MediatorIdentity]:
        """The current identity, then the retired ones still within their grace period now."""
        if all(i.retired_at is None for i in self.identities):  # no rotation in the grace period
            return list(self.identities)
        cutoff = (now or timezone.now()) - self.grace
        return [i for i in self.identities if i.retired_at is None or i.retired_at > cutoff]


ACCEPTING: TenantCache[Accepting] = TenantCache("didcomm-cache", max_entries=4096)


def _load_accepting(tenant: Tenant) -> Accepting:
    policy = policy_for(tenant=tenant)
    identities = identities_accepting(tenant=tenant)
    for identity in identities:
        identity.agreement_key  # noqa: B018 - unseal once, here, not per message
        identity.authentication_key  # noqa: B018
    return Accepting(
        policy=policy,
        identities=tuple(identities),
        documents={did: resolve_peer2(did) for i in identities for did in i.dids},
        grace=timedelta(hours=tenant.prekey_grace_hours),
        grace_hours=tenant.prekey_grace_hours,
        public_url=(
            tenant.public_url if (identities[0].http_uri, identities[0].ws_uri) == service_uris(tenant) else None
        ),
    )


def accepting_for(*, tenant: Tenant, reload: bool = False) -> Accepting:
    """The tenant's policy and accepting identities, from this process's cache when it was made for
    the tenant's current public URL and grace period, else (or with `reload`) from the database."""
    accepting, cached = ACCEPTING.load(
        tenant.pk,
        lambda: _load_accepting(tenant),
        valid=lambda a: a.public_url == tenant.public_url and a.grace_hours == tenant.prekey_grace_hours,
        reload=reload,
    )
    return accepting if cached else replace(accepting, fresh=True)


@transaction.atomic
def identity_rotate(*, tenant: Tenant, actor: Actor | None) -> MediatorIdentity:
    """Retire the current mediator DID and make a new one; queue the new DID to every granted client.

    The old DID keeps decrypting and answering for `prekey_grace_hours` (identities_accepting).
    """
    # The tenant row lock serialises rotations and first creations of one tenant.
    locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
    old = MediatorIdentity.objects.filter(tenant=locked, retired_at__isnull=True).first()
    if old is not None:
        if actor is None and (old.http_uri, old.ws_uri) == service_uris(locked):
            return old  # another request created or rotated it while we waited for the lock
        old.retired_at = timezone.now()
        old.save(update_fields=["retired_at"])
    new = _new_identity(locked)
    if old is not None:
        announced = _announce_rotation(tenant=locked, old=old, new=new)
        log.info("didcomm identity rotated tenant=%s announced=%d", locked.slug, announced)
    if actor is not None:
        audit_record(
            actor=actor,
            action="didcomm.rotate_identity",
            tenant=locked,
            before={"didcomm_did": old.did if old else None},
            after={"didcomm_did": new.did},
        )
    return new


def _announce_rotation(*, tenant: Tenant, old: MediatorIdentity, new: MediatorIdentity) -> int:
    """Queue, for each granted client, a CM 2.0 mediate-grant from the new DID naming it as routing DID."""
    policy = policy_for(tenant=tenant)
    count = 0
    # DIDComm v1 connections are told nothing: they keep our old did:peer:4 until the grace ends.
    for mediation in Mediation.objects.filter(tenant=tenant, state=Mediation.State.GRANTED, connection__isnull=True):
        # Before the announcement's wake: a live socket pushes it (and what follows) from the new DID.
        notify_on_commit(tenant_id=tenant.pk, did=mediation.client_did, message={"type": LIVE_REFRESH})
        grant = {
            "type": protocols.CM2 + "mediate-grant",
            "body": {"routing_did": new.did, "previous_routing_did": old.did},
        }
        message = stamp(grant, from_did=new.did, to_did=mediation.client_did)
        try:
            envelope = pack_for_did(message, identity=new, to_did=mediation.client_did)
        except DidcommError:
            continue  # a client DID that no longer resolves cannot be told
        enqueue_for_client(tenant=tenant, policy=policy, mediation=mediation, data={"json": envelope})
        count += 1
    return count


def verkey_of(identity: MediatorIdentity) -> str:
    """The identity's Ed25519 key as a raw base58 verkey (DIDComm v1: invitation, connection and routing key)."""
    return b58encode(bytes(identity.authentication_public))


def did_key_of(identity: MediatorIdentity) -> str:
    """The identity's Ed25519 key as a did:key (DIDComm v1 recipient and routing keys)."""
    return did_key_from_key(PublicKey(ED25519, bytes(identity.authentication_public)))


def v1_did(identity: MediatorIdentity) -> str:
    """Our did:peer:4 for DID Exchange responses: the identity's key, the http(s) then the ws(s) endpoint."""
    return peer4_didcomm_v1(
        PublicKey(ED25519, bytes(identity.authentication_public)), [identity.http_uri, identity.ws_uri]
    )
