"""All messaging writes and reads used by the protocol handlers.

Services are keyword-only, atomic at their boundary, and announce pushes through notify (after
commit). Errors are raised as ProtocolError with the code the client sees.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import transaction

from apps.tenants.models import Tenant
from apps.tenants.resolver import resolve_did, verify_contract_with_key_history
from apps.wire import contract as wc
from apps.wire.canonical import RawJSON, canonical_str
from apps.wire.crypto import X25519KeyPair, sign_json_object
from apps.wire.encoding import b64encode
from apps.wire.envelope import ContractFilter, EventFilter, EventToSave, Pagination, TagUpdate
from apps.wire.errors import ErrorCode, ProtocolError

from . import notify, wake
from .models import Contract, ContractRequest, EventTag, PendingEvent, StoredEvent
from .sql import REGISTERED, prepared_cursor, queue_depth, registered_params

DAY_S = 86_400


def _now_s() -> int:
    return int(time.time())


def _uuids(values: list[str]) -> list[uuid.UUID]:
    """Parse client-supplied ids; anything that is not one of ours is ignored (DCTRL-0004 §8.4)."""
    out = []
    for v in values:
        try:
            out.append(uuid.UUID(v))
        except (ValueError, AttributeError, TypeError):
            continue
    return out


def _bad(detail: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_COMMAND, detail)


def _verify_contract(signed: dict) -> wc.ContractInfo:
    try:
        # A hosted tenant's retired signing key still verifies the contracts it signed.
        return verify_contract_with_key_history(signed, now_s=_now_s())
    except wc.ContractInvalid as exc:
        raise _bad(str(exc)) from exc
    except wc.ContractSignaturesInvalid as exc:
        raise ProtocolError(ErrorCode.INVALID_SIGNATURES) from exc


def is_registered(*, tenant: Tenant, did: str) -> bool:
    """Registered ⇔ owns a live contract with this tenant's DID (docs/protocol-readings.md §4)."""
    # The one predicate (sql.REGISTERED), prepared on PostgreSQL: building and compiling the ORM
    # query is a large share of a QUERY_EVENTS worker's CPU.
    with prepared_cursor() as cur:
        cur.execute(
            f"SELECT {REGISTERED}",
            registered_params(tenant_id=tenant.pk, tenant_did=tenant.did, did=did, now_s=_now_s()),
        )
        return bool(cur.fetchone()[0])


# --- contracts -------------------------------------------------------------------------------


def contract_store(*, tenant: Tenant, owner_did: str, signed: dict, info: wc.ContractInfo) -> Contract:
    """Store a verified contract for `owner_did`; storing the same contract again is a no-op (a
    concurrent identical save loses on the unique constraint and gets the winner's row)."""
    contract, _ = Contract.objects.get_or_create(
        tenant=tenant,
        owner_did=owner_did,
        contract_hash=info.contract_hash,
        defaults={
            "requestor_did": info.requestor_did,
            "recipient_did": info.recipient_did,
            "expires_at": info.expires_at,
            "signed_contract": canonical_str(signed),
        },
    )
    return contract


