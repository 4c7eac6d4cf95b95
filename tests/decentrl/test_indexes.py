"""Every query the commands make is served by an index (issue 2 §3).

The test fills the messaging tables with a few thousand rows of other identities, runs ANALYZE
(no `enable_seqscan = off`: the planner chooses freely), then runs each command through POST /,
captures the SQL it actually executed, and EXPLAINs every statement on a messaging or nonce table.
No plan may Seq Scan one of those tables, and each command must use the index named for it.

`scripts/explain_queries.py` runs this module with EXPLAIN_OUT set, which writes the plans to
docs/indexes.md.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.decentrl.models import Nonce
from apps.messaging.models import Contract, ContractRequest, EventTag, PendingEvent, PendingQueueDepth, StoredEvent
from apps.tenants.models import Tenant
from apps.wire import contract as wc
from apps.wire.client import Identity
from apps.wire.did import parse_decentrl
from tests.support.registration import contract_both_ways, register, signed_contract

BIG_TABLES = {
    "messaging_contract",
    "messaging_contractrequest",
    "messaging_pendingevent",
    "messaging_pendingqueuedepth",
    "messaging_storedevent",
    "messaging_eventtag",
    "protocol_nonce",
}
OWNERS = 150
PER_OWNER = 20
NOISE_DID = "did:decentrl:{i}:z6Mk" + "n" * 44 + ":z6LS" + "p" * 44 + ":ZGlkOndlYjpub2lzZQ"


def noise_did(i: int) -> str:
    return NOISE_DID.format(i=f"noise{i:04d}")


def fill_noise(tenant, others: list) -> None:
    """A few thousand rows per table that belong to other identities (and some to ours)."""
    now_s = int(time.time())
    now = timezone.now()
    dids = [noise_did(i) for i in range(OWNERS)]
    contracts, requests, pending, events = [], [], [], []
    for i, did in enumerate(dids):
        peer = dids[(i + 1) % OWNERS]
        contracts.append(
            Contract(
                tenant=tenant,
                owner_did=did,
                requestor_did=did,
                recipient_did=tenant.did,
                expires_at=now_s + 86_400,
                contract_hash=f"r{i:063x}",
                signed_contract="{}",
            )
        )
        for j in range(PER_OWNER):
            contracts.append(
                Contract(
                    tenant=tenant,
                    owner_did=did,
                    requestor_did=peer if j % 2 else did,
                    recipient_did=did if j % 2 else peer,
                    expires_at=now_s + (j - 5) * 3600,
                    contract_hash=f"{i:032x}{j:032x}",
                    signed_contract="{}",
                )
            )
            requests.append(
                ContractRequest(
                    tenant=tenant,
                    recipient_did=did,
                    sender_did=peer,
                    encrypted_contract_request="e" * 200,
                    requestor_ephemeral_public_key="k" * 44,
                    acknowledged_at=now if j % 3 == 0 else None,
                )
            )
            pending.append(
                PendingEvent(
                    tenant=tenant,
                    recipient_did=did,
                    sender_did=peer,
                    payload="" if j % 2 else "x" * 200,
                    acknowledged_at=now if j % 2 else None,
                )
            )
            events.append(
                StoredEvent(
                    tenant=tenant,
                    owner_did=did,
                    sender_did=peer if j % 2 else did,
                    recipient_did=did if j % 2 else peer,
                    timestamp=1_700_000_000_000 + j,
                    payload="s" * 200,
                    encrypted_tags=[f"tag{j % 5}", f"tag{i}"],
                    processed=j % 4 != 0,
                )
            )
    # Some rows of our own identities, so that their queries return something.
    for who in others:
        for j in range(8):
            events.append(
                StoredEvent(
                    tenant=tenant,
                    owner_did=who.did,
                    sender_did=others[(j + 1) % len(others)].did,
                    recipient_did=who.did,
                    timestamp=1_700_000_000_000 + j,
                    payload="o" * 100,
                    encrypted_tags=["ours", f"t{j}"],
                    processed=j % 2 == 0,
                )
            )
    Contract.objects.bulk_create(contracts)
    ContractRequest.objects.bulk_create(requests)
    PendingEvent.objects.bulk_create(pending)
    # The triggers made one counter row per noise recipient above; a deployment has one per
    # recipient that ever had a queue, so add the rows of a few thousand more.
    PendingQueueDepth.objects.bulk_create(
        [PendingQueueDepth(tenant=tenant, recipient_did=noise_did(OWNERS + i), depth=i % 7) for i in range(3000)]
    )
    created = StoredEvent.objects.bulk_create(events)
    EventTag.objects.bulk_create(
        [
            EventTag(tenant=tenant, owner_did=e.owner_did, event_id=e.pk, tag=t, timestamp=e.timestamp)
            for e in created
            for t in dict.fromkeys(e.encrypted_tags)  # as SAVE_EVENTS writes them: each tag once
        ]
    )
    Nonce.objects.bulk_create(
        [
            Nonce(tenant=tenant, sender_did=did, nonce=str(uuid.uuid4()), expires_at=int(time.time() * 1000) + 300_000)
            for did in dids
            for _ in range(PER_OWNER)
        ]
    )
    with connection.cursor() as cur:
        for table in sorted(BIG_TABLES):
            cur.execute(f"ANALYZE {table}")


@dataclass
class Case:
    name: str
    must_use: list[set[str]]  # every group must be satisfied by one of its index names
    statements: list[str] = field(default_factory=list)
    plans: list[tuple[str, str, list[dict]]] = field(default_factory=list)  # (sql, text plan, scan nodes)


def _scan_nodes(plan: dict, out: list[dict]) -> list[dict]:
    if "Relation Name" in plan or "Index Name" in plan:
        out.append(plan)
    for child in plan.get("Plans", []):
        _scan_nodes(child, out)
    return out


_DML = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.I)


def explain(sql: str) -> tuple[str, list[dict], list[str]]:
    """(text plan, scan nodes, arbiter indexes) for one captured statement; nothing is executed."""
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (FORMAT JSON) " + sql)
        raw = cur.fetchone()[0]
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        cur.execute("EXPLAIN " + sql)
        text = "\n".join(r[0] for r in cur.fetchall())
    arbiters = []

    def walk(p):
        arbiters.extend(p.get("Conflict Arbiter Indexes", []))
        for c in p.get("Plans", []):
            walk(c)

    walk(plan)
    return text, _scan_nodes(plan, []), arbiters


def touches_big_table(sql: str) -> bool:
    return any(f'"{t}"' in sql or f" {t} " in sql or f" {t}(" in sql for t in BIG_TABLES)


def run_case(case: Case, fn) -> None:
    with CaptureQueriesContext(connection) as ctx:
        fn()
    for q in ctx.captured_queries:
        sql = q["sql"]
        if sql is None:  # a statement Django could not render cannot be EXPLAINed: a gap, say so
            case.plans.append(("(statement not captured)", "", [{"Node Type": "Unknown", "Relation Name": None}]))
            continue
        if _DML.match(sql) and touches_big_table(sql):
            text, nodes, arbiters = explain(sql)
            for a in arbiters:
                nodes.append({"Node Type": "Conflict Arbiter", "Index Name": a, "Relation Name": "protocol_nonce"})
            case.statements.append(sql)
            case.plans.append((sql, text, nodes))


@pytest.fixture
def world(post_a, tenant_a, alice, bob, dave):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    for blob in ("one", "two"):
        assert post_a.command(alice, blob, recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    req = wc.build_request(
        requestor_did=dave.did,
        recipient_did=bob.did,
        recipient_prekey=parse_decentrl(bob.did).pre_key,
        signing=dave.signing,
        expires_at=int(time.time()) + 3600,
    )
    payload = {
        "type": "REQUEST_COMMUNICATION_CONTRACT",
        "encrypted_contract_request": req.encrypted,
        "requestor_ephemeral_public_key": req.ephemeral_public_b64,
    }
    assert post_a.command(dave, payload, recipient_did=bob.did)[0] == 200
    fill_noise(tenant_a, [alice, bob, dave])
    return tenant_a


def _cases(post_a, tenant, alice, bob):
    def da(who, payload):
        def go():
            status, body = post_a.command(who, payload, recipient_did=tenant.did)
            assert status == 200, body

        return go

    def two_way():
        status, body = post_a.command(alice, "blob", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")
        assert status == 200, body

    first_event = str(
        StoredEvent.objects.filter(owner_did=alice.did).order_by("id").values_list("public_id", flat=True)[0]
    )
    pending_ids = [
        str(p) for p in PendingEvent.objects.filter(recipient_did=bob.did).values_list("public_id", flat=True)
    ]
    # contract_registrations leads with (tenant, recipient, owner) (messaging 0010): one owner's lookup too.
    registration = {"contract_parties", "contract_parties_rev", "contract_registrations"}
    nonce = {"nonce_unique"}
    erin = Identity.create("erin", tenant.did)
    Tenant.objects.filter(pk=tenant.pk).update(max_identities=100_000)  # so the quota query runs
    reg = wc.build_request(
        requestor_did=erin.did,
        recipient_did=tenant.did,
        recipient_prekey=bytes(tenant.prekey_public),
        signing=erin.signing,
        expires_at=int(time.time()) + 3600,
    )
    fwd = wc.build_request(
        requestor_did=erin.did,
        recipient_did=bob.did,
        recipient_prekey=parse_decentrl(bob.did).pre_key,
        signing=erin.signing,
        expires_at=int(time.time()) + 3600,
    )
    signed, _, _ = signed_contract(alice, bob)

    def as_request(req):
        return {
            "type": "REQUEST_COMMUNICATION_CONTRACT",
            "encrypted_contract_request": req.encrypted,
            "requestor_ephemeral_public_key": req.ephemeral_public_b64,
        }

    def forward():
        status, body = post_a.command(erin, as_request(fwd), recipient_did=bob.did)
        assert status == 200, body

    ids = [str(p) for p in ContractRequest.objects.filter(recipient_did=bob.did).values_list("public_id", flat=True)]

    def ack_request():
        payload = {"type": "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", "communication_contract_ids": ids}
        status, body = post_a.command(bob, payload, recipient_did=tenant.did)
        assert status == 200 and ids, body

    def respond():
        payload = {"type": "COMMUNICATION_CONTRACT_RESPONSE", "signed_communication_contract": signed}
        status, body = post_a.command(bob, payload, recipient_did=alice.did)
        assert status == 200, body

    return [
        (
            "REQUEST_COMMUNICATION_CONTRACT: registration with an identity quota",
            [nonce, {"contract_registrations"}, {"contract_unique_per_owner"}],
            da(erin, as_request(reg)),
        ),
        ("REQUEST_COMMUNICATION_CONTRACT: forwarded", [nonce, registration], forward),
        ("COMMUNICATION_CONTRACT_RESPONSE", [registration, {"contract_unique_per_owner"}], respond),
        (
            "SAVE_COMMUNICATION_CONTRACT",
            [{"contract_unique_per_owner"}],
            da(bob, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed}),
        ),
        (
            "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS",
            [{"messaging_contractrequest_public_id_key", "creq_pending"}],
            ack_request,
        ),
        (
            "TWO_WAY_PRIVATE (one statement): nonce, registration, contract, queue cap, insert",
            [nonce, registration, {"queue_depth_recipient"}],
            two_way,
        ),
        ("QUERY_PENDING_EVENTS", [nonce, registration, {"pending_unacked"}], da(bob, {"type": "QUERY_PENDING_EVENTS"})),
        (
            "QUERY_PENDING_EVENTS with filter.sender_did",
            [{"pending_unacked_sender"}],
            da(bob, {"type": "QUERY_PENDING_EVENTS", "filter": {"sender_did": alice.did}}),
        ),
        (
            "ACKNOWLEDGE_PENDING_EVENTS",
            [{"messaging_pendingevent_public_id_key", "pending_unacked"}],
            da(bob, {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": pending_ids[:1]}),
        ),
        (
            "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS",
            [{"creq_pending"}],
            da(bob, {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS"}),
        ),
        (
            "QUERY_COMMUNICATION_CONTRACTS",
            [{"contract_owner_seq"}],
            da(alice, {"type": "QUERY_COMMUNICATION_CONTRACTS"}),
        ),
        (
            "QUERY_COMMUNICATION_CONTRACTS with filter.did",
            [{"contract_parties", "contract_parties_rev", "contract_owner_seq"}],
            da(alice, {"type": "QUERY_COMMUNICATION_CONTRACTS", "filter": {"did": bob.did}}),
        ),
        (
            "QUERY_EVENTS by time",
            [{"event_owner_ts"}],
            da(
                alice,
                {
                    "type": "QUERY_EVENTS",
                    "filter": {"after_timestamp": 1_700_000_000_002, "before_timestamp": 1_700_000_000_006},
                },
            ),
        ),
        (
            "QUERY_EVENTS by participant",
            [{"event_owner_sender", "event_owner_recipient", "event_owner_ts"}],
            da(alice, {"type": "QUERY_EVENTS", "filter": {"participant_did": bob.did}}),
        ),
        (
            "QUERY_EVENTS by tag",
            [{"tag_ts"}, {"messaging_storedevent_pkey"}],
            da(alice, {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["t3", "t5"]}}),
        ),
        (
            # a full page: its statement carries the total (window count over the tag index)
            "QUERY_EVENTS by tag, full page with its total",
            [{"tag_ts"}, {"messaging_storedevent_pkey"}],
            da(
                alice,
                {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": ["ours", "t1"]}, "pagination": {"page_size": 2}},
            ),
        ),
        (
            # an empty page past the end: the total needs the COUNT
            "QUERY_EVENTS by tag and time range, past the end (COUNT)",
            [{"tag_ts"}],
            da(
                alice,
                {
                    "type": "QUERY_EVENTS",
                    "filter": {
                        "encrypted_tags": ["ours"],
                        "after_timestamp": 1_700_000_000_001,
                        "before_timestamp": 1_700_000_000_007,
                    },
                    "pagination": {"page": 9, "page_size": 2},
                },
            ),
        ),
        (
            "QUERY_EVENTS unprocessed_only",
            [{"event_owner_unprocessed"}],
            da(alice, {"type": "QUERY_EVENTS", "filter": {"unprocessed_only": True}}),
        ),
        (
            "UPDATE_EVENT_TAGS",
            [{"messaging_storedevent_public_id_key"}],
            da(alice, {"type": "UPDATE_EVENT_TAGS", "events": [{"event_id": first_event, "encrypted_tags": ["n"]}]}),
        ),
        (
            "SAVE_EVENTS",
            [nonce, registration],
            da(
                alice,
                {
                    "type": "SAVE_EVENTS",
                    "events": [
                        {
                            "sender_did": bob.did,
                            "recipient_did": alice.did,
                            "timestamp": 5,
                            "payload": "p",
                            "encrypted_tags": ["x"],
                        }
                    ],
                },
            ),
        ),
    ]


def test_every_command_query_is_served_by_an_index(post_a, world, alice, bob):
    cases = []
    for name, must_use, fn in _cases(post_a, world, alice, bob):
        case = Case(name, must_use)
        run_case(case, fn)
        cases.append(case)

    problems = []
    for case in cases:
        used = set()
        for sql, text, nodes in case.plans:
            for node in nodes:
                rel = node.get("Relation Name")
                if node["Node Type"] == "Seq Scan" and rel in BIG_TABLES:
                    problems.append(f"{case.name}: Seq Scan on {rel}\n{sql}\n{text}")
                if node["Node Type"] == "Unknown":
                    problems.append(f"{case.name}: a statement was executed whose SQL Django did not capture")
                if node.get("Index Name"):
                    used.add(node["Index Name"])
        if not _all_required(case):
            problems.append(f"{case.name}: expected {sorted(case.must_use)}, used {sorted(used)}")
        if case.name.startswith("QUERY_EVENTS by tag"):
            problems += _tag_query_problems(case)
        assert case.plans, f"{case.name}: no statement captured"
    if os.environ.get("EXPLAIN_OUT"):
        write_markdown(Path(os.environ["EXPLAIN_OUT"]), cases)
    assert not problems, "\n\n".join(problems)


def _tag_query_problems(case: Case) -> list[str]:
    """QUERY_EVENTS by tag reads the tag rows through the covering `tag_ts` only (order, time
    range and total come from the index) and the events only by primary key, for the page; its
    total (the page statement's window count, or the COUNT past the end) never touches
    messaging_storedevent (apps/messaging/eventquery.py)."""
    problems, totals = [], 0
    for sql, text, nodes in case.plans:
        if "messaging_eventtag" not in sql:
            continue
        for n in nodes:
            if n.get("Relation Name") == "messaging_eventtag" and (
                n["Node Type"] != "Index Only Scan" or n.get("Index Name") != "tag_ts"
            ):
                problems.append(f"{case.name}: tag rows not read by an Index Only Scan on tag_ts\n{sql}\n{text}")
            if (
                n.get("Relation Name") == "messaging_storedevent"
                and n.get("Index Name") != "messaging_storedevent_pkey"
            ):
                problems.append(f"{case.name}: events read other than by primary key\n{sql}\n{text}")
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (FORMAT JSON) " + sql)
            raw = cur.fetchone()[0]
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        for agg in _nodes(plan, lambda p: p["Node Type"] in ("WindowAgg", "Aggregate")):
            totals += 1
            if any(n.get("Relation Name") == "messaging_storedevent" for n in _nodes(agg, lambda p: True)):
                problems.append(f"{case.name}: the total reads messaging_storedevent\n{sql}\n{text}")
    if ("full page" in case.name or "COUNT" in case.name) and not totals:
        problems.append(f"{case.name}: no total computed")
    return problems


def _nodes(plan: dict, pred) -> list[dict]:
    out = [plan] if pred(plan) else []
    for child in plan.get("Plans", []):
        out += _nodes(child, pred)
    return out


def _all_required(case: Case) -> bool:
    used = {n.get("Index Name") for _, _, nodes in case.plans for n in nodes}
    return all(group & used for group in case.must_use)


def write_markdown(path: Path, cases: list[Case]) -> None:
    lines = [
        "# Indexes behind every command query",
        "",
        "Generated by `scripts/explain_queries.py`, which runs `tests/decentrl/test_indexes.py` with",
        f"`EXPLAIN_OUT` set. The test seeds the messaging tables with {OWNERS} other identities x {PER_OWNER} rows",
        "each (contracts, contract requests, pending events half acknowledged, stored events with two",
        "tags each, nonces), runs `ANALYZE` and leaves `enable_seqscan` on. It then captures the SQL each",
        "command really executes through `POST /` and asks PostgreSQL 15 for its plan. The test fails if a",
        "plan has a Seq Scan on a messaging or nonce table, or misses the index named for the command.",
        "",
        "The tenant lookup by Host (`tenants_tenant`, a handful of rows, cached per process in",
        "production) is not listed. Statements repeated by later commands (the nonce insert, the",
        "registration check) are shown once.",
        "",
        "DIDComm's queue (`didcomm_queuedmessage`, apps/didcomm) is not among these commands. Its indexes:",
        "the primary key, `message_id` (unique), `didcomm_queue_client` (mediation, id),",
        "`didcomm_queue_recipient` (recipient, id), `didcomm_queue_expiry` and the tenant foreign key's.",
        "The mediation and recipient foreign keys have no index of their own (didcomm migration 0007: the",
        "two composite indexes lead with them and serve the lookups and cascades), so a forward writes six",
        "index entries, not eight.",
        "",
        "QUERY_EVENTS by tag (apps/messaging/eventquery.py) reads the tag rows through `tag_ts` =",
        "(tenant, owner_did, tag, timestamp, event) alone: `messaging_eventtag.timestamp` is a copy of",
        "the event's timestamp (written by SAVE_EVENTS and UPDATE_EVENT_TAGS, filled for old rows by",
        "migration 0004, checked by tests/messaging/test_eventquery.py), so the distinct matches, the",
        "time range, the (timestamp, id) order and the total all come from the index, and only the",
        "page's events are read, by primary key. The total is a window count in the page statement;",
        "only an empty page past the end runs the COUNT. This test fails if the tag rows are read",
        "other than by an Index Only Scan on `tag_ts` or if a total reads `messaging_storedevent`. A",
        "single tag is bound as `tag = $n` (several as `= ANY($n)`): with `= ANY` PostgreSQL never",
        "adopted the generic plan of the prepared statements and re-planned them on every execution.",
        "",
        "| Command | Expected index | Indexes in its plans |",
        "|---|---|---|",
    ]
    for case in cases:
        used = sorted({n["Index Name"] for _, _, nodes in case.plans for n in nodes if n.get("Index Name")})
        expected = "; ".join(" or ".join(f"`{x}`" for x in sorted(g)) for g in case.must_use)
        lines.append(f"| {case.name} | {expected} | {', '.join(f'`{u}`' for u in used)} |")
    lines.append("")
    seen: set[str] = set()
    for case in cases:
        lines += [f"## {case.name}", ""]
        for sql, text, _ in case.plans:
            shape = re.sub(r"'[^']*'|\b\d+\b", "?", sql)
            if shape in seen:
                lines += [f"- (plan shown above) `{_short(sql)[:90]}…`", ""]
                continue
            seen.add(shape)
            lines += ["```sql", _short(sql), "```", "", "```", _short(text), "```", ""]
    path.write_text("\n".join(lines))


def _short(sql: str) -> str:
    """Long literal DIDs make the SQL unreadable: shorten them."""
    return re.sub(r"'(did:[a-z]+:[^':]{0,12})[^']*'", lambda m: f"'{m.group(1)}…'", sql)
