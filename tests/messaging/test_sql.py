"""The messaging database seam (apps/messaging/sql.py) against one model of its answers.

The queue depth equals a brute-force count of the unacknowledged rows after enqueues,
acknowledgements, deletes and purges; the prepared cursor runs the shared statements; and
`serialise` makes concurrent holders of one key take turns until their transactions end.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import DatabaseError, ProgrammingError, connection, connections, transaction
from django.utils import timezone

from apps.messaging import services, sql
from apps.messaging.models import Contract, PendingEvent
from apps.wire.envelope import Pagination
from tests.support.pglocks import another_session_waits_for_a_lock


def _enqueue(tenant, recipient_did: str, payload: str) -> None:
    PendingEvent.objects.create(tenant=tenant, recipient_did=recipient_did, sender_did="did:example:s", payload=payload)


def model_depth(tenant_id: int, did: str) -> int:
    """The rule, by brute force over every row: unacknowledged pending events of that recipient."""
    rows = PendingEvent.objects.values_list("tenant_id", "recipient_did", "acknowledged_at")
    return sum(1 for t, d, acked in rows if t == tenant_id and d == did and acked is None)


@pytest.mark.django_db
def test_queue_depth_equals_the_count_of_unacknowledged_rows_after_every_change(tenant_a, tenant_b):
    bob, carol = "did:example:bob", "did:example:carol"
    pairs = [(tenant_a.pk, bob), (tenant_a.pk, carol), (tenant_b.pk, bob), (tenant_a.pk, "did:example:nobody")]

    def check(step: str) -> None:
        got = [sql.queue_depth(tenant_id=t, did=d) for t, d in pairs]
        assert got == [model_depth(t, d) for t, d in pairs], step

    check("empty")
    for i in range(5):
        _enqueue(tenant_a, bob, f"p{i}")
    _enqueue(tenant_a, carol, "c")
    _enqueue(tenant_b, bob, "b")
    check("enqueued")
    assert [sql.queue_depth(tenant_id=t, did=d) for t, d in pairs] == [5, 1, 1, 0]
    ids = [
        str(p)
        for p in PendingEvent.objects.filter(recipient_did=bob, tenant=tenant_a).values_list("public_id", flat=True)
    ]
    # carol cannot acknowledge bob's events: nothing changes for either
    assert services.pending_events_acknowledge(tenant=tenant_a, did=carol, ids=ids[:2]) == 0
    check("someone else's acknowledgement")
    assert services.pending_events_acknowledge(tenant=tenant_a, did=bob, ids=ids[:2]) == 2
    assert services.pending_events_acknowledge(tenant=tenant_a, did=bob, ids=ids[:2]) == 0
    check("acknowledged")
    PendingEvent.objects.filter(public_id=ids[0]).delete()  # an acknowledged row goes: no change
    PendingEvent.objects.filter(public_id=ids[4]).delete()  # an unacknowledged one: one less
    check("deleted")
    PendingEvent.objects.bulk_create(
        [PendingEvent(tenant=tenant_a, recipient_did=carol, sender_did="did:example:s", payload="x") for _ in range(3)]
    )
    check("bulk")
    PendingEvent.objects.filter(recipient_did=carol).update(acknowledged_at=timezone.now(), payload="")
    check("acknowledged in bulk")
    assert [sql.queue_depth(tenant_id=t, did=d) for t, d in pairs] == [2, 0, 1, 0]


@pytest.mark.django_db
def test_the_pending_total_reads_the_depth(tenant_a):
    for i in range(3):
        _enqueue(tenant_a, "did:example:r", str(i))
    page = services.pending_events_query(
        tenant=tenant_a, did="did:example:r", sender_did=None, page=Pagination(page=0, page_size=2)
    )
    assert ([i["payload"] for i in page.items], page.total) == (["0", "1"], 3)
    page = services.pending_events_query(
        tenant=tenant_a, did="did:example:r", sender_did=None, page=Pagination(page=7, page_size=2)
    )
    assert (page.items, page.total) == ([], 3)


@pytest.mark.django_db
def test_the_cursor_runs_the_shared_registration_statement(tenant_a):
    now = int(time.time())
    did = "did:example:x"
    for expires_at, want in ((now + 60, True), (now, False)):
        Contract.objects.all().delete()
        Contract.objects.create(
            tenant=tenant_a, owner_did=did, requestor_did=did, recipient_did=tenant_a.did, expires_at=expires_at,
            contract_hash=uuid.uuid4().hex, signed_contract="{}",
        )  # fmt: skip
        with sql.prepared_cursor() as cur:
            cur.execute(
                f"SELECT {sql.REGISTERED}, %s",
                [*sql.registered_params(tenant_id=tenant_a.pk, tenant_did=tenant_a.did, did=did, now_s=now), "écho"],
            )
            assert [bool(v) if i == 0 else v for i, v in enumerate(cur.fetchone())] == [want, "écho"]


def _hold(key: str, events: list[str], entered: threading.Event, release: threading.Event) -> None:
    """Hold `key` from `entered` until `release` is set (the test says when, not a clock)."""
    try:
        with transaction.atomic():
            sql.serialise(key)
            entered.set()
            events.append(f"{key} first in")
            assert release.wait(30)
            events.append(f"{key} first out")
    finally:
        connection.close()


def _second(key: str, events: list[str]) -> None:
    try:
        with transaction.atomic():
            sql.serialise(key)
            events.append(f"{key} second in")
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_holders_of_one_key_take_turns_until_the_transaction_ends(tenant_a):
    """A second holder of the key gets in only after the first transaction ended: it is seen
    waiting for the lock while the first holds it, and gets in once the first lets go."""
    events: list[str] = []
    entered, release = threading.Event(), threading.Event()
    first = threading.Thread(target=_hold, args=("public:1:did", events, entered, release))
    first.start()
    try:
        assert entered.wait(10)
        second = threading.Thread(target=_second, args=("public:1:did", events))
        second.start()
        assert another_session_waits_for_a_lock()
        assert events == ["public:1:did first in"]
    finally:
        release.set()
    first.join(10)
    second.join(10)
    assert events == ["public:1:did first in", "public:1:did first out", "public:1:did second in"]


@pytest.mark.django_db(transaction=True)
def test_holders_of_different_keys_never_wait(tenant_a):
    """The second key's holder gets in while the first key is still held (released only after)."""
    events: list[str] = []
    entered, release = threading.Event(), threading.Event()
    first = threading.Thread(target=_hold, args=("public:1:a", events, entered, release))
    first.start()
    try:
        assert entered.wait(10)
        second = threading.Thread(target=_second, args=("public:1:b", events))
        second.start()
        second.join(10)
        assert events == ["public:1:a first in", "public:1:b second in"]
    finally:
        release.set()
    first.join(10)
    assert events == ["public:1:a first in", "public:1:b second in", "public:1:a first out"]