@transaction.atomic
def registration_create(*, tenant: Tenant, sender_did: str, encrypted: str, ephemeral_public: str) -> dict:
    """Register `sender_did`: decrypt, check, countersign and store its contract (docs/protocol-readings.md §4)."""
    if not tenant.registration_open:
        raise ProtocolError(ErrorCode.UNAUTHORIZED_COMMAND, "registration closed")
    now = _now_s()
    request = None
    last_error: Exception | None = None
    for prekey in tenant_prekeys(tenant):
        try:
            request = wc.decrypt_request(encrypted, ephemeral_public, prekey.private)
            break
        except wc.ContractInvalid as exc:
            last_error = exc
    if request is None:
        raise _bad(str(last_error or "undecryptable"))
    terms = request["communication_contract"]
    try:
        info = wc.check_terms(terms, with_recipient_key=False, now_s=now)
    except wc.ContractInvalid as exc:
        raise _bad(str(exc)) from exc
    if "recipient_ephemeral_public_key" in terms:
        raise _bad("request must not carry a recipient key")
    if info.requestor_did != sender_did or info.recipient_did != tenant.did:
        raise _bad("request parties do not match the command")
    if terms["requestor_ephemeral_public_key"] != ephemeral_public:
        raise _bad("ephemeral key mismatch")
    if info.expires_at > now + tenant.max_registration_days * DAY_S:
        raise _bad("registration lifetime exceeds the tenant maximum")
    try:
        requestor = resolve_did(sender_did)
    except ValueError as exc:
        raise ProtocolError(ErrorCode.SENDER_NOT_FOUND) from exc
    if not wc.verify_request_signature(request, requestor):
        raise ProtocolError(ErrorCode.INVALID_SIGNATURES)
    if tenant.max_identities and not is_registered(tenant=tenant, did=sender_did):
        live = Contract.objects.filter(tenant=tenant, recipient_did=tenant.did, expires_at__gt=now)
        if live.values("owner_did").distinct().count() >= tenant.max_identities:
            raise ProtocolError(ErrorCode.UNAUTHORIZED_COMMAND, "identity quota reached")
    full_terms = dict(terms)
    # DCTRL-0004 §8.1: a fresh mediator ephemeral pair; the private half is discarded.
    full_terms["recipient_ephemeral_public_key"] = b64encode(X25519KeyPair.generate().public)
    signed = {
        "communication_contract": full_terms,
        "requestor_signature": request["requestor_signature"],
        "recipient_signature": sign_json_object(full_terms, tenant.signing_keypair),
    }
    info = wc.check_terms(full_terms, with_recipient_key=True, now_s=now)
    contract_store(tenant=tenant, owner_did=sender_did, signed=signed, info=info)
    return signed


def tenant_prekeys(tenant: Tenant) -> list[X25519KeyPair]:
    """The current pre-key, then retired ones still in their rotation grace period (Tenant.previous_prekeys)."""
    keys = [tenant.prekey_pair]
    previous = getattr(tenant, "previous_prekeys", None)
    if callable(previous):
        keys.extend(previous())
    return keys


@transaction.atomic
def contract_request_forward(
    *, tenant: Tenant, sender_did: str, recipient_did: str, encrypted: str, ephemeral_public: str
) -> ContractRequest:
    """Queue an encrypted contract request for a registered recipient and wake it up."""
    req = ContractRequest.objects.create(
        tenant=tenant,
        recipient_did=recipient_did,
        sender_did=sender_did,
        encrypted_contract_request=encrypted,
        requestor_ephemeral_public_key=ephemeral_public,
    )
    notify.notify_contracts_updated(tenant_id=tenant.pk, did=recipient_did)
    return req


@transaction.atomic
def contract_response_store(*, tenant: Tenant, sender_did: str, recipient_did: str, signed: dict) -> Contract:
    """COMMUNICATION_CONTRACT_RESPONSE: store the accepted contract for the other party (§8.2)."""
    info = _peek_parties(signed)
    if not info.has_party(sender_did):
        raise _bad("sender is not a contract party")
    other = info.other_party(sender_did)
    if recipient_did != other:
        raise _bad("recipient_did must be the other contract party")
    if not is_registered(tenant=tenant, did=other):
        raise ProtocolError(ErrorCode.RECIPIENT_NOT_REGISTERED)
    info = _verify_contract(signed)
    contract = contract_store(tenant=tenant, owner_did=other, signed=signed, info=info)
    notify.notify_contracts_updated(tenant_id=tenant.pk, did=other)
    return contract


def _peek_parties(signed: dict) -> wc.ContractInfo:
    terms = signed.get("communication_contract")
    if (
        not isinstance(terms, dict)
        or not isinstance(terms.get("requestor_did"), str)
        or not isinstance(terms.get("recipient_did"), str)
    ):
        raise _bad("malformed contract")
    return wc.ContractInfo(terms["requestor_did"], terms["recipient_did"], 0, "")


@transaction.atomic
def contract_save(*, tenant: Tenant, owner_did: str, signed: dict) -> Contract:
    """SAVE_COMMUNICATION_CONTRACT: verify both signatures and store for the sender (§8.5)."""
    info = _verify_contract(signed)
    contract = contract_store(tenant=tenant, owner_did=owner_did, signed=signed, info=info)
    notify.notify_contracts_updated(tenant_id=tenant.pk, did=owner_did)
    return contract


