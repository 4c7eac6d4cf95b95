"""Metering: every command through the one dispatch path leaves one metadata-only row."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from django.db import connection

from apps.usage import metering, records
from apps.usage.models import CommandMeter
from apps.wire.canonical import canonical_bytes
from tests.support.entry import Poster
from tests.support.registration import contract_both_ways, register

pytestmark = pytest.mark.django_db


def query_events(who, tenant) -> dict:
    return who.sign_command(recipient_did=tenant.did, payload={"type": "QUERY_EVENTS", "filter": {}})


def test_a_command_is_metered_with_its_metadata_and_nothing_else(post_a, tenant_a, alice, bob):
    register(post_a, alice, tenant_a)
    envelope = query_events(alice, tenant_a)
    body = canonical_bytes(envelope)
    status, reply = post_a.raw(body)
    assert status == 200
    metering.flush()
    rows = list(CommandMeter.objects.filter(tenant=tenant_a).order_by("id"))
    assert [(r.command_type, r.code, r.http_status) for r in rows] == [
        ("REQUEST_COMMUNICATION_CONTRACT", "SUCCESS", 200),
        ("QUERY_EVENTS", "SUCCESS", 200),
    ]
    row = rows[1]
    assert (row.transport, row.channel, row.sender_did) == ("http", "DIRECT_AUTHENTICATED", alice.did)
    assert row.bytes_in == len(body)
    assert row.bytes_out == len(canonical_bytes(reply))
    assert 0 < row.duration_ms < 10_000
    # Metadata only: no column holds the signature, the nonce or any payload.
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM usage_commandmeter WHERE id = %s", [row.pk])
        stored = " ".join(str(v) for v in cur.fetchone())
    assert envelope["signature"] not in stored
    assert envelope["header"]["nonce"] not in stored
    assert "filter" not in stored


def test_rejected_commands_are_metered_with_their_error_code(post_a, tenant_a, alice):
    status, _ = post_a.send(query_events(alice, tenant_a))  # alice is not registered
    assert status == 401
    status, _ = post_a.raw(b'{"not": "a command"}')
    assert status == 400
    metering.flush()
    assert list(
        CommandMeter.objects.filter(tenant=tenant_a)
        .order_by("id")
        .values_list("command_type", "code", "http_status", "sender_did")
    ) == [
        # the signature verified: alice did send it
        ("QUERY_EVENTS", "UNAUTHORIZED_COMMAND", 401, alice.did),
        ("", "INVALID_COMMAND", 400, None),
    ]


def test_each_tenant_meters_only_its_own_commands(post_a, post_b, tenant_a, tenant_b, alice, carol):
    post_a.send(query_events(alice, tenant_a))
    post_b.send(query_events(carol, tenant_b))
    post_b.send(query_events(carol, tenant_b))
    metering.flush()
    assert CommandMeter.objects.filter(tenant=tenant_a).count() == 1
    assert list(CommandMeter.objects.filter(tenant=tenant_b).values_list("sender_did", flat=True)) == [
        carol.did,
        carol.did,
    ]


def test_a_command_for_no_tenant_is_not_metered(settings):
    settings.MEDIATOR_DEFAULT_TENANT = ""
    before = CommandMeter.objects.count()
    assert Poster("nobody.example").raw(b"{}")[0] == 404
    metering.flush()
    assert CommandMeter.objects.count() == before


def test_sync_mode_inserts_within_the_request(post_a, tenant_a, alice, settings):
    settings.USAGE_METERING_MODE = "sync"
    post_a.send(query_events(alice, tenant_a))
    assert metering.pending() == 0
    assert CommandMeter.objects.filter(tenant=tenant_a, command_type="QUERY_EVENTS").count() == 1


def test_off_mode_records_nothing(post_a, tenant_a, alice, settings):
    settings.USAGE_METERING_MODE = "off"
    post_a.send(query_events(alice, tenant_a))
    metering.flush()
    assert not CommandMeter.objects.filter(tenant=tenant_a).exists()


def test_a_full_buffer_drops_and_counts_instead_of_growing(post_a, tenant_a, alice, settings):
    settings.USAGE_METERING_MODE = "buffered"
    metering.flush()
    settings.USAGE_METERING_MAX_BUFFER = 0
    dropped = metering.dropped
    post_a.send(query_events(alice, tenant_a))
    assert metering.dropped == dropped + 1
    assert metering.pending() == 0


@pytest.mark.django_db(transaction=True)
def test_the_background_thread_flushes_by_itself(post_a, tenant_a, alice, settings):
    settings.USAGE_METERING_MODE = "buffered"
    post_a.send(query_events(alice, tenant_a))
    deadline = time.time() + 10
    while time.time() < deadline and not CommandMeter.objects.filter(tenant=tenant_a).exists():
        time.sleep(0.05)
    assert CommandMeter.objects.filter(tenant=tenant_a, command_type="QUERY_EVENTS").count() == 1
    metering.flush()


@pytest.mark.django_db(transaction=True)  # the writer thread commits on a connection of its own
def test_buffered_metering_adds_no_query_to_the_command(post_a, tenant_a, alice, settings):
    from django.db import connection as conn
    from django.test.utils import CaptureQueriesContext

    settings.USAGE_METERING_MODE = "buffered"
    metering.flush()
    with CaptureQueriesContext(conn) as ctx:
        post_a.send(query_events(alice, tenant_a))
    assert not [q for q in ctx.captured_queries if "usage_commandmeter" in q["sql"]]
    metering.flush()  # (the writer thread may have been first; either way the row is there now)
    assert CommandMeter.objects.filter(tenant=tenant_a).count() == 1


# -- the writer survives bad rows (issue 13 item 4) ---------------------------------------------


def meter_record(tenant, **fields) -> records.Record:
    values = dict(
        protocol=records.DECENTRL,
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        at=datetime(2026, 3, 1, 12, tzinfo=UTC),
        transport="http",
        channel="DIRECT_AUTHENTICATED",
        command_type="QUERY_EVENTS",
        code="SUCCESS",
        http_status=200,
        bytes_in=700,
        bytes_out=120,
        duration_ms=3.5,
        sender_did="did:decentrl:ok",
        remote_addr="127.0.0.1",
    )
    values.update(fields)
    return records.Record(**values)


def stored_codes(tenant) -> list[str]:
    return list(CommandMeter.objects.filter(tenant=tenant).order_by("id").values_list("code", flat=True))


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.django_db(transaction=True)
def test_a_batch_with_bad_rows_writes_the_good_rows_and_drops_and_counts_the_bad_ones(tenant_a, caplog):
    metering.flush()
    rejected = metering.rejected
    batch = [
        meter_record(tenant_a, code="GOOD_0"),
        meter_record(tenant_a, code="BAD_NUL", sender_did="did:x\x00"),  # PostgreSQL refuses it (no NUL in text)
        meter_record(tenant_a, code="GOOD_1"),
        meter_record(tenant_a, code="GOOD_2"),
        meter_record(tenant_a, code="BAD_RANGE", bytes_in=2**40),  # integer out of range: refused before the COPY
        meter_record(tenant_a, code="GOOD_3"),
        meter_record(tenant_a, code="BAD_TYPE", duration_ms="slow"),  # cannot even be made into a row
        meter_record(tenant_a, code="GOOD_4"),
    ]
    metering._buffer.extend(batch)  # one batch, as the writer drains it
    try:
        metering.flush()
    finally:
        # The writer thread may have taken the batch first; it is committed either way.
        assert wait_for(lambda: metering.pending() == 0 and len(stored_codes(tenant_a)) == 5)
    assert stored_codes(tenant_a) == ["GOOD_0", "GOOD_1", "GOOD_2", "GOOD_3", "GOOD_4"]
    assert metering.rejected == rejected + 3
    # Counted, and logged as a count only: never the row (its DID) nor the database's message.
    dropped_lines = [r.getMessage() for r in caplog.records if r.name == "mediator.usage.metering"]
    assert dropped_lines == ["metering dropped 3 rows that could not be stored"]
    assert not any("did:x" in line for line in caplog.messages)


@pytest.mark.django_db(transaction=True)
def test_a_flush_writes_what_was_buffered_when_it_began_one_copy_per_batch(tenant_a, settings, monkeypatch):
    """Under load commands keep being metered while a batch is written. A flush that chased them
    wrote a string of small COPYs per wake-up, each its own transaction: the writer thread cost
    several times the CPU per command. What arrives during a flush waits for the next."""
    metering.flush()
    flush = metering.flush
    # The writer thread (started by an earlier test) leaves the buffer to this test.
    monkeypatch.setattr(metering, "flush", lambda: 0)
    settings.USAGE_METERING_BATCH = 2
    copies: list[list[str]] = []
    arriving = True

    def recording(rows: list[tuple]) -> None:
        copies.append([row[metering._COLUMNS.index("code")] for row in rows])
        if arriving and len(copies) <= 2:  # a command finishes while each of two batches is written
            metering._buffer.append(meter_record(tenant_a, code=f"DURING_{len(copies)}"))
        real(rows)

    real = metering.copy_rows
    monkeypatch.setattr(metering, "copy_rows", recording)
    metering._buffer.extend(meter_record(tenant_a, code=code) for code in ("A", "B", "C"))
    try:
        assert flush() == 3
        assert copies == [["A", "B"], ["C"]]
        assert stored_codes(tenant_a) == ["A", "B", "C"]
        assert metering.pending() == 2
        arriving = False
        assert flush() == 2
        assert copies[2:] == [["DURING_1", "DURING_2"]]
        assert stored_codes(tenant_a) == ["A", "B", "C", "DURING_1", "DURING_2"]
    finally:
        metering._buffer.clear()


@pytest.mark.django_db(transaction=True)
def test_the_writer_thread_survives_a_bad_row_and_keeps_writing(tenant_a, settings):
    settings.USAGE_METERING_MODE = "buffered"
    metering.flush()
    for record in (
        meter_record(tenant_a, code="BEFORE"),
        meter_record(tenant_a, code="BAD_NUL", sender_did="did:x\x00"),
        meter_record(tenant_a, code="AFTER"),
    ):
        metering.observe(record)
    assert wait_for(lambda: stored_codes(tenant_a) == ["BEFORE", "AFTER"])
    assert metering._thread is not None and metering._thread.is_alive()
    writer = metering._thread
    metering.observe(meter_record(tenant_a, code="LATER"))
    assert wait_for(lambda: stored_codes(tenant_a) == ["BEFORE", "AFTER", "LATER"])
    assert metering._thread is writer  # the same thread wrote it: it never died


@pytest.mark.django_db(transaction=True)
def test_the_writer_thread_survives_any_exception_of_a_flush(tenant_a, settings, monkeypatch):
    settings.USAGE_METERING_MODE = "buffered"
    metering.flush()
    real_flush = metering.flush
    failed = threading.Event()

    def flush_failing_once() -> int:
        if not failed.is_set() and threading.current_thread() is metering._thread:
            failed.set()
            metering._buffer.clear()
            raise KeyError("not a database error")
        return real_flush()

    monkeypatch.setattr(metering, "flush", flush_failing_once)
    metering.observe(meter_record(tenant_a, code="LOST"))
    assert failed.wait(10)
    writer = metering._thread
    # No wait for a death: a writer that died (or is dying) of the exception either is replaced by
    # `observe` (then `_thread is not writer`) or takes LATER with it (then it is never stored).
    metering.observe(meter_record(tenant_a, code="LATER"))
    assert wait_for(lambda: stored_codes(tenant_a) == ["LATER"])
    assert metering._thread is writer and writer.is_alive()


class _CloseSeen:
    """`django.db.connection` for the writer thread, telling when it closed its connection (an idle pass)."""

    def __init__(self, real, seen: threading.Event):
        self._real, self._seen = real, seen

    def close(self) -> None:
        self._real.close()
        self._seen.set()

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.mark.django_db(transaction=True)
def test_the_writer_thread_keeps_its_connection_while_commands_keep_coming(tenant_a, settings, monkeypatch):
    """One connection for a busy stretch (not a new PostgreSQL backend per flush), closed after an
    idle interval; the HTTP tier's persistent connections (DB_CONN_MAX_AGE) as the setting here."""
    from django.db.backends.signals import connection_created

    settings.USAGE_METERING_MODE = "buffered"
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    idle_closed = threading.Event()
    monkeypatch.setattr(metering, "connection", _CloseSeen(connection, idle_closed))
    metering.flush()
    metering._ensure_thread()
    assert idle_closed.wait(10)  # an idle pass: whatever an earlier test left open is closed
    opened = []

    def created(sender, connection, **kwargs):
        if threading.current_thread() is metering._thread:
            opened.append(connection)

    connection_created.connect(created, weak=False)
    try:
        codes: list[str] = []
        for code in ("FIRST", "SECOND", "THIRD"):
            metering.observe(meter_record(tenant_a, code=code))
            codes.append(code)
            assert wait_for(lambda: stored_codes(tenant_a) == codes)
        assert len(opened) == 1
        idle_closed.clear()
        assert idle_closed.wait(10)  # an interval without a command
        metering.observe(meter_record(tenant_a, code="LATER"))
        assert wait_for(lambda: stored_codes(tenant_a) == [*codes, "LATER"])
        assert len(opened) == 2
    finally:
        connection_created.disconnect(created)


