"""DIDComm v2 mediation writes and reads: identity, grants, recipients, the message queue.

Every service is keyword-only and atomic at its boundary; pushes leave after commit through
`messaging.notify` (a push is a wake-up, never the only copy: the row is stored first).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import segno
from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, F, Max, Min, Sum
from django.utils import timezone
from django.utils.html import escape

from apps.didcomm.core import jwe
from apps.didcomm.core.did_key import key_from_did_key
from apps.didcomm.core.did_peer import mediator_peer_did, resolve_peer2
from apps.didcomm.core.diddoc import DidDocument
from apps.didcomm.core.errors import DidcommError
from apps.didcomm.core.keys import ED25519, X25519, PrivateKey, PublicKey
from apps.didcomm.core.resolver import resolve_did
from apps.messaging import sql
from apps.messaging.notify import notify_on_commit
from apps.realtime.push import tenant_state_on_commit
from apps.tenants.models import Tenant
from apps.tenants.services import Actor, audit_record
from apps.wire.encoding import b58encode, b64url_nopad

from . import protocols
from .models import (
    Connection,
    DidcommPolicy,
    Mediation,
    MediatorIdentity,
    Outbound,
    QueuedMessage,
    RecipientKey,
    SeenMessage,
)
from .recipients import check_registrable, did_hash, lookup_form, proves_control

log = logging.getLogger("mediator.didcomm")

# The wake-up a socket in live mode gets when a message for one of its client's recipients is stored:
# {"type": WAKE, "ids": [id], "items": [{"id": id, "data": <the stored JSON text>}]}, `items` left
# out when the text is over WAKE_ITEMS_MAX (the socket then reads the queue).
WAKE = "DIDCOMM_WAKE"
WAKE_ITEMS_MAX = 64 * 1024
# To a client's live sockets when its grant is revoked or its mediator identity rotated: they load
# their push state again (apps/didcomm/consumers.py) before the next push.
LIVE_REFRESH = "DIDCOMM_LIVE_REFRESH"
# Rows per DELETE of the TTL purge (as apps/messaging/maintenance.py: short locks on a big table).
PURGE_BATCH = 5_000
# The Celery task that POSTs a DIDComm v1 outbound row (apps/didcomm/tasks.py), sent by name.
OUTBOUND_TASK = "apps.didcomm.tasks.deliver_outbound"
# A stored attachment's text: compact JSON of what a client sent (parsed JSON: never circular).
_compact_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


class QueueFull(Exception):
    """The recipient's queue is at its cap and the tenant's overflow policy is `reject`."""


# --- policy and identity ------------------------------------------------------------------------


def policy_for(*, tenant: Tenant) -> DidcommPolicy:
    """The tenant's DIDComm policy, created with the defaults on first use."""
    policy = DidcommPolicy.objects.filter(tenant=tenant).first()
    if policy is None:
        # Two first uses racing: the primary key decides, the loser reads the winner's row.
        policy, _ = DidcommPolicy.objects.get_or_create(tenant=tenant)
    return policy


@transaction.atomic
def policy_update(*, tenant: Tenant, actor: Actor, **changes) -> DidcommPolicy:
    """Edit the tenant's DIDComm policy (the fields of `DidcommPolicy.EDITABLE`), validated by the
    model's bounds; audited as `didcomm.update_policy` with the changed fields before and after."""
    unknown = sorted(set(changes) - set(DidcommPolicy.EDITABLE))
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in unknown})
    # The policy row lock serialises edits with grants (mediation_request locks it too).
    policy = DidcommPolicy.objects.select_for_update().get(pk=policy_for(tenant=tenant).pk)
    before = {name: getattr(policy, name) for name in changes}
    for name, value in changes.items():
        setattr(policy, name, value)
    policy.full_clean(exclude=["tenant"])
    after = {name: getattr(policy, name) for name in changes}
    if after != before:
        policy.save(update_fields=[name for name in changes if after[name] != before[name]])
        changed = [name for name in changes if after[name] != before[name]]
        audit_record(
            actor=actor,
            action="didcomm.update_policy",
            tenant=tenant,
            before={n: before[n] for n in changed},
            after={n: after[n] for n in changed},
        )
    return policy