@dataclass(frozen=True)
class Page:
    items: list
    total: int


def _page_total(qs, page: Pagination, n_rows: int, count: Callable[[], int] | None = None) -> int:
    """`total` for a page of `n_rows` items: a partial page (or an empty first page) implies it,
    which spares the COUNT on the common small-queue path; otherwise `count()`, or count `qs`."""
    if n_rows < page.page_size and (n_rows > 0 or page.page == 0):
        return page.offset + n_rows
    return count() if count is not None else qs.count()


def contract_requests_query(*, tenant: Tenant, did: str, page: Pagination) -> Page:
    qs = ContractRequest.objects.awaiting(tenant, did)
    rows = list(qs.order_by("id")[page.offset : page.offset + page.page_size])
    items = [
        {
            "id": str(r.public_id),
            "sender_did": r.sender_did,
            "encrypted_contract_request": r.encrypted_contract_request,
            "requestor_ephemeral_public_key": r.requestor_ephemeral_public_key,
        }
        for r in rows
    ]
    return Page(items, _page_total(qs, page, len(rows)))


def contract_requests_acknowledge(*, tenant: Tenant, did: str, ids: list[str]) -> int:
    """Mark the sender's own requests acknowledged; others' ids are ignored (§8.4)."""
    return ContractRequest.objects.acknowledge(tenant, did, _uuids(ids))


def contracts_query(*, tenant: Tenant, did: str, flt: ContractFilter, page: Pagination) -> Page:
    """QUERY_COMMUNICATION_CONTRACTS: the owner's contracts, verbatim, by arrival (§8.6)."""
    qs = Contract.objects.owned_by(tenant, did)
    if flt.did is not None:
        qs = qs.filter(requestor_did=flt.did) | qs.filter(recipient_did=flt.did)
    if flt.expires_at_before is not None:
        qs = qs.filter(expires_at__lt=flt.expires_at_before)
    if flt.expires_at_after is not None:
        qs = qs.filter(expires_at__gt=flt.expires_at_after)
    rows = list(qs.order_by("id")[page.offset : page.offset + page.page_size])
    items = [{"id": str(c.public_id), "signed_communication_contract": RawJSON(c.signed_contract)} for c in rows]
    return Page(items, _page_total(qs, page, len(rows)))


# --- pending events --------------------------------------------------------------------------


def pending_events_query(*, tenant: Tenant, did: str, sender_did: str | None, page: Pagination) -> Page:
    """QUERY_PENDING_EVENTS' page; the recipient is awake, so its next event may wake it (wake.py)."""
    wake.picked_up(tenant_id=tenant.pk, subject=did)
    qs = PendingEvent.objects.awaiting(tenant, did)
    if sender_did is not None:
        qs = qs.filter(sender_did=sender_did)
    rows = list(
        qs.order_by("id").values_list("public_id", "payload", "sender_did")[page.offset : page.offset + page.page_size]
    )
    items = [{"id": str(pid), "payload": payload, "sender_did": sender} for pid, payload, sender in rows]
    # The whole queue's total is its counter row, not a walk of the queue.
    depth = (lambda: queue_depth(tenant_id=tenant.pk, did=did)) if sender_did is None else None
    return Page(items, _page_total(qs, page, len(rows), depth))


def pending_events_unacked(*, tenant: Tenant, did: str, limit: int = 100, after_id: int = 0) -> list[dict]:
    """Backlog for a socket that just authenticated (docs/protocol-readings.md §6)."""
    rows = (
        PendingEvent.objects.awaiting(tenant, did)
        .filter(id__gt=after_id)
        .order_by("id")
        .values_list("id", "public_id", "payload", "sender_did")[:limit]
    )
    return [{"seq": pk, "id": str(pid), "payload": p, "sender_did": s} for pk, pid, p, s in rows]


def pending_events_acknowledge(*, tenant: Tenant, did: str, ids: list[str]) -> int:
    """ACK the recipient's own events: the payload is dropped, the row keeps metadata (§8.8); a
    pickup (wake.py)."""
    wake.picked_up(tenant_id=tenant.pk, subject=did)
    count = PendingEvent.objects.acknowledge(tenant, did, _uuids(ids), payload="")
    notify.announce_acknowledged(tenant_id=tenant.pk, count=count)
    return count