# -- only a verified sender is recorded (issue 13 item 9) ---------------------------------------


def _meter_rows(tenant) -> list[tuple]:
    metering.flush()
    return list(
        CommandMeter.objects.filter(tenant=tenant)
        .order_by("id")
        .values_list("channel", "command_type", "code", "http_status", "sender_did")
    )


def test_only_commands_whose_signature_verified_are_metered_with_their_sender(post_a, tenant_a, alice, bob):
    # The signature is verified once, before the nonce is claimed; a replay is never attributed.

    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    metering.flush()
    CommandMeter.objects.filter(tenant=tenant_a).delete()

    good = query_events(alice, tenant_a)
    forged = query_events(alice, tenant_a)
    # claims to be bob, signed by alice: INVALID_SIGNATURE
    forged["header"].update(sender_did=bob.did, sender_signing_key_id=bob.key_id)
    wrong_key = query_events(alice, tenant_a)
    wrong_key["header"]["sender_signing_key_id"] = bob.did + "#signing"
    unknown = query_events(alice, tenant_a)
    unknown["header"]["sender_did"] = "did:decentrl:nobody"
    stale = alice.sign_command(
        recipient_did=tenant_a.did, payload={"type": "QUERY_EVENTS"}, timestamp=int(time.time() * 1000) - 3_600_000
    )
    unregistered_recipient = alice.sign_command(
        recipient_did="did:web:elsewhere.example", payload={"type": "QUERY_EVENTS"}
    )
    two_way_forged = alice.sign_command(recipient_did=bob.did, payload="blob", channel="TWO_WAY_PRIVATE")
    two_way_forged["header"].update(sender_did=bob.did, sender_signing_key_id=bob.key_id)
    two_way = alice.sign_command(recipient_did=bob.did, payload="blob", channel="TWO_WAY_PRIVATE")
    no_contract = bob.sign_command(recipient_did=alice.did, payload="blob", channel="TWO_WAY_PRIVATE")

    sent = (good, good, forged, wrong_key, unknown, stale, unregistered_recipient, two_way_forged, two_way, two_way)
    sent += (no_contract,)
    assert [post_a.send(env)[0] for env in sent] == [200, 401, 401, 404, 404, 401, 401, 401, 200, 401, 404]
    D, T = "DIRECT_AUTHENTICATED", "TWO_WAY_PRIVATE"
    assert _meter_rows(tenant_a) == [
        (D, "QUERY_EVENTS", "SUCCESS", 200, alice.did),
        (D, "QUERY_EVENTS", "DUPLICATE_NONCE", 401, None),
        (D, "QUERY_EVENTS", "INVALID_SIGNATURE", 401, None),
        (D, "QUERY_EVENTS", "SENDER_SIGNING_KEY_NOT_FOUND", 404, None),
        (D, "QUERY_EVENTS", "SENDER_NOT_FOUND", 404, None),
        (D, "QUERY_EVENTS", "TIMESTAMP_OUT_OF_RANGE", 401, None),
        (D, "QUERY_EVENTS", "UNAUTHORIZED_COMMAND", 401, alice.did),  # verified, then refused
        (T, "TWO_WAY_PRIVATE", "INVALID_SIGNATURE", 401, None),
        (T, "TWO_WAY_PRIVATE", "SUCCESS", 200, alice.did),
        (T, "TWO_WAY_PRIVATE", "DUPLICATE_NONCE", 401, None),
        (T, "TWO_WAY_PRIVATE", "COMMUNICATION_CONTRACT_NOT_FOUND", 404, bob.did),  # verified, then refused
    ]


