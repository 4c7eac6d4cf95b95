"""The hot statements keep their indexes when the tables are large (issue 46: cost flat as data grows).

Beside two registered Decentrl identities with a contract and a granted DIDComm wallet (made through
the protocol), the tables get 20,000 other identities of each protocol in bulk (tests/support/bulk.py:
registrations, contracts, pending and stored events, mediations, recipient DIDs, queued messages, all
shaped like the real rows), then ANALYZE; `enable_seqscan` stays on. Each command then runs through
its real entry (POST / and POST /didcomm, in process) with auto_explain on the test's connection
(nested statements included: the forward's plpgsql function), once with custom plans and once with
the generic plans a prepared statement settles on, and every plan the command executed is read back.
None may Seq Scan a table that grows with identities or messages, and each command must use the
indexes named for it. Statements are found by running the commands, never by their text or module.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.db import connection

from apps.wire.client import Identity
from tests.conftest import HOST_A
from tests.support import bulk
from tests.support.didcomm_agent import CM2, PICKUP, Agent, forward_for
from tests.support.didcomm_client import DidcommPoster
from tests.support.registration import contract_both_ways, register

FILLER = 20_000
GROWING = {
    "messaging_contract", "messaging_pendingevent", "messaging_pendingqueuedepth", "messaging_storedevent",
    "messaging_eventtag", "protocol_nonce", "didcomm_mediation", "didcomm_recipientkey", "didcomm_queuedmessage",
    "didcomm_queuedepth", "didcomm_seenmessage",
}  # fmt: skip
# Not listed: didcomm_outbound holds a row only while a v1 message waits for its POST (empty here, so
# scanned; its queued_id index serves the cascades once it has rows).
# The registration check and the contract check: one owner's contracts, by any index leading with it
# (contract_registrations has the owner before the expiry for this: migration messaging 0010).
REGISTERED = {"contract_parties", "contract_parties_rev", "contract_registrations"}

# The page's events: by primary key, or (some generic plans) through an index leading with the owner.
EVENTS = {"messaging_storedevent_pkey", "event_owner_ts", "event_owner_recipient", "event_owner_sender"}
# Pages (shared buffers hit or read) one scan of a command may touch: its own rows and the index path
# to them; a scan over every identity's rows touches hundreds.
MAX_PAGES = 64

pytestmark = pytest.mark.django_db


class Plans:
    """auto_explain on this test's connection, its plans (JSON) sent back as notices."""

    def __init__(self):
        self.plans: list[dict] = []

    def _notice(self, diag) -> None:
        text = diag.message_primary or ""
        if "plan:" in text:
            self.plans.append(json.loads(text[text.index("{") :]))

    def __enter__(self):
        connection.ensure_connection()
        with connection.cursor() as cur:
            cur.execute("LOAD 'auto_explain'")
            for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                                   ("log_analyze", "on"), ("log_buffers", "on"), ("log_timing", "off"),
                                   ("log_format", "json"), ("log_level", "notice")):  # fmt: skip
                cur.execute(f"SET auto_explain.{setting} = {value}")
        connection.connection.add_notice_handler(self._notice)
        return self

    def __exit__(self, *exc) -> None:
        connection.connection.remove_notice_handler(self._notice)
        with connection.cursor() as cur:
            cur.execute("SET auto_explain.log_min_duration = -1")

    def take(self) -> list[dict]:
        out, self.plans = self.plans, []
        return out


def scans(plan: dict, out: list[tuple[str, str | None, str | None, int]]) -> list:
    """(node type, relation, index, pages it touched) of every node of `plan` that reads a table or
    an index (a Conflict Arbiter: the index an INSERT … ON CONFLICT probes)."""
    if "Relation Name" in plan or "Index Name" in plan:
        pages = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
        out.append((plan["Node Type"], plan.get("Relation Name"), plan.get("Index Name"), pages))
    for name in plan.get("Conflict Arbiter Indexes", []):
        out.append(("Conflict Arbiter", plan.get("Relation Name"), name, 0))
    for child in plan.get("Plans", []):
        scans(child, out)
    return out