def policy_saved(
    sender, instance: DidcommPolicy, created: bool = False, raw: bool = False, update_fields=None, **kwargs
) -> None:
    """DidcommPolicy post_save (apps.py): the tenant's sockets learn after commit whether DIDComm is
    still on (a `/didcomm/ws` socket closes when it is off; `/ws` ignores it). Only a save that can
    switch it: not the first use's row, not an edit of other fields."""
    if created or raw or (update_fields is not None and "enabled" not in update_fields):
        return
    tenant_state_on_commit(tenant_id=instance.tenant_id, state={"didcomm": instance.enabled})


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
# unsealing each time. Each process keeps them per tenant for MEDIATOR_TENANT_CACHE_SECONDS (as the
# tenant cache; 0 = off). Any save or delete of a policy, an identity or a tenant in this process
# clears it at once and again after commit; other processes see an edit within the TTL. A rotation
# never makes a valid message undecryptable: an envelope whose recipient kid is not among the cached
# identities reloads them once from the database before it is refused (dispatch). Unsealed keys live
# in these objects only (memory), never in a log or a message.


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
    expires: float  # time.monotonic() deadline; 0 = not cached
    fresh: bool  # read from the database for this call (a reload would find nothing newer)

    def identities_now(self, now: datetime | None = None) -> list[MediatorIdentity]:
        """The current identity, then the retired ones still within their grace period now."""
        if all(i.retired_at is None for i in self.identities):  # no rotation in the grace period
            return list(self.identities)
        cutoff = (now or timezone.now()) - self.grace
        return [i for i in self.identities if i.retired_at is None or i.retired_at > cutoff]


_accepting: dict[int, Accepting] = {}
_accepting_lock = threading.Lock()
_accepting_generation = [0]


def _accepting_drop() -> None:
    with _accepting_lock:
        _accepting.clear()
        _accepting_generation[0] += 1


def accepting_cache_clear(**_kwargs) -> None:
    """Forget every tenant's cached policy and identities now and after commit (save/delete signals,
    apps.py); the second clear drops what another request may have read before the commit."""
    _accepting_drop()
    transaction.on_commit(_accepting_drop)


def _load_accepting(tenant: Tenant, ttl: float) -> Accepting:
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
        expires=time.monotonic() + ttl if ttl > 0 else 0.0,
        fresh=True,
    )


def accepting_for(*, tenant: Tenant, reload: bool = False) -> Accepting:
    """The tenant's policy and accepting identities, from this process's cache when it is fresh
    (and was made for the tenant's current public URL and grace period), else from the database."""
    ttl = settings.MEDIATOR_TENANT_CACHE_SECONDS
    if ttl > 0 and not reload:
        hit = _accepting.get(tenant.pk)
        if (
            hit is not None
            and hit.expires > time.monotonic()
            and hit.public_url == tenant.public_url
            and hit.grace_hours == tenant.prekey_grace_hours
        ):
            return hit
    generation = _accepting_generation[0]
    loaded = _load_accepting(tenant, ttl)
    if ttl > 0:
        with _accepting_lock:
            if generation == _accepting_generation[0]:  # no edit while we read
                if len(_accepting) >= 4096:
                    _accepting.clear()
                _accepting[tenant.pk] = replace(loaded, fresh=False)
    return loaded


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
        message = {
            "id": str(uuid.uuid4()),
            "typ": "application/didcomm-plain+json",
            "type": protocols.CM2 + "mediate-grant",
            "from": new.did,
            "to": [mediation.client_did],
            "created_time": int(timezone.now().timestamp()),
            "body": {"routing_did": new.did, "previous_routing_did": old.did},
        }
        try:
            envelope = pack_for_did(message, identity=new, to_did=mediation.client_did)
        except DidcommError:
            continue  # a client DID that no longer resolves cannot be told
        _enqueue_for_client(tenant=tenant, policy=policy, mediation=mediation, data={"json": envelope})
        count += 1
    return count


def agreement_key_for(kid: str) -> tuple[str, PublicKey]:
    """(kid, X25519 public key) of the key-agreement key `kid` names (resolving its DID). The kid
    stays as the caller wrote it (any id form `DidDocument.find` reads): its library finds its
    secret by that name."""
    vm = resolve_did(kid).find(kid, "keyAgreement")
    if vm is None or vm.key.crv != X25519:
        raise DidcommError("recipient has no X25519 key-agreement key")
    return kid, vm.key


