"""`GET /public/<did>` (DCTRL-0007 §6, docs/protocol-readings.md §8): exact shape, newest first, channel
filter, pagination rules, unknown/unregistered DIDs, percent-encoding, ETag/304, CORS, isolation."""

from __future__ import annotations

import json

import pytest

from apps.messaging.models import Contract
from apps.tenants.models import Tenant
from apps.wire.public import check_public_event, public_path, sign_public_event

pytestmark = pytest.mark.django_db

INVALID_COMMAND = {"type": "ERROR", "code": "INVALID_COMMAND"}


def _empty(page=0, page_size=10) -> dict:
    return {
        "type": "SUCCESS",
        "payload": {"public_events": [], "pagination": {"page": page, "page_size": page_size, "total": 0}},
    }


def _ids(body: dict) -> list[str]:
    return [e["id"] for e in body["payload"]["public_events"]]


def test_the_listing_has_the_exact_shape_and_every_event_verifies(pub_a, read_a, alice_reg):
    ev = sign_public_event(
        alice_reg.signing, channel_id="blog", event='{"t":"p"}', tags=["blog.post"], timestamp=1_699_123_456
    )
    status, reply = pub_a.publish_event(alice_reg, ev)
    event_id = reply["payload"]["public_event_id"]
    status, body = read_a.json(alice_reg.did)
    assert status == 200
    assert body == {
        "type": "SUCCESS",
        "payload": {
            "public_events": [
                {
                    "id": event_id,
                    "publisher_did": alice_reg.did,
                    "channel_id": "blog",
                    "event": '{"t":"p"}',
                    "tags": ["blog.post"],
                    "timestamp": 1_699_123_456,
                    "signature": ev["signature"],
                }
            ],
            "pagination": {"page": 0, "page_size": 10, "total": 1},
        },
    }
    check_public_event(body["payload"]["public_events"][0], alice_reg.did)


def test_events_are_listed_newest_first_by_arrival_not_by_signed_timestamp(pub_a, read_a, alice_reg):
    first = pub_a.publish_ok(alice_reg, timestamp=3_000)
    second = pub_a.publish_ok(alice_reg, timestamp=1_000)
    third = pub_a.publish_ok(alice_reg, timestamp=2_000)
    assert _ids(read_a.json(alice_reg.did)[1]) == [third, second, first]


def test_the_channel_filter_lists_one_channel(pub_a, read_a, alice_reg):
    blog1 = pub_a.publish_ok(alice_reg, channel_id="blog")
    pub_a.publish_ok(alice_reg, channel_id="profile")
    blog2 = pub_a.publish_ok(alice_reg, channel_id="blog")
    status, body = read_a.json(alice_reg.did, params={"channel_id": "blog"})
    assert status == 200
    assert _ids(body) == [blog2, blog1]
    assert body["payload"]["pagination"] == {"page": 0, "page_size": 10, "total": 2}
    assert read_a.json(alice_reg.did, params={"channel_id": "nothing-here"}) == (200, _empty())


def test_pages_split_the_newest_first_list_and_echo_page_and_page_size(pub_a, read_a, alice_reg):
    ids = [pub_a.publish_ok(alice_reg) for _ in range(5)][::-1]
    pages = []
    for page in range(3):
        status, body = read_a.json(alice_reg.did, params={"page": page, "page_size": 2})
        assert status == 200
        assert body["payload"]["pagination"] == {"page": page, "page_size": 2, "total": 5}
        pages.append(_ids(body))
    assert pages == [ids[0:2], ids[2:4], ids[4:5]]
    status, body = read_a.json(alice_reg.did, params={"page": 3, "page_size": 2})
    assert body == {
        "type": "SUCCESS",
        "payload": {"public_events": [], "pagination": {"page": 3, "page_size": 2, "total": 5}},
    }


def test_page_size_boundaries_1_and_100_are_accepted_and_1_0_counts_as_1(pub_a, read_a, alice_reg):
    pub_a.publish_ok(alice_reg)
    pub_a.publish_ok(alice_reg)
    assert read_a.json(alice_reg.did, params={"page_size": 1})[1]["payload"]["pagination"] == {
        "page": 0,
        "page_size": 1,
        "total": 2,
    }
    assert read_a.json(alice_reg.did, params={"page_size": 100})[1]["payload"]["pagination"]["page_size"] == 100
    assert read_a.json(alice_reg.did, params={"page": "1.0", "page_size": "1.0"})[1]["payload"]["pagination"] == {
        "page": 1,
        "page_size": 1,
        "total": 2,
    }


@pytest.mark.parametrize(
    "params",
    [
        {"page": "-1"},
        {"page": "abc"},
        {"page": "1.5"},
        {"page": ""},
        {"page": "1e3"},
        {"page_size": "0"},
        {"page_size": "101"},
        {"page_size": "-5"},
        {"page_size": "ten"},
        {"channel_id": ""},
        {"channel_id": "c" * 257},
        {"channel_id": "a\x00b"},
    ],
)
def test_bad_query_parameters_are_invalid_command(read_a, alice_reg, params):
    assert read_a.json(alice_reg.did, params=params) == (400, INVALID_COMMAND)


def test_unknown_dids_give_an_empty_list(read_a, tenant_a):
    for did in ("did:decentrl:nope", "not-a-did", "did:web:elsewhere.example", "x" * 5000, "a\x00b", tenant_a.did):
        assert read_a.json(did) == (200, _empty()), did


def test_a_valid_but_unregistered_did_gives_an_empty_list(read_a, bob):
    assert read_a.json(bob.did) == (200, _empty())


