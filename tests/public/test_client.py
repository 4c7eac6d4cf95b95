"""The client library (apps/wire/public.py through MediatorClient): publish, read with
verification of every event, delete; a tampered stored event fails verification."""

from __future__ import annotations

import pytest

from apps.messaging.models import PublicEvent
from apps.wire.client import Identity, MediatorError
from apps.wire.public import (
    PublicEventInvalid,
    PublicReadError,
    check_public_event,
    public_event_signature_ok,
    sign_public_event,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def mc(wsgi_mediator_a):
    return wsgi_mediator_a


@pytest.fixture
def dana(mc) -> Identity:
    who = Identity.create("dana", mc.did)
    mc.register(who)
    return who


def test_publish_read_and_delete_round_trip(mc, dana):
    first = mc.publish_public(dana, "blog", {"type": "blog.post", "data": {"title": "Hi ✨"}}, ["blog.post"])
    second = mc.publish_public(dana, "profile", "plain text", [])
    page = mc.public_events(dana.did)
    assert [e["id"] for e in page.events] == [second, first]
    assert page.verified == [True, True]
    assert (page.page, page.page_size, page.total, page.has_more) == (0, 10, 2, False)
    assert page.events[1]["event"] == '{"type":"blog.post","data":{"title":"Hi ✨"}}'
    blog = mc.public_events(dana.did, channel_id="blog")
    assert [e["id"] for e in blog.events] == [first]
    assert mc.delete_public_event(dana, first) == {"type": "SUCCESS"}
    assert [e["id"] for e in mc.public_events(dana.did).events] == [second]


def test_has_more_follows_dctrl_0004_9_2(mc, dana):
    for _ in range(3):
        mc.publish_public(dana, "c", "x")
    assert mc.public_events(dana.did, page_size=2).has_more is True
    assert mc.public_events(dana.did, page=1, page_size=2).has_more is False


def test_a_tampered_stored_event_fails_client_verification(mc, dana):
    mc.publish_public(dana, "blog", "honest words", ["t"])
    target = mc.publish_public(dana, "blog", "more honest words", ["t"])
    PublicEvent.objects.filter(public_id=target).update(event="words the mediator made up")
    with pytest.raises(PublicEventInvalid) as err:
        mc.public_events(dana.did)
    assert err.value.event_id == target
    assert err.value.reason == "signature does not verify"
    flagged = mc.public_events(dana.did, on_invalid="flag")
    assert flagged.verified == [False, True]


@pytest.mark.parametrize(
    "column,value",
    [("tags", ["injected"]), ("timestamp", 1), ("channel_id", "elsewhere"), ("signature", "A" * 86 + "==")],
)
def test_any_tampered_signed_member_fails_verification(mc, dana, column, value):
    target = mc.publish_public(dana, "blog", "x", ["t"], timestamp=1_699_000_000)
    PublicEvent.objects.filter(public_id=target).update(**{column: value})
    with pytest.raises(PublicEventInvalid):
        mc.public_events(dana.did)


def test_an_event_moved_to_another_publishers_feed_fails_verification(mc, dana):
    erin = Identity.create("erin", mc.did)
    mc.register(erin)
    mc.publish_public(erin, "blog", "erin's post")
    mc.publish_public(dana, "blog", "dana's post")
    PublicEvent.objects.filter(publisher_did=erin.did).update(publisher_did=dana.did)
    with pytest.raises(PublicEventInvalid):
        mc.public_events(dana.did)


def test_a_304_returns_none(mc, dana):
    mc.publish_public(dana, "blog", "x")
    page = mc.public_events(dana.did)
    assert page.etag
    assert mc.public_events(dana.did, if_none_match=page.etag) is None


def test_read_errors_raise_public_read_error(mc, dana):
    with pytest.raises(PublicReadError) as err:
        mc.public_events(dana.did, page_size=0)
    assert (err.value.status, err.value.code) == (400, "INVALID_COMMAND")


def test_publish_errors_raise_mediator_error(mc):
    stranger = Identity.create("stranger", mc.did)
    with pytest.raises(MediatorError) as err:
        mc.publish_public(stranger, "blog", "x")
    assert (err.value.status, err.value.code) == (401, "UNAUTHORIZED_COMMAND")


def test_signature_helpers_are_pure_and_cover_exactly_the_four_members():
    who = Identity.create("offline", "did:web:example.com")
    ev = sign_public_event(who.signing, channel_id="c", event="e", tags=["a"], timestamp=5)
    assert set(ev) == {"channel_id", "event", "tags", "timestamp", "signature"}
    assert public_event_signature_ok(ev, who.signing.public)
    assert public_event_signature_ok({**ev, "extra": "ignored"}, who.signing.public)
    assert not public_event_signature_ok({**ev, "tags": ["b"]}, who.signing.public)
    assert not public_event_signature_ok({"event": "e"}, who.signing.public)
    check_public_event({**ev, "id": "1", "publisher_did": who.did}, who.did)
    with pytest.raises(PublicEventInvalid):
        check_public_event({**ev, "id": "1", "publisher_did": who.did}, "did:decentrl:other")
