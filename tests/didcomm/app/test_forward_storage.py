"""The forward's statement (apps/didcomm/forward.py `store`) against one model of the rule
(stored, evicted count, reject, unknown recipient, revoked grant, other tenant, TTL, the v1 outbound
row), the exact cap under concurrent forwards, the after-commit wake with the stored text, and
the per-recipient depth counter the forward's cap reads (migration 0005's triggers):
equal to the real count after every kind of write, filled by the migration, no deadlock between an
evicting forward and a concurrent messages-received."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count
from django.utils import timezone

from apps.didcomm import forward as storage
from apps.didcomm import mediation, queue
from apps.didcomm.identity import identity_current
from apps.didcomm.models import (
    Connection,
    DidcommPolicy,
    Mediation,
    Outbound,
    QueueDepth,
    QueuedMessage,
    RecipientKey,
    presence_key,
)
from apps.didcomm.policy import policy_for
from apps.didcomm.problems import Problem
from apps.didcomm.protocols import Code
from apps.didcomm.recipients import did_hash
from apps.messaging import presence
from apps.messaging.models import PendingQueueDepth
from apps.messaging.notify import push_requested
from apps.tenants.services import Actor
from tests.support.pglocks import another_session_waits_for_a_lock

RECIPIENT = "did:example:recipient"


def _grant(tenant, client="did:example:client", recipient=RECIPIENT, state=Mediation.State.GRANTED, connection=None):
    mediation = Mediation.objects.create(
        tenant=tenant, client_did=client, client_hash=did_hash(client), state=state, connection=connection
    )
    return RecipientKey.objects.create(
        tenant=tenant, mediation=mediation, recipient_did=recipient, lookup_hash=did_hash(recipient)
    )


def _preload(rk: RecipientKey, n: int) -> list[int]:
    now = timezone.now()
    return [
        QueuedMessage.objects.create(
            tenant_id=rk.tenant_id, mediation=rk.mediation, recipient=rk, data=f'{{"n":{i}}}', size=7,
            received_at=now, expires_at=now + timedelta(hours=1),
        ).pk
        for i in range(n)
    ]  # fmt: skip


def _request(tenant_id: int, *, cap=1000, reject=False, lookup=RECIPIENT, data='{"json":{"x":1}}', outbound=True):
    now = timezone.now()
    return storage.ForwardRequest(
        tenant_id=tenant_id,
        lookup_hash=did_hash(lookup),
        cap=cap,
        reject=reject,
        message_id=uuid.uuid4(),
        data=data,
        now=now,
        expires_at=now + timedelta(hours=72),
        outbound=outbound,
    )


def oracle(queue: list[int], *, known: bool, cap: int, reject: bool) -> tuple[str, int, list[int]]:
    """The rule, in plain Python: (outcome, evicted, the ids of the queue that stay)."""
    if not known:
        return "unknown", 0, queue
    if len(queue) >= cap:
        if reject:
            return "full", 0, queue
        gone = len(queue) - cap + 1
        return "stored", gone, queue[gone:]
    return "stored", 0, queue


@pytest.mark.django_db
@pytest.mark.parametrize(("depth", "cap", "reject"), list(itertools.product(range(5), (1, 2, 3), (False, True))))
def test_the_forward_follows_the_oracle_for_the_cap(tenant_a, depth, cap, reject):
    rk = _grant(tenant_a)
    queue = _preload(rk, depth)
    req = _request(tenant_a.pk, cap=cap, reject=reject)
    done = storage.store(req)
    outcome, evicted, kept = oracle(queue, known=True, cap=cap, reject=reject)
    rows = list(QueuedMessage.objects.filter(recipient=rk).order_by("id").values_list("id", "message_id"))
    if outcome == "stored":
        assert done == storage.ForwardStored("stored", evicted, "did:example:client", None)
        assert [pk for pk, _ in rows] == [*kept, rows[-1][0]] and rows[-1][1] == req.message_id
    else:
        assert done == storage.ForwardStored("full")
        assert [pk for pk, _ in rows] == kept


@pytest.mark.django_db
def test_the_forward_stores_the_row_exactly(tenant_a):
    rk = _grant(tenant_a)
    req = _request(tenant_a.pk, data='{"base64":"AAAA"}')
    assert storage.store(req) == storage.ForwardStored("stored", 0, "did:example:client", None)
    row = QueuedMessage.objects.get()
    assert (row.tenant_id, row.mediation_id, row.recipient_id) == (tenant_a.pk, rk.mediation_id, rk.pk)
    assert (row.message_id, row.data, row.size) == (req.message_id, '{"base64":"AAAA"}', 17)
    assert (row.received_at, row.expires_at) == (req.now, req.expires_at)  # the TTL
    assert row.expires_at - row.received_at == timedelta(hours=72)


@pytest.mark.django_db
@pytest.mark.parametrize("case", ["unknown", "revoked", "denied", "other-tenant"])
def test_the_forward_finds_only_a_granted_recipient_of_the_tenant(tenant_a, tenant_b, case):
    if case == "revoked":
        _grant(tenant_a, state=Mediation.State.REVOKED)
    elif case == "denied":
        _grant(tenant_a, state=Mediation.State.DENIED)
    elif case == "other-tenant":
        _grant(tenant_b)
    else:
        _grant(tenant_a, recipient="did:example:someone-else")
    assert storage.store(_request(tenant_a.pk)) == storage.ForwardStored("unknown")
    assert QueuedMessage.objects.count() == 0 and Outbound.objects.count() == 0


def _v1_connection(tenant, endpoint: str) -> Connection:
    identity = identity_current(tenant=tenant)
    return Connection.objects.create(
        tenant=tenant, identity=identity, their_did="did:example:agent", their_verkey="verkey", endpoint=endpoint,
        thread_id="t", protocol="didexchange/1.1", state=Connection.State.COMPLETED,
    )  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("endpoint", "json_data", "expected"), [("http://agent/", True, 1), ("", True, 0), ("http://agent/", False, 0)]
)
def test_the_forward_makes_the_v1_outbound_row(tenant_a, endpoint, json_data, expected):
    _grant(tenant_a, connection=_v1_connection(tenant_a, endpoint))
    req = _request(tenant_a.pk, outbound=json_data)
    done = storage.store(req)
    assert done.outcome == "stored" and Outbound.objects.count() == expected
    if expected:
        out = Outbound.objects.get()
        assert done.outbound_id == out.pk
        assert (out.queued.message_id, out.body, out.attempts, out.expires_at) == (
            req.message_id,
            "",
            0,
            req.expires_at,
        )
        assert out.connection.endpoint == endpoint
    else:
        assert done.outbound_id is None


@pytest.mark.django_db(transaction=True)
def test_the_forward_evicts_a_message_with_its_v1_outbound_row(tenant_a):
    """Committed for real (the outbound row's foreign key is checked at commit)."""
    _grant(tenant_a, connection=_v1_connection(tenant_a, "http://agent/"))
    first = storage.store(_request(tenant_a.pk, cap=1))
    req = _request(tenant_a.pk, cap=1)
    second = storage.store(req)
    assert (first.outcome, second.outcome, second.evicted) == ("stored", "stored", 1)
    assert list(QueuedMessage.objects.values_list("message_id", flat=True)) == [req.message_id]
    assert list(Outbound.objects.values_list("id", "queued__message_id")) == [(second.outbound_id, req.message_id)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reject", [False, True])
def test_the_cap_holds_exactly_under_concurrent_forwards(tenant_a, reject):
    rk = _grant(tenant_a)
    results: list[storage.ForwardStored] = []
    lock = threading.Lock()

    def send():
        try:
            for _ in range(5):
                done = storage.store(_request(tenant_a.pk, cap=3, reject=reject))
                with lock:
                    results.append(done)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert QueuedMessage.objects.filter(recipient=rk).count() == 3
    assert _counted() == _real() == {rk.pk: 3}
    stored = [r for r in results if r.outcome == "stored"]
    if reject:
        assert len(stored) == 3 and sum(r.evicted for r in stored) == 0
    else:
        assert len(stored) == 30 and sum(r.evicted for r in stored) == 27


# --- the depth counter (PostgreSQL: migration 0005's triggers on didcomm_queuedmessage) ---------


def _counted() -> dict[int, int]:
    return dict(QueueDepth.objects.values_list("recipient_id", "depth"))


def _real() -> dict[int, int]:
    rows = QueuedMessage.objects.filter(recipient__isnull=False).values("recipient_id").annotate(n=Count("id"))
    return {r["recipient_id"]: r["n"] for r in rows}


def _message_ids(rk: RecipientKey, n: int) -> list[str]:
    return [
        str(m)
        for m in QueuedMessage.objects.filter(recipient=rk).order_by("id").values_list("message_id", flat=True)[:n]
    ]


@pytest.mark.django_db
def test_the_depth_counter_equals_the_real_count_after_every_write(tenant_a, tenant_b):
    a = _grant(tenant_a)
    b = _grant(tenant_a, client="did:example:client-2", recipient="did:example:recipient-2")
    c = _grant(tenant_b)
    _preload(a, 4), _preload(b, 2), _preload(c, 1)
    assert _counted() == _real() == {a.pk: 4, b.pk: 2, c.pk: 1}
    # forwards, the last two evicting one each; a refused one changes nothing
    assert [storage.store(_request(tenant_a.pk, cap=5)).evicted for _ in range(3)] == [0, 1, 1]
    assert storage.store(_request(tenant_a.pk, cap=5, reject=True)) == storage.ForwardStored("full")
    assert _counted() == _real() == {a.pk: 5, b.pk: 2, c.pk: 1}
    # a message of ours to the client itself (no recipient) is not counted
    now = timezone.now()
    QueuedMessage.objects.create(
        tenant=tenant_a, mediation=a.mediation, recipient=None, data="{}", size=2, expires_at=now + timedelta(hours=1)
    )
    assert _counted() == _real() == {a.pk: 5, b.pk: 2, c.pk: 1}
    # messages-received: two of a's (and one id that is not ours); then all of b's: b's row goes
    assert queue.messages_received(mediation=a.mediation, ids=[*_message_ids(a, 2), "nope"]) == 2
    assert queue.messages_received(mediation=b.mediation, ids=_message_ids(b, 2)) == 2
    assert _counted() == _real() == {a.pk: 3, c.pk: 1}
    # TTL purge across recipients and tenants
    expired = [
        QueuedMessage.objects.filter(recipient=a).order_by("id")[0].pk,
        QueuedMessage.objects.get(recipient=c).pk,
    ]
    QueuedMessage.objects.filter(pk__in=expired).update(expires_at=now - timedelta(seconds=1))
    assert queue.messages_purge_expired(tenant=None, now=timezone.now(), dry_run=False) == 2
    assert _counted() == _real() == {a.pk: 2}
    # a forward after the purge counts from there; c's row comes back
    assert storage.store(_request(tenant_b.pk, cap=5)).outcome == "stored"
    assert _counted() == _real() == {a.pk: 2, c.pk: 1}
    # revoke: the recipient and its queue go, and the counter row with them
    mediation.mediation_revoke(mediation=a.mediation, actor=Actor(None, "test"))
    assert _counted() == _real() == {c.pk: 1}
    # cascade: the recipient's deletion (the collector deletes its messages), then the tenant's
    _preload(b, 3)
    assert _counted() == _real() == {b.pk: 3, c.pk: 1}
    RecipientKey.objects.filter(pk=b.pk).delete()
    assert _counted() == _real() == {c.pk: 1}
    type(tenant_b).objects.filter(pk=tenant_b.pk).delete()
    assert _counted() == _real() == {}


@pytest.mark.django_db
def test_the_cap_reads_the_counter(tenant_a):
    """The PostgreSQL forward takes its depth from the counter row: a forged counter moves the cap."""
    rk = _grant(tenant_a)
    _preload(rk, 1)
    QueueDepth.objects.filter(recipient_id=rk.pk).update(depth=3)
    assert storage.store(_request(tenant_a.pk, cap=3, reject=True)) == storage.ForwardStored("full")
    assert storage.store(_request(tenant_a.pk, cap=4)) == storage.ForwardStored("stored", 0, "did:example:client", None)
    assert _counted() == {rk.pk: 4} and _real() == {rk.pk: 2}


@pytest.mark.django_db(transaction=True)
def test_an_evicting_forward_and_a_concurrent_messages_received_do_not_deadlock(tenant_a):
    rk = _grant(tenant_a)
    _preload(rk, 4)
    errors: list[BaseException] = []
    stop = threading.Event()
    outcomes: list[str] = []

    def forwards():
        try:
            for _ in range(60):
                outcomes.append(storage.store(_request(tenant_a.pk, cap=4)).outcome)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            stop.set()
            connection.close()

    def received():
        try:
            while not stop.is_set():
                # the oldest messages, the ones the next eviction takes too
                queue.messages_received(mediation=rk.mediation, ids=_message_ids(rk, 2))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=forwards), threading.Thread(target=forwards), threading.Thread(target=received)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert outcomes == ["stored"] * 120
    assert _counted() == _real() and _real().get(rk.pk, 0) <= 4


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_counter_from_the_queued_rows(tenant_a):
    before = [("didcomm", "0004_forward_store_function")]
    after = [("didcomm", "0005_queue_depth")]
    a = _grant(tenant_a)
    b = _grant(tenant_a, client="did:example:client-2", recipient="did:example:recipient-2")
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(before)
        _preload(a, 3), _preload(b, 1)
        QueuedMessage.objects.create(
            tenant=tenant_a, mediation=a.mediation, recipient=None, data="{}", size=2, expires_at=timezone.now()
        )
        MigrationExecutor(connection).migrate(after)
        assert _counted() == _real() == {a.pk: 3, b.pk: 1}
        # The forward of today's code calls today's function (0008's result columns).
        MigrationExecutor(connection).migrate(leaves)
        assert storage.store(_request(tenant_a.pk, cap=3)).evicted == 1
        assert _counted() == _real() == {a.pk: 3, b.pk: 1}
    finally:
        MigrationExecutor(connection).migrate(leaves)


@pytest.mark.django_db
def test_a_stored_forward_writes_six_index_entries_and_keeps_its_text_in_the_row(tenant_a):
    """Migration 0007: no single-column index on the mediation and recipient foreign keys (the
    composite ones lead with them), and the stored text stays in the row (STORAGE MAIN), so a
    2.4 KB forward writes nothing to the TOAST table."""
    a = _grant(tenant_a)
    data = json.dumps({"ciphertext": base64.b64encode(os.urandom(1800)).decode()})  # 2,418 bytes, as a JWE
    stored = storage.store(_request(tenant_a.pk, data=data))
    assert stored.outcome == storage.STORED
    with connection.cursor() as cur:
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'didcomm_queuedmessage' ORDER BY 1")
        assert [r[0] for r in cur.fetchall()] == [
            "didcomm_queue_client",
            "didcomm_queue_expiry",
            "didcomm_queue_recipient",
            "didcomm_queuedmessage_message_id_key",
            "didcomm_queuedmessage_pkey",
            "didcomm_queuedmessage_tenant_id_10cf1e67",
        ]
        cur.execute(
            "SELECT a.attstorage, c.reltoastrelid::regclass::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relname = 'didcomm_queuedmessage' AND a.attname = 'data'"
        )
        attstorage, toast = cur.fetchone()
        assert attstorage == "m"
        cur.execute(f"SELECT count(*) FROM {toast}")
        assert cur.fetchone() == (0,)
        cur.execute(
            "SELECT length(data), pg_column_size(data) FROM didcomm_queuedmessage WHERE recipient_id = %s", [a.pk]
        )
        assert cur.fetchone() == (len(data), len(data) + 4)


# --- the service: wake after commit, with the stored text --------------------------------------


@pytest.fixture
def pushes():
    seen: list[dict] = []

    def receiver(sender, tenant_id, did, message, **kwargs):
        seen.append({"tenant_id": tenant_id, "did": did, "message": message})

    push_requested.connect(receiver, dispatch_uid="test-forward-storage")
    yield seen
    push_requested.disconnect(dispatch_uid="test-forward-storage")


def _client_live(tenant, client="did:example:client") -> None:
    """A socket of the client in live mode (apps/messaging/presence.py): forwards to it wake it."""
    presence.socket_entered(tenant_id=tenant.pk, did=presence_key(did_hash(client)), now_s=_now_s())


def _store(tenant, policy, next_did: str, data: dict) -> str:
    """storage.store_forward for `next_did` on `tenant` under `policy`: the stored message's id."""
    ctx = SimpleNamespace(tenant=tenant, policy=policy, code="SUCCESS", extra={})
    return storage.store_forward(ctx, next_did, data)


@pytest.mark.django_db
def test_the_wake_carries_the_stored_text_up_to_64_kib(tenant_a, pushes, django_capture_on_commit_callbacks):
    _grant(tenant_a)
    _client_live(tenant_a)
    policy = policy_for(tenant=tenant_a)
    small = {"json": {"protected": "x" * 100}}
    with django_capture_on_commit_callbacks(execute=True):
        stored = _store(tenant_a, policy, RECIPIENT, small)
    text = QueuedMessage.objects.get(message_id=stored).data
    assert text == json.dumps(small, separators=(",", ":"))
    assert pushes == [
        {
            "tenant_id": tenant_a.pk,
            "did": "did:example:client",
            "message": {
                "type": queue.WAKE,
                "ids": [stored],
                "items": [{"id": stored, "data": text}],
            },
        }
    ]
    pushes.clear()
    exact = {"base64": "A" * (queue.WAKE_ITEMS_MAX - len('{"base64":""}'))}
    big = {"base64": "A" * (queue.WAKE_ITEMS_MAX - len('{"base64":""}') + 1)}
    with django_capture_on_commit_callbacks(execute=True):
        at_limit = _store(tenant_a, policy, RECIPIENT, exact)
        over = _store(tenant_a, policy, RECIPIENT, big)
    assert [p["message"].get("items", [{}])[0].get("id") for p in pushes] == [at_limit, None]
    assert pushes[1]["message"] == {"type": queue.WAKE, "ids": [over]}


@pytest.mark.django_db
def test_nothing_is_pushed_before_the_commit_nor_for_an_unknown_or_full_queue(
    tenant_a, pushes, django_capture_on_commit_callbacks
):
    _grant(tenant_a)
    _client_live(tenant_a)
    DidcommPolicy.objects.filter(tenant=tenant_a).delete()
    policy = policy_for(tenant=tenant_a)
    policy.queue_cap, policy.overflow = 1, DidcommPolicy.Overflow.REJECT
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert _store(tenant_a, policy, RECIPIENT, {"base64": "AA"})
        assert pushes == []
        with pytest.raises(Problem) as full:
            _store(tenant_a, policy, RECIPIENT, {"base64": "AA"})
        assert (full.value.code, full.value.status) == (Code.STORAGE_FULL, 507)
        for nobody in ("did:example:nobody", "not a did"):
            with pytest.raises(Problem) as unknown:
                _store(tenant_a, policy, nobody, {})
            assert unknown.value.code == Code.NOT_FOUND
    assert len(callbacks) == 1 and pushes == []


# --- the wake only for a client that may be live (apps/messaging/presence.py) -------------------


def _now_s() -> int:
    return int(timezone.now().timestamp())


@pytest.mark.django_db
def test_the_wake_leaves_only_for_a_client_that_may_be_live(tenant_a, pushes, django_capture_on_commit_callbacks):
    _grant(tenant_a)
    policy = policy_for(tenant=tenant_a)

    def forward() -> list[str]:
        pushes.clear()
        with django_capture_on_commit_callbacks(execute=True):
            _store(tenant_a, policy, RECIPIENT, {"base64": "AA"})
        return [p["did"] for p in pushes]

    client = "did:example:client"
    key = presence_key(did_hash(client))
    assert not PendingQueueDepth.objects.filter(recipient_did=key).exists()
    assert forward() == []  # no presence row: the store makes it, with nobody live
    assert PendingQueueDepth.objects.filter(tenant=tenant_a, recipient_did=key).values_list("live", "depth").get() == (
        0,
        0,
    )
    presence.socket_entered(tenant_id=tenant_a.pk, did=key, now_s=_now_s())
    assert forward() == [client]
    presence.socket_left(tenant_id=tenant_a.pk, did=key)
    assert forward() == []  # nobody live
    PendingQueueDepth.objects.filter(tenant=tenant_a, recipient_did=key).delete()
    presence.socket_entered(tenant_id=tenant_a.pk, did=key, now_s=_now_s() - presence.lease_s() - 1)
    assert forward() == []  # a count nobody renewed
    for other in (client, presence_key(did_hash(RECIPIENT))):  # the client's DID itself, the recipient's key
        presence.socket_entered(tenant_id=tenant_a.pk, did=other, now_s=_now_s())
    assert forward() == []
    assert QueuedMessage.objects.filter(tenant=tenant_a).count() == 5  # stored whatever was woken


@pytest.mark.django_db(transaction=True)
def test_a_client_going_live_during_a_forward_is_seen_or_finds_it_in_its_backlog(tenant_a):
    """The function reads the client's presence row under a share lock after storing: a socket's
    presence write that is not committed yet is waited for and read; one that comes after the
    forward waits for the forward's commit (so the backlog read that follows sees the message)."""
    client = presence_key(did_hash("did:example:client"))
    _grant(tenant_a)
    presence.socket_entered(tenant_id=tenant_a.pk, did=client, now_s=_now_s())
    presence.socket_left(tenant_id=tenant_a.pk, did=client)  # the row exists, nobody live
    box: dict = {}

    def forward_in_thread():
        try:
            box["stored"] = storage.store(_request(tenant_a.pk))
        finally:
            connections.close_all()

    with transaction.atomic():
        presence.socket_entered(tenant_id=tenant_a.pk, did=client, now_s=_now_s())
        thread = threading.Thread(target=forward_in_thread)
        thread.start()
        assert another_session_waits_for_a_lock(), "the forward did not wait for the presence row"
    thread.join(10)
    assert box["stored"].outcome == storage.STORED and box["stored"].may_have_socket is True

    presence.socket_left(tenant_id=tenant_a.pk, did=client)
    with transaction.atomic():
        request = _request(tenant_a.pk)
        stored = storage.store(request)
        assert stored.may_have_socket is False

        def going_live():
            try:
                presence.socket_entered(tenant_id=tenant_a.pk, did=client, now_s=_now_s())
                box["backlog"] = set(QueuedMessage.objects.filter(tenant=tenant_a).values_list("message_id", flat=True))
            finally:
                connections.close_all()

        thread = threading.Thread(target=going_live)
        thread.start()
        assert another_session_waits_for_a_lock(), "going live did not wait for the forward's commit"
    thread.join(10)
    assert request.message_id in box["backlog"] and len(box["backlog"]) == 2


def test_the_latest_migration_applying_the_forward_function_names_the_codes_text():
    """A change of sql.FORWARD_FUNCTION reaches a deployed database only by a new migration
    applying it: the latest migration that declares FORWARD_FUNCTION_SHA256 names the code's text."""
    folder = Path(__file__).resolve().parents[3] / "apps" / "didcomm" / "migrations"
    declared = [
        line.split('"')[1]
        for path in sorted(folder.glob("0*.py"))
        for line in path.read_text().splitlines()
        if line.startswith("FORWARD_FUNCTION_SHA256 = ")
    ]
    assert declared[-1] == hashlib.sha256(storage.FORWARD_FUNCTION.encode()).hexdigest()


@pytest.mark.django_db
def test_the_database_runs_the_function_in_code():
    with connection.cursor() as cur:
        cur.execute("SELECT prosrc FROM pg_proc WHERE proname = 'didcomm_forward_store'")
        [(body,)] = cur.fetchall()
    assert body == storage.FORWARD_FUNCTION.split("$$")[1]