@pytest.mark.django_db
def test_db_prepared_statements_0_sends_the_same_statements_unprepared(settings, tenant_a):
    def run() -> tuple[str, list]:
        with sql.prepared_cursor() as cur:
            cur.execute("SELECT %s::int + 1, %s", [41, "x"])
            return type(cur.cursor).__name__, list(cur.fetchone())

    assert run() == ("_PreparedCursor", [42, "x"])
    settings.DB_PREPARED_STATEMENTS = False
    assert run() == ("Cursor", [42, "x"])  # Django's own (client-side binding)


@pytest.mark.django_db(transaction=True)
def test_the_prepared_cursor_is_kept_per_connection_and_acts_as_django_s_cursor():
    first = sql.prepared_cursor()
    with first as cur:
        cur.execute("SELECT %s::int * 2", [21])
        assert cur.fetchone() == (42,)
    # The same cursor for the connection's next statement, none built per statement.
    assert sql.prepared_cursor() is first
    # Django's error translation: Django's exception classes, not psycopg's.
    with pytest.raises(ProgrammingError) as raised, sql.prepared_cursor() as cur:
        cur.execute("SELECT no_such_column FROM protocol_nonce", [])
    assert isinstance(raised.value, DatabaseError)
    # Execute wrappers see every statement, with the connection and the cursor in their context.
    seen = []

    def spy(execute, sql_text, params, many, context):
        seen.append((sql_text, list(params), many, context["connection"] is connections["default"]))
        return execute(sql_text, params, many, context)

    with connection.execute_wrapper(spy), sql.prepared_cursor() as cur:
        cur.execute("SELECT %s::text", ["w"])
        assert cur.fetchall() == [("w",)]
    assert seen == [("SELECT %s::text", ["w"], False, True)]
    # A new connection gets a new cursor (the kept one belonged to the closed connection).
    connection.close()
    with sql.prepared_cursor() as cur:
        cur.execute("SELECT 1", [])
        assert cur.fetchone() == (1,)
    assert cur is not first and cur.cursor.connection is connection.connection
