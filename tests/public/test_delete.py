"""DELETE_PUBLIC_EVENT (DCTRL-0007 §7): only the publisher deletes; anyone else's attempt is a
silent no-op (as ACKNOWLEDGE, DCTRL-0004 §8.4); a deletion leaves a content-free tombstone."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.messaging.models import PublicEvent
from apps.messaging.public import public_tombstones_prune

pytestmark = pytest.mark.django_db

SUCCESS = (200, {"type": "SUCCESS"})


def _ids(read, did, **params) -> list[str]:
    status, body = read.json(did, params=params)
    assert status == 200
    return [e["id"] for e in body["payload"]["public_events"]]


def test_the_publisher_deletes_its_event_and_it_leaves_the_feed(pub_a, read_a, alice_reg):
    keep = pub_a.publish_ok(alice_reg)
    gone = pub_a.publish_ok(alice_reg)
    assert pub_a.delete(alice_reg, gone) == SUCCESS
    assert _ids(read_a, alice_reg.did) == [keep]
    assert read_a.json(alice_reg.did)[1]["payload"]["pagination"]["total"] == 1


def test_a_deleted_event_keeps_no_content(pub_a, alice_reg):
    event_id = pub_a.publish_ok(alice_reg, event="secret-ish", tags=["t"])
    pub_a.delete(alice_reg, event_id)
    row = PublicEvent.objects.get(public_id=event_id)
    assert (row.event, row.tags, row.signature, row.event_bytes) == ("", [], "", 0)
    assert row.deleted_at is not None


def test_another_identity_cannot_delete_and_gets_a_silent_no_op(pub_a, read_a, alice_reg, bob_reg):
    event_id = pub_a.publish_ok(alice_reg)
    assert pub_a.delete(bob_reg, event_id) == SUCCESS
    assert _ids(read_a, alice_reg.did) == [event_id]
    assert PublicEvent.objects.get(public_id=event_id).deleted_at is None


def test_an_identity_on_another_tenant_cannot_delete(pub_a, pub_b, read_a, alice_reg, carol_reg):
    event_id = pub_a.publish_ok(alice_reg)
    assert pub_b.delete(carol_reg, event_id) == SUCCESS
    assert _ids(read_a, alice_reg.did) == [event_id]


def test_the_same_publisher_on_another_tenant_cannot_delete_across_tenants(
    post_b, tenant_b, pub_a, pub_b, read_a, alice_reg
):
    from tests.support.registration import register

    register(post_b, alice_reg, tenant_b)
    event_id = pub_a.publish_ok(alice_reg)
    assert pub_b.delete(alice_reg, event_id) == SUCCESS
    assert _ids(read_a, alice_reg.did) == [event_id]


@pytest.mark.parametrize(
    "bad_id",
    ["not-a-uuid", "3f1c2b0e-8d6a-4f5e-9b7c-2a1d0e9f8c7b", "", "x" * 64],
    ids=["malformed", "unknown", "empty", "long"],
)
def test_unknown_or_malformed_ids_are_a_no_op_or_invalid(pub_a, alice_reg, bad_id):
    event_id = pub_a.publish_ok(alice_reg)
    status, body = pub_a.delete(alice_reg, bad_id)
    if bad_id == "":
        assert (status, body) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})
    else:
        assert (status, body) == SUCCESS
    assert PublicEvent.objects.get(public_id=event_id).deleted_at is None


def test_an_id_over_64_characters_is_invalid_command(pub_a, alice_reg):
    assert pub_a.delete(alice_reg, "x" * 65) == (400, {"type": "ERROR", "code": "INVALID_COMMAND"})


def test_deleting_twice_is_a_no_op(pub_a, alice_reg):
    event_id = pub_a.publish_ok(alice_reg)
    assert pub_a.delete(alice_reg, event_id) == SUCCESS
    first = PublicEvent.objects.get(public_id=event_id).deleted_at
    assert pub_a.delete(alice_reg, event_id) == SUCCESS
    assert PublicEvent.objects.get(public_id=event_id).deleted_at == first


def test_old_tombstones_are_pruned_and_live_events_are_not(pub_a, alice_reg):
    live = pub_a.publish_ok(alice_reg)
    old = pub_a.publish_ok(alice_reg)
    recent = pub_a.publish_ok(alice_reg)
    pub_a.delete(alice_reg, old)
    pub_a.delete(alice_reg, recent)
    PublicEvent.objects.filter(public_id=old).update(deleted_at=timezone.now() - timedelta(minutes=10))
    assert public_tombstones_prune() == 1
    assert set(PublicEvent.objects.values_list("public_id", flat=True)) == {uuid.UUID(live), uuid.UUID(recent)}