# --- stored events ---------------------------------------------------------------------------


def _check_tags(tenant: Tenant, tags: Sequence[str]) -> None:
    if len(tags) > tenant.max_tags_per_event:
        raise _bad("too many tags on one event")
    if any(len(t) > tenant.max_tag_length for t in tags):
        raise _bad("encrypted tag too long")


@transaction.atomic
def events_save(*, tenant: Tenant, owner_did: str, events: Sequence[EventToSave]) -> list[StoredEvent]:
    """SAVE_EVENTS, all or nothing, within the tenant's caps (§8.9)."""
    if len(events) > tenant.max_events_per_save:
        raise _bad("too many events in one command")
    for ev in events:
        _check_tags(tenant, ev.encrypted_tags)
    rows = [
        StoredEvent(
            tenant=tenant,
            owner_did=owner_did,
            sender_did=ev.sender_did,
            recipient_did=ev.recipient_did,
            contract_id=ev.contract_id,
            timestamp=ev.timestamp,
            payload=ev.payload,
            payload_bytes=len(ev.payload.encode("utf-8")),
            encrypted_tags=list(ev.encrypted_tags),
            processed=ev.sender_did == owner_did,
        )
        for ev in events
    ]
    created = StoredEvent.objects.bulk_create(rows)
    EventTag.objects.bulk_create(
        [
            EventTag(tenant=tenant, owner_did=owner_did, event_id=r.pk, tag=t, timestamp=r.timestamp)
            for r in created
            for t in dict.fromkeys(r.encrypted_tags)
        ]
    )
    return created


def events_query(*, tenant: Tenant, owner_did: str, flt: EventFilter, page: Pagination) -> Page:
    """QUERY_EVENTS: the owner's archive in (timestamp, arrival) order (§8.10, docs/protocol-readings.md §5).

    The ORM query, for every filter; on PostgreSQL the command path asks eventquery's prepared
    statements for the tags and time-range filters instead (apps/decentrl/storage.py)."""
    qs = StoredEvent.objects.owned_by(tenant, owner_did)
    if flt.after_timestamp is not None:
        qs = qs.filter(timestamp__gt=flt.after_timestamp)
    if flt.before_timestamp is not None:
        qs = qs.filter(timestamp__lt=flt.before_timestamp)
    if flt.participant_did is not None:
        p = flt.participant_did
        qs = qs.filter(sender_did=p) | qs.filter(recipient_did=p)
    if flt.encrypted_tags:
        tagged = EventTag.objects.filter(tenant=tenant, owner_did=owner_did, tag__in=list(flt.encrypted_tags))
        qs = qs.filter(id__in=tagged.values("event_id"))
    if flt.unprocessed_only:
        qs = qs.filter(processed=False)
    rows = list(
        qs.order_by("timestamp", "id").values_list("public_id", "payload", "encrypted_tags", "timestamp")[
            page.offset : page.offset + page.page_size
        ]
    )
    items = [{"id": str(pid), "payload": p, "encrypted_tags": tags, "timestamp": ts} for pid, p, tags, ts in rows]
    return Page(items, _page_total(qs, page, len(rows)))


@transaction.atomic
def event_tags_update(*, tenant: Tenant, owner_did: str, updates: Sequence[TagUpdate]) -> int:
    """Replace tags and mark processed; events not owned by the sender are skipped (§8.11)."""
    for u in updates:
        _check_tags(tenant, u.encrypted_tags)
    changed = 0
    for u in updates:
        ids = _uuids([u.event_id])
        if not ids:
            continue
        event = (
            StoredEvent.objects.select_for_update().filter(tenant=tenant, owner_did=owner_did, public_id=ids[0]).first()
        )
        if event is None:
            continue
        event.encrypted_tags = list(u.encrypted_tags)
        event.processed = True
        event.save(update_fields=["encrypted_tags", "processed"])
        EventTag.objects.filter(event=event).delete()
        EventTag.objects.bulk_create(
            [
                EventTag(tenant=tenant, owner_did=owner_did, event=event, tag=t, timestamp=event.timestamp)
                for t in dict.fromkeys(event.encrypted_tags)
            ]
        )
        changed += 1
    return changed
