"""The storage calls of the command path (apps/decentrl/storage.py) against one model of the rules.

`model_delivery` and `model_claim` are the rules in plain Python (DCTRL-0004 §5.4, §6.2 step 4,
§7.2 steps 5-6, the queue cap). The calls are driven through every combination of fresh/replayed nonce × CPU checks passed × recipient
registered × contract × queue full, and must return the model's flags and leave the model's
rows: the nonce consumed in every case, the event stored only when every flag allows it.
"""

from __future__ import annotations

import itertools
import time
import uuid

import pytest

from apps.decentrl import storage
from apps.decentrl.models import Nonce
from apps.decentrl.storage import EventsQuery, NonceClaim
from apps.messaging import sql as messaging_sql
from apps.messaging.models import Contract, PendingEvent
from apps.messaging.selectors import tenant_registrations
from apps.messaging.services import events_save, is_registered
from apps.messaging.sql import Delivery, Found
from apps.tenants.models import Tenant
from apps.wire.client import Identity
from apps.wire.envelope import EventFilter, EventToSave, Pagination

# Inside the test's transaction: the flags do not depend on commits (a failing statement's
# self-claim, which does, is tested in test_two_way_private_statement.py and test_claiming_statements.py).
pytestmark = pytest.mark.django_db


def model_delivery(*, fresh: bool, checks: bool, registered: bool, contract: bool, full: bool) -> Found:
    """What `sql.deliver` after the nonce claim must find: flags only after a fresh nonce and passed CPU checks;
    the queue only for a registered recipient holding the contract; stored when all allow it."""
    if not (fresh and checks):
        return Found(fresh)
    queue_full = registered and contract and full
    stored = registered and contract and not full
    return Found(True, registered, contract, queue_full, "stored" if stored else None)


def model_claim(*, fresh: bool, asked: bool, registered: bool) -> Found:
    """What claim_checking_registration must find."""
    return Found(fresh, registered=fresh and asked and registered)


def _contract(tenant, *, owner: str, requestor: str, recipient: str, expires_at: int) -> None:
    Contract.objects.create(
        tenant=tenant,
        owner_did=owner,
        requestor_did=requestor,
        recipient_did=recipient,
        expires_at=expires_at,
        contract_hash=uuid.uuid4().hex,
        signed_contract="{}",
    )


def _world(tenant, sender: str, recipient: str, *, registered: bool, contract: bool, full: bool) -> None:
    now = int(time.time())
    # Not registered: an expired registration and a live one owned by someone else (neither counts).
    _contract(
        tenant,
        owner=recipient,
        requestor=recipient,
        recipient=tenant.did,
        expires_at=now + 3600 if registered else now - 1,
    )
    _contract(tenant, owner=sender, requestor=recipient, recipient=tenant.did, expires_at=now + 3600)
    if contract:
        _contract(tenant, owner=recipient, requestor=sender, recipient=recipient, expires_at=now + 3600)
    else:  # the sender's copy does not count: the recipient must own it
        _contract(tenant, owner=sender, requestor=sender, recipient=recipient, expires_at=now + 3600)
    if full:  # the cap is 1 (below)
        PendingEvent.objects.create(
            tenant=tenant, recipient_did=recipient, sender_did=sender, payload="earlier", payload_bytes=7
        )


def _claim(tenant, sender: str) -> NonceClaim:
    now_ms = int(time.time() * 1000)
    return NonceClaim(
        tenant_id=tenant.pk, sender_did=sender, nonce=str(uuid.uuid4()), expires_at_ms=now_ms + 1000, now_ms=now_ms
    )


def test_deliver_after_the_claim_matches_the_model_in_every_case(tenant_a):
    Tenant.objects.filter(pk=tenant_a.pk).update(pending_queue_cap=1)
    tenant_a.refresh_from_db()
    for i, (fresh, checks, registered, contract, full) in enumerate(itertools.product([True, False], repeat=5)):
        sender, recipient = Identity.create(f"s{i}", tenant_a.did).did, Identity.create(f"r{i}", tenant_a.did).did
        _world(tenant_a, sender, recipient, registered=registered, contract=contract, full=full)
        nonce = _claim(tenant_a, sender)
        if not fresh:
            assert storage.claim(nonce) is True
        queued = PendingEvent.objects.filter(recipient_did=recipient).count()
        event = Delivery(tenant_a, sender, recipient, "blob-" + str(i), int(time.time()), checks)
        found = messaging_sql.deliver(storage.CLAIM, nonce, event)
        case = {"fresh": fresh, "checks": checks, "registered": registered, "contract": contract, "full": full}
        expected = model_delivery(**case)
        assert (found.nonce_fresh, found.registered, found.has_contract, found.queue_full) == (
            expected.nonce_fresh,
            expected.registered,
            expected.has_contract,
            expected.queue_full,
        ), case
        assert (found.event_id is not None) == (expected.event_id is not None), case
        assert Nonce.objects.filter(sender_did=sender, nonce=nonce.nonce).count() == 1, case
        stored = PendingEvent.objects.filter(recipient_did=recipient).exclude(payload="earlier")
        if expected.event_id:
            event = stored.get()
            assert (str(event.public_id), event.sender_did, event.payload, event.tenant_id) == (
                found.event_id,
                sender,
                "blob-" + str(i),
                tenant_a.pk,
            )
        else:
            assert PendingEvent.objects.filter(recipient_did=recipient).count() == queued, case