def pack_to(
    message: dict, *, identity: MediatorIdentity, recipient: tuple[str, PublicKey], sender_kid: str | None = None
) -> dict:
    """Authcrypt `message` from the identity's X25519 key to a resolved key (`agreement_key_for`);
    `sender_kid` names that key as the client named it (dispatch's `mediator_kid`), else `agreement_kid`."""
    plaintext = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return jwe.encrypt(plaintext, to=[recipient], sender=(sender_kid or identity.agreement_kid, identity.agreement_key))


def pack_for_kid(message: dict, *, identity: MediatorIdentity, kid: str, sender_kid: str | None = None) -> dict:
    """Authcrypt `message` from the identity's X25519 key to the key-agreement key `kid` names."""
    return pack_to(message, identity=identity, recipient=agreement_key_for(kid), sender_kid=sender_kid)


def pack_for_did(message: dict, *, identity: MediatorIdentity, to_did: str) -> dict:
    """Authcrypt `message` to the first X25519 key-agreement key of `to_did`'s document."""
    doc = resolve_did(to_did)
    for vm in doc.key_agreement:
        if vm.key.crv == X25519:
            return pack_for_kid(message, identity=identity, kid=vm.id)
    raise DidcommError("recipient has no X25519 key-agreement key")


# --- mediation and recipients -------------------------------------------------------------------


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
    return (
        Connection.objects.filter(tenant=mediation.tenant, their_verkey=verkey)
        .exclude(pk=mediation.connection_id)
        .exists()
    )


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
    """Operator action: revoke a grant; its recipients and queued messages go with it."""
    locked = Mediation.objects.select_for_update().get(pk=mediation.pk)
    before = {"state": locked.state, "recipients": RecipientKey.objects.filter(mediation=locked).count()}
    QueuedMessage.objects.filter(mediation=locked).delete()
    RecipientKey.objects.filter(mediation=locked).delete()
    locked.state = Mediation.State.REVOKED
    locked.save(update_fields=["state", "updated_at"])
    # The client's live sockets stop pushing (they keep its grant in memory).
    notify_on_commit(tenant_id=locked.tenant_id, did=locked.client_did, message={"type": LIVE_REFRESH})
    audit_record(
        actor=actor,
        action="didcomm.revoke_grant",
        tenant=locked.tenant,
        before=before,
        after={"state": locked.state, "mediation_id": locked.pk},
    )
    return locked


# --- replay protection (docs/didcomm.md "Replays") ----------------------------------------------

# The replay claim (messaging.sql.replay_claim): RETURNING nothing means the sender used this id
# within its record's life, which ends at its `expires_at` (the prune's `<=`).
SEEN_CLAIM = sql.replay_claim(SeenMessage._meta.db_table, ("tenant_id", "sender_hash", "id_hash"))


def message_id_claim(*, tenant: Tenant, sender_did: str, message_id: str, keep_until: int, now: int) -> bool:
    """Record that `sender_did` used `message_id` (compared case-insensitively, DIDComm v2 "Message
    IDs") until `keep_until` (Unix s); False when it already did (a replay). Commits with the
    caller's transaction (dispatch.claimed_run), or at once outside one."""
    id_hash = hashlib.sha256(message_id.lower().encode("utf-8")).hexdigest()
    # A record is past once `now` reaches its expiry: before `now + 1` in whole seconds.
    return sql.claim(SEEN_CLAIM, [tenant.pk, did_hash(sender_did), id_hash, keep_until, now + 1])


def seen_messages_prune(*, tenant: Tenant | None, now: datetime, dry_run: bool) -> int:
    """Delete (or count) remembered message ids past their expiry."""
    qs = SeenMessage.objects.filter(expires_at__lte=int(now.timestamp()))
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return qs.count() if dry_run else qs.delete()[0]


# --- the queue ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    message_id: str
    evicted: int


def wake_message(message_id: str, text: str) -> dict:
    """The after-commit wake of the sockets of a stored message's client."""
    wake: dict = {"type": WAKE, "ids": [message_id]}
    if len(text) <= WAKE_ITEMS_MAX:  # the stored text is ASCII (json.dumps escapes the rest): length = bytes
        wake["items"] = [{"id": message_id, "data": text}]
    return wake