@pytest.mark.django_db(transaction=True)
def test_each_row_is_metered_under_its_records_protocol(tenant_a):
    # Each front door names its protocol in the record; the channel column keeps what it says.
    metering.flush()
    for protocol in (records.DECENTRL, records.DIDCOMM_V2, records.DIDCOMM_V1):
        metering._buffer.append(meter_record(tenant_a, protocol=protocol, code=f"ROW_{protocol}"))
    metering.flush()
    got = dict(CommandMeter.objects.filter(tenant=tenant_a, code__startswith="ROW_").values_list("code", "protocol"))
    assert got == {f"ROW_{p}": p for p in ("decentrl", "didcomm-v2", "didcomm-v1")}


@pytest.mark.parametrize(
    ("field", "value", "kept"),
    [
        ("http_status", 2**15 - 1, True),
        ("http_status", 2**15, False),
        ("bytes_in", 2**31 - 1, True),
        ("bytes_in", 2**31, False),
        ("bytes_out", 2**31, False),
        ("bytes_out", -5, True),  # a negative size is stored as 0
    ],
)
def test_a_number_its_column_cannot_hold_is_refused_before_the_copy(tenant_a, field, value, kept):
    """The binary COPY would wrap it silently: the row is refused (and counted) instead."""
    record = meter_record(tenant_a, **{field: value})
    if kept:
        row = metering._values(record)
        assert row[metering._COLUMNS.index(field)] == max(0, value)
    else:
        with pytest.raises(OverflowError):
            metering._values(record)