def test_claim_checking_registration_matches_the_model_in_every_case(tenant_a):
    for i, (fresh, asked, registered) in enumerate(itertools.product([True, False], repeat=3)):
        sender, did = Identity.create(f"s{i}", tenant_a.did).did, Identity.create(f"d{i}", tenant_a.did).did
        _world(tenant_a, sender, did, registered=registered, contract=False, full=False)
        nonce = _claim(tenant_a, sender)
        if not fresh:
            assert storage.claim(nonce) is True
        found = storage.claim_checking_registration(
            nonce, tenant=tenant_a, did=did if asked else None, now_s=int(time.time())
        )
        assert found == model_claim(fresh=fresh, asked=asked, registered=registered), (fresh, asked, registered)
        assert Nonce.objects.filter(sender_did=sender, nonce=nonce.nonce).count() == 1


@pytest.mark.parametrize("flt", [EventFilter(encrypted_tags=("t",)), EventFilter(participant_did="did:example:p")])
def test_a_read_is_answered_only_after_a_fresh_claim_of_a_registered_sender(tenant_a, flt):
    """QUERY_EVENTS' read (`read`, the statement path and the ORM path): its page comes back only
    when the nonce was fresh and the sender registered; the nonce is consumed in every case."""
    for i, (fresh, registered) in enumerate(itertools.product([True, False], repeat=2)):
        sender = Identity.create(f"q{i}", tenant_a.did).did
        now = int(time.time())
        _contract(
            tenant_a,
            owner=sender,
            requestor=sender,
            recipient=tenant_a.did,
            expires_at=now + (60 if registered else -1),
        )
        events_save(
            tenant=tenant_a,
            owner_did=sender,
            events=[EventToSave("did:example:p", sender, None, 5, "x", ("t",))],
        )
        nonce = _claim(tenant_a, sender)
        if not fresh:
            assert storage.claim(nonce) is True
        found = storage.claim_checking_registration(
            nonce, tenant=tenant_a, did=sender, now_s=int(time.time()), read=EventsQuery(sender, flt, Pagination(0, 10))
        )
        case = (fresh, registered)
        assert (found.nonce_fresh, found.registered) == (fresh, fresh and registered), case
        if fresh and registered:
            assert (found.page.total, [e["payload"] for e in found.page.items]) == (1, ["x"]), case
        else:
            assert found.page is None, case
        assert Nonce.objects.filter(sender_did=sender, nonce=nonce.nonce).count() == 1, case


def test_a_nonce_is_claimed_once_and_reusable_only_after_its_expiry(tenant_a):
    nonce = _claim(tenant_a, "did:example:s")
    assert storage.claim(nonce) is True
    assert storage.claim(nonce) is False
    later = nonce._replace(now_ms=nonce.expires_at_ms + 1, expires_at_ms=nonce.expires_at_ms + 9)
    assert storage.claim(later) is True
    assert Nonce.objects.get(sender_did="did:example:s").expires_at == nonce.expires_at_ms + 9


def test_the_registration_predicate_and_the_registrations_queryset_agree(tenant_a, tenant_b):
    """sql.REGISTERED (is_registered, every statement), Contract.objects.registrations and the
    admin's listing (selectors.tenant_registrations, both from live_registrations) are one definition: live, owned by the DID, the DID as requestor, this tenant's DID as recipient."""
    now = int(time.time())
    did = Identity.create("x", tenant_a.did).did
    cases = {
        "live": dict(owner=did, requestor=did, recipient=tenant_a.did, expires_at=now + 60),
        "expired": dict(owner=did, requestor=did, recipient=tenant_a.did, expires_at=now),
        "someone else's copy": dict(owner="did:example:o", requestor=did, recipient=tenant_a.did, expires_at=now + 60),
        "not the requestor": dict(owner=did, requestor="did:example:o", recipient=tenant_a.did, expires_at=now + 60),
        "with another party": dict(owner=did, requestor=did, recipient="did:example:o", expires_at=now + 60),
        "with the other tenant": dict(owner=did, requestor=did, recipient=tenant_b.did, expires_at=now + 60),
    }
    for name, fields in cases.items():
        Contract.objects.all().delete()
        _contract(tenant_a, **fields)
        listed = Contract.objects.registrations(tenant_a, did, now).exists()
        in_listing = did in {r["owner_did"] for r in tenant_registrations(tenant=tenant_a, now_s=now)}
        assert is_registered(tenant=tenant_a, did=did) is listed is in_listing is (name == "live"), name