def _enqueue_for_client(*, tenant: Tenant, policy: DidcommPolicy, mediation: Mediation, data: dict) -> str:
    """Queue a message of ours to the client itself (no recipient DID, no cap): a rotation announcement."""
    text = json.dumps(data, separators=(",", ":"))
    now = timezone.now()
    row = QueuedMessage.objects.create(
        tenant=tenant,
        mediation=mediation,
        recipient=None,
        data=text,
        size=len(text),
        received_at=now,
        expires_at=now + timedelta(hours=policy.message_ttl_hours),
    )
    message_id = str(row.message_id)
    notify_on_commit(tenant_id=tenant.pk, did=mediation.client_did, message=wake_message(message_id, text))
    return message_id


def forward_store(*, tenant: Tenant, policy: DidcommPolicy, next_did: str, data: dict) -> Stored | None:
    """Store a forwarded attachment for the granted recipient `next_did` names (any of its forms),
    durably, before any answer or push (UC-021 step 8): None when no granted recipient has that
    DID, QueueFull when its queue is full and the overflow policy is `reject`.

    One round trip (apps/messaging/sql.py). When the recipient's client is a DIDComm
    v1 connection with an HTTP endpoint (ACA-Py), the stored message is also queued for an outbound
    POST of `data.json` unchanged. The wake (only if the client may have a live socket) and the
    outbound task leave after commit.
    """
    try:
        form = lookup_form(next_did)
    except DidcommError:
        return None
    text = _compact_json(data)
    now = timezone.now()
    message_id = uuid.uuid4()
    done = sql.forward(
        sql.ForwardRequest(
            tenant_id=tenant.pk,
            lookup_hash=did_hash(form),
            cap=policy.queue_cap,
            reject=policy.overflow == DidcommPolicy.Overflow.REJECT,
            message_id=message_id,
            data=text,
            now=now,
            expires_at=now + timedelta(hours=policy.message_ttl_hours),
            outbound=isinstance(data.get("json"), dict),
        )
    )
    if done.outcome == sql.UNKNOWN:
        return None
    if done.outcome == sql.FULL:
        raise QueueFull()
    mid = str(message_id)
    if done.may_have_socket:  # most clients have no live socket: then no wake leaves
        notify_on_commit(tenant_id=tenant.pk, did=done.client_did, message=wake_message(mid, text))
    if done.outbound_id is not None:
        _outbound_send_on_commit(done.outbound_id)
    return Stored(mid, done.evicted)


def outbound_create(*, connection: Connection, queued: QueuedMessage | None, body: str, expires_at) -> Outbound:
    """Queue an outbound POST to a v1 connection's endpoint; its delivery task leaves after commit."""
    row = Outbound.objects.create(
        tenant_id=connection.tenant_id, connection=connection, queued=queued, body=body, expires_at=expires_at
    )
    _outbound_send_on_commit(row.pk)
    return row


def _outbound_send_on_commit(row_id: int) -> None:
    transaction.on_commit(
        lambda: current_app.send_task(OUTBOUND_TASK, args=[row_id], queue=settings.MEDIATOR_DIDCOMM_OUTBOUND_QUEUE)
    )


def _queue(mediation: Mediation, recipient: RecipientKey | None):
    qs = QueuedMessage.objects.filter(mediation=mediation)
    return qs.filter(recipient=recipient) if recipient is not None else qs


def messages_rows(
    *, mediation: Mediation, recipient: RecipientKey | None, limit: int, ids: list[str] | None = None
) -> list[tuple[str, dict, datetime]]:
    """Up to `limit` queued messages, oldest first: (message id, stored data, received at); they stay queued."""
    qs = _queue(mediation, recipient).order_by("id")
    if ids is not None:
        qs = qs.filter(message_id__in=_uuids(ids))
    rows = qs.values_list("message_id", "data", "received_at")[:limit]
    return [(str(mid), json.loads(data), at) for mid, data, at in rows]


def messages_batch(
    *, mediation: Mediation, recipient: RecipientKey | None, limit: int, ids: list[str] | None = None
) -> list[dict]:
    """Up to `limit` queued messages, oldest first, as Pickup 3.0 attachments (they stay queued)."""
    rows = messages_rows(mediation=mediation, recipient=recipient, limit=limit, ids=ids)
    return [{"id": mid, "data": data} for mid, data, _ in rows]


