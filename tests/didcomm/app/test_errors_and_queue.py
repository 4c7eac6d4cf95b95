"""Every error code of POST /didcomm with its exact shape, the queue rules (cap, both overflow
policies, TTL job, rate limits), trust-ping, discover-features, rotation and what is logged."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.didcomm import metrics
from apps.didcomm.identity import identity_rotate
from apps.didcomm.models import DidcommPolicy, QueuedMessage
from apps.didcomm.policy import policy_for
from apps.ops import limits
from apps.ops.jobs import run_job
from apps.tenants.services import Actor
from tests.support.didcomm_agent import CM2, PICKUP, Agent, forward_for, routed_did

PROBLEM = "https://didcomm.org/report-problem/2.0/problem-report"


def _plain(resp) -> dict:
    assert resp["Content-Type"] == "application/json"
    report = json.loads(resp.content)
    assert report["type"] == PROBLEM
    return report


def _granted(didcomm, wallet: Agent, n: int = 1) -> list[Agent]:
    med = didcomm.mediator_did
    didcomm.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpts = [routed_did(med) for _ in range(n)]
    didcomm.send(
        wallet,
        wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": r.did, "action": "add"} for r in rcpts]}),
    )
    return rcpts


def test_other_media_types_are_415_with_a_problem_report(didcomm_a):
    resp = didcomm_a.post(b"{}", content_type="text/plain")
    assert resp.status_code == 415
    assert _plain(resp)["body"] == {
        "code": "e.p.xfer.unsupported-media-type",
        "comment": "use application/didcomm-encrypted+json",
    }


def test_application_json_is_accepted(didcomm_a, wallet):
    med = didcomm_a.mediator_did
    resp = didcomm_a.post(wallet.pack(wallet.message(CM2 + "mediate-request"), med), content_type="application/json")
    assert resp.status_code == 200


def test_a_body_over_the_tenant_cap_is_413(didcomm_a, tenant_a):
    tenant_a.max_body_bytes = 1024
    tenant_a.save()
    resp = didcomm_a.post(b"x" * 1025)
    assert resp.status_code == 413 and _plain(resp)["body"]["code"] == "e.p.xfer.too-big"


def test_an_undecryptable_forward_is_400_and_nothing_is_stored(didcomm_a, wallet):
    [rcpt] = _granted(didcomm_a, wallet)
    envelope = json.loads(forward_for(rcpt, didcomm_a.mediator_did))
    envelope["ciphertext"] = envelope["ciphertext"][:-4] + ("AAAA" if envelope["ciphertext"][-4:] != "AAAA" else "BBBB")
    resp = didcomm_a.post(json.dumps(envelope).encode())
    assert resp.status_code == 400
    assert _plain(resp)["body"]["code"] == "e.p.trust.crypto"
    assert QueuedMessage.objects.count() == 0
    resp = didcomm_a.post(b"not json")
    assert resp.status_code == 400 and _plain(resp)["body"] == {"code": "e.p.msg", "comment": "envelope is not JSON"}


def test_a_plaintext_message_is_refused(didcomm_a, wallet):
    resp = didcomm_a.post(json.dumps(wallet.message(CM2 + "mediate-request")).encode())
    assert resp.status_code == 400 and _plain(resp)["body"]["code"] == "e.p.trust.unauthenticated"


def test_admin_messages_must_be_authcrypt_and_the_problem_names_the_thread(didcomm_a, wallet):
    msg = wallet.message(CM2 + "mediate-request")
    resp = didcomm_a.post(wallet.pack(msg, didcomm_a.mediator_did, anon=True))
    assert resp.status_code == 401
    report = _plain(resp)
    assert report["body"]["code"] == "e.p.trust.unauthenticated" and report["pthid"] == msg["id"]


def test_pickup_without_a_grant_is_403_authcrypt_problem_report(didcomm_a, wallet):
    msg = wallet.message(PICKUP + "delivery-request", {"limit": 5})
    status, report, resp = didcomm_a.send(wallet, msg)
    assert status == 403 and resp["Content-Type"] == "application/didcomm-encrypted+json"
    assert report["type"] == PROBLEM and report["pthid"] == msg["id"]
    assert report["body"] == {"code": "e.p.req.not-granted", "comment": "no mediation granted to this DID"}


@pytest.mark.parametrize(
    ("type_", "body", "code", "status"),
    [
        (PICKUP + "live-delivery-change", {"live_delivery": True}, "e.m.live-mode-not-supported", 400),
        (PICKUP + "delivery-request", {"limit": 0}, "e.p.msg.invalid-body", 400),
        (PICKUP + "messages-received", {"message_id_list": "x"}, "e.p.msg.invalid-body", 400),
        (CM2 + "keylist-update", {"updates": "x"}, "e.p.msg.invalid-body", 400),
        (CM2 + "keylist-query", {"paginate": {"limit": -1}}, "e.p.msg.invalid-body", 400),
        (PICKUP + "status-request", {"recipient_did": "did:peer:2.unknown"}, "e.p.me.res.not-found", 400),
        ("https://didcomm.org/unknown/1.0/x", {}, "e.p.msg.unsupported-type", 400),
    ],
)
def test_client_errors_after_a_grant_are_problem_reports(didcomm_a, wallet, type_, body, code, status):
    _granted(didcomm_a, wallet)
    msg = wallet.message(type_, body)
    got, report, _ = didcomm_a.send(wallet, msg)
    assert got == status and report["body"]["code"] == code and report["pthid"] == msg["id"]


def test_from_must_be_the_authcrypt_sender(didcomm_a, wallet):
    msg = wallet.message(CM2 + "mediate-request")
    msg["from"] = Agent().did
    status, _, resp = didcomm_a.send(wallet, msg)
    # plaintext: a sender whose claims disagree with its key gets nothing encrypted back
    report = _plain(resp)
    assert status == 400 and report["body"]["code"] == "e.p.trust.sender-mismatch" and report["pthid"] == msg["id"]


def test_keylist_update_results_per_entry(didcomm_a, didcomm_b, wallet):
    [rcpt] = _granted(didcomm_a, wallet)
    other = Agent()
    _granted(didcomm_a, other, 0)
    updates = [
        {"recipient_did": rcpt.did, "action": "add"},  # already ours
        {"recipient_did": "not a did", "action": "add"},
        {"recipient_did": rcpt.did, "action": "explode"},
        {"recipient_did": rcpt.did, "action": "remove"},
        {"recipient_did": rcpt.did, "action": "remove"},
    ]
    _, answer, _ = didcomm_a.send(wallet, wallet.message(CM2 + "keylist-update", {"updates": updates}))
    assert [u["result"] for u in answer["body"]["updated"]] == [
        "no_change",
        "client_error",
        "client_error",
        "success",
        "no_change",
    ]
    # another client cannot take over a DID someone else registered: a problem report (docs/didcomm.md
    # "Who may register a recipient"; tests/didcomm/app/test_recipient_proof.py)
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    status, answer, _ = didcomm_a.send(
        other, other.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    assert (status, answer["body"]["code"]) == (409, "e.p.req.recipient-conflict")


def test_the_x25519_did_key_and_did_url_forms_of_a_recipient_route_to_it(didcomm_a, wallet):
    from apps.didcomm.core.did_key import did_key_from_key

    didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    holder = Agent()
    ed_did_key = did_key_from_key(holder.ed.public)
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": ed_did_key, "action": "add"}]})
    )
    x_form = did_key_from_key(holder.ed.public.to_x25519())
    med = didcomm_a.mediator_did
    for next_ in (ed_did_key, x_form, f"{x_form}#{x_form[8:]}", f"{ed_did_key}#{ed_did_key[8:]}"):
        assert didcomm_a.post(forward_for(holder, med, next_=next_)).status_code == 202
    assert QueuedMessage.objects.count() == 4


def test_closed_policy_and_max_grants_deny(didcomm_a, tenant_a):
    DidcommPolicy.objects.filter(pk=policy_for(tenant=tenant_a).pk).update(mediation="closed")
    w = Agent()
    _, deny, _ = didcomm_a.send(w, w.message(CM2 + "mediate-request"))
    assert deny["type"] == CM2 + "mediate-deny" and deny["body"] == {}
    DidcommPolicy.objects.filter(pk=tenant_a.pk).update(mediation="open", max_grants=1)
    first, second = Agent(), Agent()
    assert didcomm_a.send(first, first.message(CM2 + "mediate-request"))[1]["type"] == CM2 + "mediate-grant"
    assert didcomm_a.send(second, second.message(CM2 + "mediate-request"))[1]["type"] == CM2 + "mediate-deny"


def test_overflow_evict_drops_the_oldest_and_counts_it(didcomm_a, tenant_a, wallet):
    DidcommPolicy.objects.filter(pk=policy_for(tenant=tenant_a).pk).update(queue_cap=2)
    [rcpt] = _granted(didcomm_a, wallet)
    med = didcomm_a.mediator_did
    before = metrics.EVICTED._value.get()
    for _ in range(3):
        assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    assert metrics.EVICTED._value.get() - before == 1
    ids = list(QueuedMessage.objects.order_by("id").values_list("id", flat=True))
    assert len(ids) == 2


def test_overflow_reject_is_507_with_a_problem_report(didcomm_a, tenant_a, wallet):
    DidcommPolicy.objects.filter(pk=policy_for(tenant=tenant_a).pk).update(queue_cap=1, overflow="reject")
    [rcpt] = _granted(didcomm_a, wallet)
    med = didcomm_a.mediator_did
    assert didcomm_a.post(forward_for(rcpt, med)).status_code == 202
    resp = didcomm_a.post(forward_for(rcpt, med))
    assert resp.status_code == 507
    assert _plain(resp)["body"] == {"code": "e.p.me.res.storage.full", "comment": "recipient queue is full"}
    assert QueuedMessage.objects.count() == 1


def test_the_ttl_job_removes_expired_messages_only(didcomm_a, tenant_a, wallet):
    [rcpt] = _granted(didcomm_a, wallet)
    med = didcomm_a.mediator_did
    didcomm_a.post(forward_for(rcpt, med))
    didcomm_a.post(forward_for(rcpt, med))
    old = QueuedMessage.objects.order_by("id").first()
    assert old.expires_at - old.received_at == timedelta(hours=72)
    QueuedMessage.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert run_job("purge_didcomm_messages").startswith("purged 1 expired DIDComm messages")
    assert list(QueuedMessage.objects.values_list("pk", flat=True)) != [old.pk]
    assert QueuedMessage.objects.count() == 1


def test_rate_limits_per_ip_and_per_sender_are_429_with_retry_after(didcomm_a, tenant_a, wallet, settings, monkeypatch):
    settings.MEDIATOR_RATE_LIMIT_PREFIX = f"test-rl-{uuid.uuid4().hex}"
    monkeypatch.setattr(limits, "_now_ms", lambda: 1_900_000_000_000)  # the limiter's clock stands still
    DidcommPolicy.objects.filter(pk=policy_for(tenant=tenant_a).pk).update(rate_limit_per_sender=2)
    for _ in range(2):
        assert didcomm_a.send(wallet, wallet.message("https://didcomm.org/trust-ping/2.0/ping"))[0] == 200
    status, report, resp = didcomm_a.send(wallet, wallet.message("https://didcomm.org/trust-ping/2.0/ping"))
    assert status == 429 and int(resp["Retry-After"]) >= 1 and report["body"]["code"] == "e.p.xfer.rate-limited"
    other = Agent()  # another sender from the same address still passes
    assert didcomm_a.send(other, other.message("https://didcomm.org/trust-ping/2.0/ping"))[0] == 200
    # Per IP: a token bucket, here 1 a minute with bursts of 2.
    DidcommPolicy.objects.filter(pk=tenant_a.pk).update(rate_limit_per_ip=1, rate_limit_per_ip_burst=2)
    assert [didcomm_a.post(b"{}").status_code for _ in range(2)] == [400, 400]  # counted by IP before anything else
    resp = didcomm_a.post(b"{}")
    assert resp.status_code == 429 and _plain(resp)["body"]["code"] == "e.p.xfer.rate-limited"
    assert resp["Retry-After"] == "60"


def test_trust_ping_and_discover_features(didcomm_a, wallet):
    ping = wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True})
    _, pong, _ = didcomm_a.send(wallet, ping)
    assert pong["type"] == "https://didcomm.org/trust-ping/2.0/ping-response" and pong["thid"] == ping["id"]
    q = wallet.message(
        "https://didcomm.org/discover-features/2.0/queries",
        {"queries": [{"feature-type": "protocol", "match": "https://didcomm.org/coordinate-mediation/*"}]},
    )
    _, disclose, _ = didcomm_a.send(wallet, q)
    assert disclose["body"] == {
        "disclosures": [
            {"feature-type": "protocol", "id": "https://didcomm.org/coordinate-mediation/2.0", "roles": ["mediator"]},
            {"feature-type": "protocol", "id": "https://didcomm.org/coordinate-mediation/3.0", "roles": ["mediator"]},
        ]
    }


def test_rotation_keeps_the_old_did_answering_and_announces_the_new_one(didcomm_a, tenant_a, wallet):
    old = didcomm_a.mediator_did
    [rcpt] = _granted(didcomm_a, wallet)
    new = identity_rotate(tenant=tenant_a, actor=Actor(None, "cli")).did
    assert new != old and didcomm_a.mediator_did == new
    # the old DID still decrypts forwards and answers its client, from the old DID
    assert didcomm_a.post(forward_for(rcpt, old)).status_code == 202
    resp = didcomm_a.post(wallet.pack(wallet.message(PICKUP + "delivery-request", {"limit": 10}), old))
    delivery, decrypted = wallet.unpack(resp.content)
    assert decrypted.sender_kid == old + "#key-2"
    announcement = [a for a in delivery["attachments"] if "json" in a["data"]]
    grants = []
    for a in announcement:
        try:
            grants.append(wallet.unpack(a["data"]["json"])[0])
        except Exception:  # noqa: BLE001 - the forwarded message is for rcpt, not the wallet
            continue
    assert [g["body"] for g in grants] == [{"routing_did": new, "previous_routing_did": old}]
    # past the grace period the old DID no longer decrypts
    from apps.didcomm.models import MediatorIdentity

    MediatorIdentity.objects.filter(did=old).update(retired_at=timezone.now() - timedelta(hours=73))
    resp = didcomm_a.post(forward_for(rcpt, old))
    assert resp.status_code == 400 and _plain(resp)["body"]["code"] == "e.p.trust.crypto.unknown-key"


def test_logs_carry_routing_metadata_only(didcomm_a, wallet, caplog):
    [rcpt] = _granted(didcomm_a, wallet)
    inner = json.loads(Agent().pack({"id": "x", "type": "t", "body": {"secret": "s3cr3t"}}, rcpt.did))
    body = forward_for(rcpt, didcomm_a.mediator_did, inner)
    with caplog.at_level(logging.DEBUG):
        assert didcomm_a.post(body).status_code == 202
        _, delivery, _ = didcomm_a.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 1}))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "type=routing/2.0/forward code=SUCCESS status=202" in text
    for secret in (inner["ciphertext"], inner["tag"], inner["protected"], rcpt.did, wallet.did, didcomm_a.mediator_did):
        assert secret not in text
    env = json.loads(body)
    assert env["ciphertext"] not in text and env["protected"] not in text
