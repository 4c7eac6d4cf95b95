"""Replay protection of DIDComm v2 admin messages (docs/didcomm.md "Replays"): a captured authcrypt
message posted again gets a Report Problem `e.m.msg.replay` (409) and is not executed; its timing
headers are honoured (`expires_time` past: `e.m.req.time.expired`; `created_time` outside the window:
`e.m.req.time`); ids are per tenant and per sender, compared case-insensitively, remembered for a
bounded time and pruned by a job; forwards (anoncrypt, from anyone) may be sent again. The claim
commits with the handler's writes (one transaction), and stays when the handler answers with a
problem report or the database fails under it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.didcomm import recipients, replay
from apps.didcomm.models import Mediation, QueuedMessage, RecipientKey, SeenMessage
from apps.messaging.replay import claim
from apps.ops.jobs import run_job
from tests.support.didcomm_agent import CM2, CM3, PICKUP, Agent, forward_for

WINDOW = 3600


@pytest.fixture(autouse=True)
def window(settings):
    settings.MEDIATOR_DIDCOMM_REPLAY_WINDOW_S = WINDOW


def _problem(agent, resp) -> tuple[int, str, str | None]:
    answer, _ = agent.unpack(resp.content)
    return resp.status_code, answer["body"]["code"], answer.get("pthid")


def _grant(didcomm_a, wallet: Agent) -> Mediation:
    status, answer, _ = didcomm_a.send(wallet, wallet.message(CM2 + "mediate-request"))
    assert (status, answer["type"]) == (200, CM2 + "mediate-grant")
    return Mediation.objects.get(client_hash=recipients.did_hash(wallet.did))


@pytest.mark.parametrize("protocol", [CM2, CM3])
def test_it_refuses_a_replayed_recipient_update_and_executes_nothing(didcomm_a, wallet, protocol):
    mediation = _grant(didcomm_a, wallet)
    rcpt = Agent()
    kind = "keylist-update" if protocol == CM2 else "recipient-update"
    update = wallet.message(protocol + kind, {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    captured = wallet.pack(update, didcomm_a.mediator_did)
    assert didcomm_a.post(captured).status_code == 200
    # The recipient is removed by a later message; the captured add replayed must not bring it back.
    remove = wallet.message(protocol + kind, {"updates": [{"recipient_did": rcpt.did, "action": "remove"}]})
    assert didcomm_a.send(wallet, remove)[0] == 200
    assert not RecipientKey.objects.filter(mediation=mediation).exists()
    assert _problem(wallet, didcomm_a.post(captured)) == (409, "e.m.msg.replay", update["id"])
    assert not RecipientKey.objects.filter(mediation=mediation).exists()


def test_it_refuses_a_replayed_messages_received_and_a_replayed_mediate_request(didcomm_a, wallet):
    mediation = _grant(didcomm_a, wallet)
    request = wallet.message(CM2 + "mediate-request")
    packed = wallet.pack(request, didcomm_a.mediator_did)
    assert didcomm_a.post(packed).status_code == 200  # a second request, its own id: answered
    assert _problem(wallet, didcomm_a.post(packed))[:2] == (409, "e.m.msg.replay")
    rcpt = Agent()
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    assert didcomm_a.post(forward_for(rcpt, didcomm_a.mediator_did)).status_code == 202
    [first] = QueuedMessage.objects.filter(mediation=mediation)
    ack = wallet.pack(
        wallet.message(PICKUP + "messages-received", {"message_id_list": [str(first.message_id)]}),
        didcomm_a.mediator_did,
    )
    assert didcomm_a.post(ack).status_code == 200
    assert _problem(wallet, didcomm_a.post(ack))[:2] == (409, "e.m.msg.replay")


def test_ids_are_compared_case_insensitively_per_sender_and_per_tenant(didcomm_a, didcomm_b, wallet):
    _grant(didcomm_a, wallet)
    ping = wallet.message("https://didcomm.org/trust-ping/2.0/ping", {"response_requested": True})
    assert didcomm_a.post(wallet.pack(ping, didcomm_a.mediator_did)).status_code == 200
    upper = {**ping, "id": ping["id"].upper()}
    assert _problem(wallet, didcomm_a.post(wallet.pack(upper, didcomm_a.mediator_did)))[:2] == (
        409,
        "e.m.msg.replay",
    )
    # Another sender may use the same id, and the same sender at another tenant.
    other = Agent()
    assert didcomm_a.post(other.pack({**ping, "from": other.did}, didcomm_a.mediator_did)).status_code == 200
    assert didcomm_b.post(wallet.pack(ping, didcomm_b.mediator_did)).status_code == 200


def test_a_forward_may_be_sent_again(didcomm_a, wallet):
    mediation = _grant(didcomm_a, wallet)
    rcpt = Agent()
    didcomm_a.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    forward = forward_for(rcpt, didcomm_a.mediator_did)
    assert [didcomm_a.post(forward).status_code for _ in range(2)] == [202, 202]
    assert QueuedMessage.objects.filter(mediation=mediation).count() == 2


@pytest.mark.parametrize(
    ("header", "offset", "code"),
    [
        ("expires_time", -1, "e.m.req.time.expired"),
        ("created_time", -WINDOW - 60, "e.m.req.time"),
        ("created_time", WINDOW + 60, "e.m.req.time"),
    ],
)
def test_it_honours_the_timing_headers_before_executing(didcomm_a, wallet, header, offset, code):
    message = {**wallet.message(CM2 + "mediate-request"), header: int(time.time()) + offset}
    assert _problem(wallet, didcomm_a.post(wallet.pack(message, didcomm_a.mediator_did))) == (400, code, message["id"])
    assert not Mediation.objects.exists()
    assert not SeenMessage.objects.exists()


def test_a_record_lives_as_long_as_the_message_could_be_accepted_and_is_pruned_after(didcomm_a, wallet):
    now = int(time.time())
    _grant(didcomm_a, wallet)  # created_time now: kept for the window
    expiring = {**wallet.message(CM2 + "mediate-request"), "expires_time": now + 120}
    assert didcomm_a.post(wallet.pack(expiring, didcomm_a.mediator_did)).status_code == 200
    untimed = {k: v for k, v in wallet.message(CM2 + "mediate-request").items() if k != "created_time"}
    assert didcomm_a.post(wallet.pack(untimed, didcomm_a.mediator_did)).status_code == 200
    lives = sorted(SeenMessage.objects.values_list("expires_at", flat=True))
    assert len(lives) == 3
    assert lives[0] == (now + 120) * 1000  # the expires_time (in ms, as every replay record)
    assert all((now + WINDOW) * 1000 <= t <= (now + WINDOW + 5) * 1000 for t in lives[1:])  # the window
    later = timezone.now() + timedelta(seconds=WINDOW + 10)
    assert run_job("prune_didcomm_message_ids", now=later).startswith("pruned 3 DIDComm message ids")
    assert not SeenMessage.objects.exists()


def test_an_expired_record_not_pruned_yet_is_taken_over(tenant_a):
    key = replay._key(tenant_a, "did:example:alice", "m-1")
    assert claim(replay.SEEN_CLAIM, [*key, 100, 50]) is True
    assert claim(replay.SEEN_CLAIM, [*key, 200, 100]) is False  # kept through its expiry
    assert claim(replay.SEEN_CLAIM, [*key, 300, 101]) is True
    assert SeenMessage.objects.get().expires_at == 300


class _Trigger:
    """A plpgsql trigger on `table` for the length of a `with` block (a real database, no mocks)."""

    def __init__(self, table: str, when: str, body: str):
        self.table, self.when, self.body = table, when, body

    def __enter__(self):
        with connection.cursor() as cur:
            cur.execute(f"CREATE FUNCTION test_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ {self.body} $$")
            cur.execute(
                f"CREATE TRIGGER test_trigger {self.when} ON {self.table} FOR EACH ROW EXECUTE FUNCTION test_trigger()"
            )

    def __exit__(self, *exc):
        with connection.cursor() as cur:
            cur.execute(f"DROP TRIGGER test_trigger ON {self.table}")
            cur.execute("DROP FUNCTION test_trigger()")


@pytest.mark.django_db(transaction=True)
def test_a_writing_message_commits_its_claim_and_its_writes_in_one_transaction(didcomm_a, wallet):
    mediation = _grant(didcomm_a, wallet)
    rcpt = Agent()
    update = wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    # The recipient's row is refused unless its transaction (the top-level one: the service's own
    # `atomic` is a savepoint in it) inserted the claim of a message id: nothing committed between.
    same_transaction = (
        "BEGIN IF NOT EXISTS (SELECT 1 FROM didcomm_seenmessage WHERE xmin::text = pg_current_xact_id()::text) "
        "THEN RAISE EXCEPTION 'the claim committed on its own'; END IF; RETURN NEW; END"
    )
    with _Trigger("didcomm_recipientkey", "BEFORE INSERT", same_transaction):
        status, answer, _ = didcomm_a.send(wallet, update)
    assert (status, answer["body"]["updated"]) == (
        200,
        [{"recipient_did": rcpt.did, "action": "add", "result": "success"}],
    )
    assert RecipientKey.objects.get(mediation=mediation).recipient_did == rcpt.did
    assert SeenMessage.objects.count() == 2  # the grant's and the update's


@pytest.mark.django_db(transaction=True)
def test_a_message_answered_with_a_problem_report_stays_claimed(didcomm_a, wallet):
    query = wallet.pack(wallet.message(CM2 + "keylist-query"), didcomm_a.mediator_did)
    assert _problem(wallet, didcomm_a.post(query))[:2] == (403, "e.p.req.not-granted")
    _grant(didcomm_a, wallet)
    bad = wallet.message(CM2 + "keylist-update", {"updates": "all of them"})
    packed = wallet.pack(bad, didcomm_a.mediator_did)
    assert _problem(wallet, didcomm_a.post(packed)) == (400, "e.p.msg.invalid-body", bad["id"])
    # Both ids stay used: the same messages again are replays, now that one of them would succeed.
    assert _problem(wallet, didcomm_a.post(query))[:2] == (409, "e.m.msg.replay")
    assert _problem(wallet, didcomm_a.post(packed)) == (409, "e.m.msg.replay", bad["id"])
    assert SeenMessage.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_message_whose_handler_the_database_fails_stays_claimed_and_wrote_nothing(didcomm_a, wallet):
    mediation = _grant(didcomm_a, wallet)
    rcpt = Agent()
    update = wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    packed = wallet.pack(update, didcomm_a.mediator_did)
    # A real database error inside the handler's service: a trigger refuses the recipient's row.
    with _Trigger("didcomm_recipientkey", "BEFORE INSERT", "BEGIN RAISE EXCEPTION 'refused by the test'; END"):
        resp = didcomm_a.post(packed)
    assert resp.status_code == 503
    assert not RecipientKey.objects.filter(mediation=mediation).exists()
    assert _problem(wallet, didcomm_a.post(packed)) == (409, "e.m.msg.replay", update["id"])
    assert not RecipientKey.objects.filter(mediation=mediation).exists()