def test_a_publisher_whose_registration_expired_is_listed_as_empty(pub_a, read_a, alice_reg):
    pub_a.publish_ok(alice_reg)
    Contract.objects.filter(owner_did=alice_reg.did).update(expires_at=1)
    assert read_a.json(alice_reg.did) == (200, _empty())


def test_the_did_may_be_percent_encoded_or_not(pub_a, read_a, alice_reg):
    event_id = pub_a.publish_ok(alice_reg)
    encoded = read_a.json(alice_reg.did, encode=True)
    raw = read_a.json(alice_reg.did, encode=False)
    assert encoded == raw
    assert encoded[0] == 200 and _ids(encoded[1]) == [event_id]
    assert "%3A" in public_path(alice_reg.did)


def test_another_publishers_events_are_not_listed(pub_a, read_a, alice_reg, bob_reg):
    alice_event = pub_a.publish_ok(alice_reg)
    bob_event = pub_a.publish_ok(bob_reg)
    assert _ids(read_a.json(alice_reg.did)[1]) == [alice_event]
    assert _ids(read_a.json(bob_reg.did)[1]) == [bob_event]


def test_events_published_on_one_tenant_are_not_visible_on_another(pub_a, pub_b, read_a, read_b, alice_reg, carol_reg):
    alice_event = pub_a.publish_ok(alice_reg)
    carol_event = pub_b.publish_ok(carol_reg)
    assert read_b.json(alice_reg.did) == (200, _empty())
    assert read_a.json(carol_reg.did) == (200, _empty())
    assert _ids(read_a.json(alice_reg.did)[1]) == [alice_event]
    assert _ids(read_b.json(carol_reg.did)[1]) == [carol_event]


def test_an_identity_registered_on_two_tenants_has_two_separate_feeds(
    post_b, tenant_b, pub_a, pub_b, read_a, read_b, alice_reg
):
    from tests.support.registration import register

    register(post_b, alice_reg, tenant_b)
    on_a = pub_a.publish_ok(alice_reg, channel_id="a")
    on_b = pub_b.publish_ok(alice_reg, channel_id="b")
    assert _ids(read_a.json(alice_reg.did)[1]) == [on_a]
    assert _ids(read_b.json(alice_reg.did)[1]) == [on_b]


def test_the_response_carries_a_strong_etag_and_a_matching_if_none_match_is_304(pub_a, read_a, alice_reg):
    pub_a.publish_ok(alice_reg)
    first = read_a.get(alice_reg.did)
    etag = first["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert first["Cache-Control"] == "public, max-age=0, must-revalidate"
    again = read_a.get(alice_reg.did, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b""
    assert again["ETag"] == etag
    assert read_a.get(alice_reg.did, HTTP_IF_NONE_MATCH=f'"other", W/{etag}').status_code == 304
    assert read_a.get(alice_reg.did, HTTP_IF_NONE_MATCH="*").status_code == 304
    assert read_a.get(alice_reg.did, HTTP_IF_NONE_MATCH='"stale"').status_code == 200


def test_the_etag_changes_when_the_feed_changes_and_differs_per_page(pub_a, read_a, alice_reg):
    pub_a.publish_ok(alice_reg)
    before = read_a.get(alice_reg.did)["ETag"]
    assert read_a.get(alice_reg.did)["ETag"] == before  # deterministic
    assert read_a.get(alice_reg.did, params={"page_size": 5})["ETag"] != before
    event_id = pub_a.publish_ok(alice_reg)
    after_publish = read_a.get(alice_reg.did)
    assert after_publish["ETag"] != before
    assert read_a.get(alice_reg.did, HTTP_IF_NONE_MATCH=before).status_code == 200
    pub_a.delete(alice_reg, event_id)
    assert read_a.get(alice_reg.did)["ETag"] == before


def test_head_answers_like_get_without_a_body(pub_a, read_a, alice_reg):
    pub_a.publish_ok(alice_reg)
    get = read_a.get(alice_reg.did)
    head = read_a.get(alice_reg.did, method="head")
    assert head.status_code == 200 and head.content == b"" and head["ETag"] == get["ETag"]


def test_no_authentication_and_cors_headers_per_dctrl_0004_3_4(pub_a, read_a, alice_reg, client):
    pub_a.publish_ok(alice_reg)
    resp = read_a.get(alice_reg.did, HTTP_ORIGIN="https://reader.example")
    assert resp.status_code == 200
    assert resp["Access-Control-Allow-Origin"] == "*"
    assert resp["Access-Control-Allow-Methods"] == "GET, POST, OPTIONS"
    assert resp["Access-Control-Allow-Headers"] == "Content-Type"
    assert resp["Content-Type"] == "application/json"
    preflight = read_a.get(
        alice_reg.did, method="options", HTTP_ORIGIN="https://reader.example", HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET"
    )
    assert preflight.status_code == 204
    assert preflight["Access-Control-Allow-Origin"] == "*"


def test_post_to_the_public_endpoint_is_not_allowed(read_a, alice_reg):
    assert read_a.get(alice_reg.did, method="post").status_code == 405


def test_a_suspended_tenant_answers_mediator_unavailable(read_a, tenant_a, alice_reg):
    Tenant.objects.filter(pk=tenant_a.pk).update(status=Tenant.Status.SUSPENDED)
    assert read_a.json(alice_reg.did) == (503, {"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"})


def test_a_page_costs_a_bounded_number_of_queries(pub_a, read_a, alice_reg, django_assert_max_num_queries):
    for _ in range(12):
        pub_a.publish_ok(alice_reg)
    read_a.get(alice_reg.did)  # warm
    with django_assert_max_num_queries(4):
        resp = read_a.get(alice_reg.did, params={"page": 1})
    assert json.loads(resp.content)["payload"]["pagination"]["total"] == 12