@pytest.fixture
def grown(post_a, tenant_a, alice, bob):
    """alice and bob registered with a contract, alice's stored events, bob's pending ones, a granted
    wallet with one recipient DID; then FILLER other identities of each protocol, ANALYZEd."""
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    for i in range(3):
        assert post_a.command(alice, f"blob{i}", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    events = [{"sender_did": bob.did, "recipient_did": alice.did, "timestamp": 1_700_000_000 + i, "payload": "p",
               "encrypted_tags": [alice.tag(f"t{i % 2}")]} for i in range(4)]  # fmt: skip
    assert post_a.command(alice, {"type": "SAVE_EVENTS", "events": events}, recipient_did=tenant_a.did)[0] == 200

    didcomm = DidcommPoster(HOST_A)
    mediator = didcomm.mediator_did

    def send(agent: Agent, message: dict):
        body = agent.pack(message, mediator)
        resp = didcomm.post(body)
        assert resp.status_code in (200, 202), resp.content
        return agent.unpack(resp.content)[0] if resp.content else None

    wallet, rcpt = Agent(), Agent()
    assert send(wallet, wallet.message(CM2 + "mediate-request"))["type"] == CM2 + "mediate-grant"
    update = {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}
    assert send(wallet, wallet.message(CM2 + "keylist-update", update))["body"]["updated"][0]["result"] == "success"
    assert didcomm.post(forward_for(rcpt, mediator)).status_code == 202

    with connection.cursor() as cur:
        cur.execute("SELECT signed_contract FROM messaging_contract WHERE owner_did = %s AND recipient_did = %s",
                    [alice.did, tenant_a.did])  # fmt: skip
        registration = cur.fetchone()[0]
        cur.execute("SELECT signed_contract FROM messaging_contract WHERE owner_did = %s AND requestor_did = %s",
                    [bob.did, alice.did])  # fmt: skip
        contract = cur.fetchone()[0]
        cur.execute("SELECT data FROM didcomm_queuedmessage")
        data = cur.fetchone()[0]
        fill = bulk.params(
            tenant_id=tenant_a.pk, tenant_did=tenant_a.did, sender_did=alice.did, recipient_did=bob.did,
            registration=registration, contract=contract, tag_len=len(alice.tag("t0")), client_did=wallet.did,
            rcpt_did=rcpt.did, data=data,
        )  # fmt: skip
        for sql in bulk.FILL_SQL:
            cur.execute(sql, {**fill, "lo": 0, "hi": FILLER - 1})
        for table in sorted(GROWING):
            cur.execute(f"ANALYZE {table}")
        cur.execute("SELECT count(*) FROM didcomm_queuedmessage")
        assert cur.fetchone()[0] == FILLER + 1
    return {"send": send, "mediator": mediator, "wallet": wallet, "rcpt": rcpt, "didcomm": didcomm}


def check(name: str, plans: list[dict], must_use: list[set[str]]) -> None:
    found = [s for p in plans for s in scans(p["Plan"], [])]
    assert plans, f"{name}: no statement ran"
    seq = sorted({rel for node, rel, _, _ in found if node == "Seq Scan" and rel in GROWING})
    assert seq == [], f"{name}: Seq Scan on {seq}\n" + "\n".join(p["Query Text"][:300] for p in plans)
    # An index scan whose bound leading columns select many identities' rows (a range before the
    # owner, say) reads hundreds of pages here; the command's own rows are a few.
    wide = [(idx, pages) for node, rel, idx, pages in found if "Scan" in node and (rel in GROWING or idx)
            and pages > MAX_PAGES]  # fmt: skip
    assert wide == [], f"{name}: scans touching more than {MAX_PAGES} pages: {wide}"
    used = {idx for _, _, idx, _ in found if idx}
    missing = [group for group in must_use if not group & used]
    assert missing == [], f"{name}: none of {missing} among {sorted(used)}"


def test_hot_statements_use_their_indexes_among_many_identities(grown, post_a, tenant_a, alice, bob):
    # The custom plans first (the queue then holds the fixture's forward and the case's), then the
    # generic ones a prepared statement settles on (the queue holds the case's forward).
    for plan_mode, queued in (("force_custom_plan", 2), ("force_generic_plan", 1)):
        with connection.cursor() as cur:
            cur.execute(f"SET plan_cache_mode = {plan_mode}")
        run_cases(grown, post_a, tenant_a, alice, bob, queued)


def run_cases(grown, post_a, tenant_a, alice, bob, queued: int) -> None:
    send, mediator, wallet, rcpt = grown["send"], grown["mediator"], grown["wallet"], grown["rcpt"]

    def da(who: Identity, payload, to: str | None = None, channel: str | None = None):
        kw = {"channel": channel} if channel else {}
        status, body = post_a.command(who, payload, recipient_did=to or tenant_a.did, **kw)
        assert status == 200, body
        return body

    def pending_ids() -> list[str]:
        body = da(bob, {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 0, "page_size": 2}})
        return [e["id"] for e in body["payload"]["pending_events"]]

    ids = pending_ids()
    cases = [
        ("TWO_WAY_PRIVATE", [{"nonce_unique"}, REGISTERED, {"queue_depth_recipient"}],
         lambda: da(alice, "blob", to=bob.did, channel="TWO_WAY_PRIVATE")),
        ("QUERY_PENDING_EVENTS", [{"nonce_unique"}, REGISTERED, {"pending_unacked"}], pending_ids),
        ("ACKNOWLEDGE_PENDING_EVENTS", [{"messaging_pendingevent_public_id_key", "pending_unacked"}],
         lambda: da(bob, {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": ids[:1]})),
        ("QUERY_EVENTS by tag", [{"nonce_unique"}, REGISTERED, {"tag_ts"}, EVENTS],
         lambda: da(alice, {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": [alice.tag("t1")]},
                            "pagination": {"page": 0, "page_size": 10}})),
        ("DIDComm forward", [{"didcomm_recipient_unique"}, {"didcomm_mediation_pkey"}, {"didcomm_queuedepth_pkey"},
                             {"queue_depth_recipient"}],
         lambda: grown["didcomm"].post(forward_for(rcpt, mediator))),
        ("Pickup 3.0 status-request", [{"didcomm_queue_client"}],
         lambda: send(wallet, wallet.message(PICKUP + "status-request"))),
        ("Pickup 3.0 delivery-request", [{"didcomm_queue_client"}],
         lambda: send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 10}))),
    ]  # fmt: skip
    with Plans() as plans:
        for name, must_use, run in cases:
            answer = run()
            check(name, plans.take(), must_use)
            if name == "DIDComm forward":
                assert answer.status_code == 202
            if name == "Pickup 3.0 delivery-request":
                delivered = [a["id"] for a in answer["attachments"]]
                assert len(delivered) == queued
        # messages-received of what the delivery returned (the message ids are the queue's).
        received = wallet.message(PICKUP + "messages-received", {"message_id_list": delivered})
        assert send(wallet, received)["body"]["message_count"] == 0
        check("Pickup 3.0 messages-received", plans.take(),
              [{"didcomm_queuedmessage_message_id_key", "didcomm_queue_client"}])  # fmt: skip
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM didcomm_queuedmessage WHERE message_id = ANY(%s)",
                        [[uuid.UUID(i) for i in delivered]])  # fmt: skip
            assert cur.fetchone()[0] == 0
