"""QUERY_EVENTS by tag reads the denormalised EventTag.timestamp (apps/messaging/eventquery.py).

The page order, the time range and the total of a tag query come from the tag rows alone, so a
tag row whose timestamp differs from its event's would silently reorder, drop or miscount
events. These tests compare the statements with a brute-force filter over the events themselves
(their own timestamp and `encrypted_tags`, the source of truth) on random archives: ties on
timestamps, events matching several of the asked tags, duplicate tags on one event, tags
replaced by UPDATE_EVENT_TAGS, other owners and another tenant with the same tags, combined time
ranges (strict bounds, empty and inverted ranges), pages past the end. They also check that
every writer keeps the copy equal to the event's timestamp, that the data migration fills it,
that an event carries a tag once (`tag_ts` is unique) and that migration 0007 keeps one row of a
repeated tag.

The brute-force comparison drives the storage call (apps/decentrl/storage.py): eventquery's
statements for the tag and time-range filters, the ORM query for the others.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest
from django.db import IntegrityError, connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import F

from apps.decentrl import storage
from apps.decentrl.storage import EventsQuery, NonceClaim
from apps.messaging import eventquery, services
from apps.messaging.models import Contract, EventTag, StoredEvent
from apps.wire.envelope import EventFilter, EventToSave, Pagination, TagUpdate
from tests.support.commands import err

ALPHABET = ["ta", "tb", "tc", "td", "te", "tf"]
TS_MAX = 40  # few distinct timestamps: many ties, ordered by arrival


def _random_event(rng: random.Random, owner: str, peer: str) -> dict:
    mine = rng.random() < 0.3
    return {
        "sender_did": owner if mine else peer,
        "recipient_did": peer if mine else owner,
        "timestamp": rng.randint(0, TS_MAX),
        "payload": f"p{rng.getrandbits(32):08x}",
        # 0-4 tags, duplicates allowed (kept in the list, indexed once)
        "encrypted_tags": [rng.choice(ALPHABET) for _ in range(rng.choice([0, 1, 1, 2, 3, 4]))],
    }


def typed_events(events: list[dict]) -> list[EventToSave]:
    """SAVE_EVENTS items as parse_command types them."""
    return [
        EventToSave(e["sender_did"], e["recipient_did"], None, e["timestamp"], e["payload"], tuple(e["encrypted_tags"]))
        for e in events
    ]


def typed_filter(flt: dict) -> EventFilter:
    """A QUERY_EVENTS filter as parse_command types it."""
    return EventFilter(
        after_timestamp=flt.get("after_timestamp"),
        before_timestamp=flt.get("before_timestamp"),
        participant_did=flt.get("participant_did"),
        encrypted_tags=tuple(flt.get("encrypted_tags") or ()),
    )


def read_page(*, tenant, owner_did: str, flt: EventFilter, page: Pagination) -> services.Page:
    """QUERY_EVENTS' page as the command path reads it: the storage call that claims a fresh nonce
    of the (registered) owner and checks its registration, then reads."""
    now_ms = int(time.time() * 1000)
    nonce = NonceClaim(
        tenant_id=tenant.pk, sender_did=owner_did, nonce=str(uuid.uuid4()), expires_at_ms=now_ms + 1000, now_ms=now_ms
    )
    found = storage.claim_checking_registration(
        nonce, tenant=tenant, did=owner_did, now_s=now_ms // 1000, read=EventsQuery(owner_did, flt, page)
    )
    assert (found.nonce_fresh, found.registered) == (True, True)
    return found.page


def register_owner(tenant, owner: str) -> None:
    """A live registration of `owner` (docs/protocol-readings.md §4), without going through the protocol."""
    Contract.objects.create(
        tenant=tenant,
        owner_did=owner,
        requestor_did=owner,
        recipient_did=tenant.did,
        expires_at=int(time.time()) + 3600,
        contract_hash=uuid.uuid4().hex,
        signed_contract="{}",
    )


def build_archive(rng: random.Random, tenant, other_tenant, owner: str, peer: str, n: int = 300) -> None:
    """`n` events of a registered `owner`, some re-tagged; the same tags on a peer's archive and in
    another tenant."""
    register_owner(tenant, owner)
    for start in range(0, n, 100):
        events = [_random_event(rng, owner, peer) for _ in range(min(100, n - start))]
        services.events_save(tenant=tenant, owner_did=owner, events=typed_events(events))
    services.events_save(
        tenant=tenant, owner_did=peer, events=typed_events([_random_event(rng, peer, owner) for _ in range(60)])
    )
    services.events_save(
        tenant=other_tenant, owner_did=owner, events=typed_events([_random_event(rng, owner, peer) for _ in range(60)])
    )
    ids = list(StoredEvent.objects.filter(tenant=tenant, owner_did=owner).values_list("public_id", flat=True))
    updates = [
        TagUpdate(str(pid), tuple(rng.choice(ALPHABET) for _ in range(rng.randint(0, 3))))
        for pid in rng.sample(ids, 40)
    ]
    assert services.event_tags_update(tenant=tenant, owner_did=owner, updates=updates) == 40


def expected(tenant, owner: str, flt: dict) -> list[dict]:
    """Brute force over the events (never the tag rows): QUERY_EVENTS items in protocol order."""
    rows = StoredEvent.objects.filter(tenant=tenant, owner_did=owner).values_list(
        "id", "public_id", "payload", "encrypted_tags", "timestamp", "sender_did", "recipient_did"
    )
    tags, after, before = set(flt.get("encrypted_tags") or []), flt.get("after_timestamp"), flt.get("before_timestamp")
    who = flt.get("participant_did")
    hits = [
        r
        for r in rows
        if (not tags or tags & set(r[3]))
        and (after is None or r[4] > after)
        and (before is None or r[4] < before)
        and (who is None or who in (r[5], r[6]))
    ]
    hits.sort(key=lambda r: (r[4], r[0]))
    return [{"id": str(r[1]), "payload": r[2], "encrypted_tags": r[3], "timestamp": r[4]} for r in hits]


def random_filter(rng: random.Random, peer: str) -> dict:
    flt: dict = {"encrypted_tags": rng.sample([*ALPHABET, "t-none"], rng.randint(1, 3))}
    if rng.random() < 0.5:
        flt["after_timestamp"] = rng.randint(-1, TS_MAX + 1)
    if rng.random() < 0.5:
        flt["before_timestamp"] = rng.randint(-1, TS_MAX + 1)
    if rng.random() < 0.1:  # tags with participant_did take the ORM path: same answers
        flt["participant_did"] = peer
    return flt


def mismatches(rng: random.Random, tenant, owner: str, peer: str, queries: int) -> list[str]:
    """Random queries whose page or total differ from the brute force (empty when all agree)."""
    out = []
    for _ in range(queries):
        flt = random_filter(rng, peer)
        want = expected(tenant, owner, flt)
        size = rng.randint(1, 12)
        page = Pagination(page=rng.randint(0, len(want) // size + 2), page_size=size)  # some past the end
        got = read_page(tenant=tenant, owner_did=owner, flt=typed_filter(flt), page=page)
        want_page = want[page.offset : page.offset + size]
        if got.items != want_page or got.total != len(want):
            out.append(f"{flt} page {page}: got {len(got.items)} items total {got.total}, want {want_page} {len(want)}")
        if "participant_did" in flt:
            continue
        args = {
            "tenant": tenant,
            "owner_did": owner,
            "after": flt.get("after_timestamp"),
            "before": flt.get("before_timestamp"),
            "tags": flt["encrypted_tags"],
        }
        # the statements themselves, the COUNT even where the page statement spares it
        rows, total = eventquery.stored_events(**args, offset=page.offset, limit=size)
        if [str(r[0]) for r in rows] != [w["id"] for w in want_page] or total != len(want):
            out.append(f"{flt} page {page}: stored_events differs")
        if eventquery.stored_events_count(**args) != len(want):
            out.append(f"{flt}: stored_events_count {eventquery.stored_events_count(**args)} != {len(want)}")
    return out


def drifted_tag_rows() -> int:
    return EventTag.objects.exclude(timestamp=F("event__timestamp")).count()


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.django_db
def test_tag_queries_equal_a_brute_force_filter_over_the_events(tenant_a, tenant_b, alice, bob, seed):
    rng = random.Random(seed)
    build_archive(rng, tenant_a, tenant_b, alice.did, bob.did)
    assert drifted_tag_rows() == 0
    assert EventTag.objects.count() == sum(
        len(set(tags)) for tags in StoredEvent.objects.values_list("encrypted_tags", flat=True)
    )
    # the archive exercises what the statements must get right
    events = list(StoredEvent.objects.filter(tenant=tenant_a, owner_did=alice.did).values_list("encrypted_tags"))
    assert sum(len(set(t)) >= 2 for (t,) in events) > 20  # events matching several asked tags
    assert sum(len(t) > len(set(t)) for (t,) in events) > 0  # duplicate tags on one event
    assert not mismatches(rng, tenant_a, alice.did, bob.did, queries=250)


@pytest.mark.django_db
def test_a_drifted_tag_timestamp_is_detected(tenant_a, tenant_b, alice, bob):
    """The comparison above is sensitive to drift: move one tag row's timestamp and it fails."""
    rng = random.Random(7)
    build_archive(rng, tenant_a, tenant_b, alice.did, bob.did)
    tagged = EventTag.objects.filter(tenant=tenant_a, owner_did=alice.did).order_by("id")
    victim = tagged[tagged.count() // 2]
    EventTag.objects.filter(pk=victim.pk).update(timestamp=F("timestamp") + TS_MAX + 10)
    assert drifted_tag_rows() == 1
    # every query naming the victim's tag with an upper bound at the end of the range misses it
    flt = {"encrypted_tags": [victim.tag], "before_timestamp": TS_MAX + 1}
    got = read_page(
        tenant=tenant_a,
        owner_did=alice.did,
        flt=typed_filter(flt),
        page=Pagination(page=0, page_size=100),
    )
    assert got.items != expected(tenant_a, alice.did, flt)
    assert mismatches(random.Random(8), tenant_a, alice.did, bob.did, queries=250)


@pytest.mark.django_db(transaction=True)
def test_an_event_carries_a_tag_once_which_the_single_tag_statement_relies_on(tenant_a, tenant_b, alice, bob):
    """`tag_ts` is unique: a second row for the same (event, tag) is refused, so the statement for
    one tag may count and page its index entries without DISTINCT."""
    (event,) = services.events_save(
        tenant=tenant_a,
        owner_did=alice.did,
        events=typed_events([{"sender_did": bob.did, "recipient_did": alice.did, "timestamp": 5, "payload": "x",
                              "encrypted_tags": ["ta", "ta", "tb"]}]),
    )  # fmt: skip
    assert sorted(EventTag.objects.filter(event=event).values_list("tag", flat=True)) == ["ta", "tb"]
    with pytest.raises(IntegrityError):
        EventTag.objects.create(tenant=tenant_a, owner_did=alice.did, event=event, tag="ta", timestamp=5)
    register_owner(tenant_a, alice.did)
    got = read_page(
        tenant=tenant_a,
        owner_did=alice.did,
        flt=typed_filter({"encrypted_tags": ["ta"]}),
        page=Pagination(0, 10),
    )
    assert (len(got.items), got.total, got.items[0]["encrypted_tags"]) == (1, 1, ["ta", "ta", "tb"])


@pytest.mark.django_db
def test_every_writer_copies_the_event_timestamp_into_its_tags(post_a, tenant_a, registered, alice, bob):
    def da(payload):
        return post_a.command(alice, payload, recipient_did=tenant_a.did)

    events = [
        {"sender_did": bob.did, "recipient_did": alice.did, "timestamp": ts, "payload": p, "encrypted_tags": t}
        for p, ts, t in (("A", 30, ["x", "y", "x"]), ("B", 10, ["y"]), ("C", 20, []), ("D", 10, ["z", "x"]))
    ]
    assert da({"type": "SAVE_EVENTS", "events": events})[0] == 200
    assert drifted_tag_rows() == 0
    ids = {e.payload: str(e.public_id) for e in StoredEvent.objects.all()}
    update = [
        {"event_id": ids["C"], "encrypted_tags": ["x"]},
        {"event_id": ids["A"], "encrypted_tags": ["w", "w"]},
        {"event_id": ids["B"], "encrypted_tags": []},
    ]
    assert da({"type": "UPDATE_EVENT_TAGS", "events": update})[0] == 200
    assert drifted_tag_rows() == 0
    assert sorted(EventTag.objects.values_list("tag", "timestamp")) == [("w", 30), ("x", 10), ("x", 20), ("z", 10)]
    # the protocol answer, through POST /: any tag, strict bounds, (timestamp, arrival) order
    status, body = da(
        {
            "type": "QUERY_EVENTS",
            "filter": {"encrypted_tags": ["x", "z", "w"], "after_timestamp": 10, "before_timestamp": 31},
            "pagination": {"page_size": 1},
        }
    )
    assert status == 200, body
    assert [e["payload"] for e in body["payload"]["events"]] == ["C"]  # D (10) is not after 10; then A (30)
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 1, "total": 2}
    status, body = da(
        {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["x", "z"]}, "pagination": {"page": 5, "page_size": 1}}
    )
    assert body["payload"] == {"events": [], "pagination": {"page": 5, "page_size": 1, "total": 2}}
    bad = {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": "x"}}
    assert da(bad) == (400, err("INVALID_COMMAND"))


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_timestamp_of_existing_tag_rows(tenant_a, alice):
    before = [("messaging", "0003_contract_registrations_index")]
    after = [("messaging", "0004_eventtag_timestamp")]
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        OldEvent, OldTag = old.get_model("messaging", "StoredEvent"), old.get_model("messaging", "EventTag")
        for ts, tags in ((7, ["a", "b"]), (3, ["b"]), (5, [])):
            ev = OldEvent.objects.create(
                tenant_id=tenant_a.pk,
                owner_did=alice.did,
                sender_did=alice.did,
                recipient_did=alice.did,
                timestamp=ts,
                payload=f"e{ts}",
                encrypted_tags=tags,
            )
            for t in tags:
                OldTag.objects.create(tenant_id=tenant_a.pk, owner_did=alice.did, event_id=ev.pk, tag=t)
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        assert sorted(EventTag.objects.values_list("tag", "timestamp")) == [("a", 7), ("b", 3), ("b", 7)]
        assert drifted_tag_rows() == 0
        rows, total = eventquery.stored_events(
            tenant=tenant_a, owner_did=alice.did, after=None, before=None, tags=["a", "b"], offset=0, limit=10
        )
        assert ([r[1] for r in rows], total) == (["e3", "e7"], 2)
    finally:
        MigrationExecutor(connection).migrate(leaves)


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_a_unique_tag_ts_keeps_one_row_of_a_repeated_tag(tenant_a, alice):
    before = [("messaging", "0006_queue_depth_no_negative_rows")]
    after = [("messaging", "0007_eventtag_tag_ts_unique")]
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        OldEvent, OldTag = old.get_model("messaging", "StoredEvent"), old.get_model("messaging", "EventTag")
        ev = OldEvent.objects.create(
            tenant_id=tenant_a.pk,
            owner_did=alice.did,
            sender_did=alice.did,
            recipient_did=alice.did,
            timestamp=4,
            payload="e4",
            encrypted_tags=["a", "b"],
        )
        for t in ("a", "a", "b", "a"):  # a row no writer makes: the same tag twice on one event
            OldTag.objects.create(tenant_id=tenant_a.pk, owner_did=alice.did, event_id=ev.pk, tag=t, timestamp=4)
        first_a = OldTag.objects.filter(tag="a").order_by("id").first().pk
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        assert sorted(EventTag.objects.values_list("tag", flat=True)) == ["a", "b"]
        assert EventTag.objects.get(tag="a").pk == first_a
        rows, total = eventquery.stored_events(
            tenant=tenant_a, owner_did=alice.did, after=None, before=None, tags=["a"], offset=0, limit=10
        )
        assert ([r[1] for r in rows], total) == (["e4"], 1)
    finally:
        MigrationExecutor(connection).migrate(leaves)
