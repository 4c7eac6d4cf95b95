"""Metering: every command through the one dispatch path leaves one metadata-only row."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from apps.usage import metering
from apps.usage.models import CommandMeter
from apps.wire.canonical import canonical_bytes
from tests.support.registration import register

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
        ("QUERY_EVENTS", "UNAUTHORIZED_COMMAND", 401, alice.did),
        ("", "INVALID_COMMAND", 400, ""),
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


def test_a_command_for_no_tenant_is_not_metered(client, settings):
    settings.MEDIATOR_DEFAULT_TENANT = ""
    before = CommandMeter.objects.count()
    client.post("/", data=b"{}", content_type="application/json", HTTP_HOST="nobody.example")
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
    metering.flush()
    settings.USAGE_METERING_MAX_BUFFER = 0
    dropped = metering.dropped
    post_a.send(query_events(alice, tenant_a))
    assert metering.dropped == dropped + 1
    assert metering.pending() == 0


@pytest.mark.django_db(transaction=True)
def test_the_background_thread_flushes_by_itself(post_a, tenant_a, alice):
    post_a.send(query_events(alice, tenant_a))
    deadline = time.time() + 10
    while time.time() < deadline and not CommandMeter.objects.filter(tenant=tenant_a).exists():
        time.sleep(0.05)
    assert CommandMeter.objects.filter(tenant=tenant_a, command_type="QUERY_EVENTS").count() == 1
    metering.flush()


def test_buffered_metering_adds_no_query_to_the_command(post_a, tenant_a, alice):
    from django.db import connection as conn
    from django.test.utils import CaptureQueriesContext

    metering.flush()
    with CaptureQueriesContext(conn) as ctx:
        post_a.send(query_events(alice, tenant_a))
    assert not [q for q in ctx.captured_queries if "usage_commandmeter" in q["sql"]]
    metering.flush()  # (the writer thread may have been first; either way the row is there now)
    assert CommandMeter.objects.filter(tenant=tenant_a).count() == 1