def messages_status(*, mediation: Mediation, recipient: RecipientKey | None) -> dict:
    """Pickup 3.0 status figures of the client's queue (or one recipient's)."""
    agg = _queue(mediation, recipient).aggregate(
        n=Count("id"), oldest=Min("received_at"), newest=Max("received_at"), size=Sum("size")
    )
    out: dict = {"message_count": agg["n"]}
    if agg["n"]:
        now = timezone.now()
        out.update(
            longest_waited_seconds=int((now - agg["oldest"]).total_seconds()),
            newest_received_time=int(agg["newest"].timestamp()),
            oldest_received_time=int(agg["oldest"].timestamp()),
            total_bytes=agg["size"] or 0,
        )
    return out


def _uuids(ids: list) -> list[uuid.UUID]:
    out = []
    for value in ids:
        try:
            out.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # not one of ours: nothing to remove
    return out


@transaction.atomic
def messages_received(*, mediation: Mediation, ids: list) -> int:
    """messages-received: the client's listed messages leave the queue; returns how many did."""
    return _delete_queued(QueuedMessage.objects.filter(mediation=mediation, message_id__in=_uuids(ids)))


def _delete_queued(qs) -> int:
    """Delete the queued messages of `qs`; how many of them: a v1 message waiting for its outbound
    POST takes its Outbound row along (on_delete CASCADE), which Django's total would count too."""
    _, per_model = qs.delete()
    return per_model.get(QueuedMessage._meta.label, 0)


def messages_purge_expired(*, tenant: Tenant | None, now: datetime, dry_run: bool) -> int:
    """TTL expiry (UC-021 AF-5): delete (or count) queued messages past `expires_at`, in batches."""
    qs = QueuedMessage.objects.filter(expires_at__lte=now)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if dry_run:
        return qs.count()
    total = 0
    while True:
        batch = list(qs.values_list("id", flat=True)[:PURGE_BATCH])
        if not batch:
            return total
        total += _delete_queued(QueuedMessage.objects.filter(id__in=batch))


def queue_sizes() -> list[tuple[str, int]]:
    """(tenant slug, queued messages) for every tenant with a queue: the per-tenant gauge."""
    rows = QueuedMessage.objects.values("tenant__slug").annotate(n=Count("id")).order_by("tenant__slug")
    return [(r["tenant__slug"], r["n"]) for r in rows]


# --- Out-of-Band 2.0 ----------------------------------------------------------------------------


def invitation_for(*, tenant: Tenant, legacy: bool = False) -> tuple[dict, str]:
    """The tenant's OOB 2.0 mediation invitation and its `?_oob=` URL form (multi-use, stable per DID).
    `legacy`: from the identity's legacy DID, for older did:peer:2 libraries (MediatorIdentity.legacy_did)."""
    identity = identity_current(tenant=tenant)
    did = identity.legacy_did if legacy else identity.did
    invitation = {
        "type": protocols.OOB_INVITATION,
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, did)),
        "from": did,
        "body": {
            "goal_code": "request-mediate",
            "goal": "Request mediation",
            "label": tenant.name or tenant.slug,
            "accept": ["didcomm/v2"],
        },
    }
    encoded = b64url_nopad(json.dumps(invitation, separators=(",", ":")).encode("utf-8"))
    return invitation, f"{identity.http_uri}?_oob={encoded}"


def invitation_qr_svg(url: str, *, alt: str = "QR code of the invitation URL") -> str:
    """`url` as a QR code, an inline `<svg>` made here (no script, no CDN: the admin's CSP), with
    `alt` as its text alternative (`role="img"`, `aria-label` and `<title>`).

    Error correction L keeps a ~1.5 kB invitation URL at version ~25 (scannable on a screen);
    black on white whatever the admin's theme, with the 4-module quiet zone readers need.
    """
    code = segno.make(url, error="l", micro=False, boost_error=False)
    svg = code.svg_inline(
        scale=3, border=4, dark="#000", light="#fff", svgclass="didcomm-qr", lineclass=None, title=alt
    )
    # A viewBox as well as the size, so that a narrow screen can scale it down (max-width: 100%).
    width, height = code.symbol_size(scale=3, border=4)
    return svg.replace("<svg ", f'<svg role="img" aria-label="{escape(alt)}" viewBox="0 0 {width} {height}" ', 1)
