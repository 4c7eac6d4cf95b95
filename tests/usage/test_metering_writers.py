"""The metering writer (apps/usage/metering.py, `copy_rows`: PostgreSQL's binary COPY) stores a batch
as given: every column, NULL sender, non-ASCII text, the longest labels, fractional durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from apps.usage import metering
from apps.usage.models import LABEL_MAX, SENDER_DID_MAX, CommandMeter

T0 = datetime(2026, 11, 23, 12, 0, 0, 123456, tzinfo=UTC)


def batch(tenant_id: int) -> list[tuple]:
    return [
        (tenant_id, T0, "http", "decentrl", "", "TWO_WAY_PRIVATE", "OK", 200, 1234, 56, 1.25, "did:example:a"),
        (tenant_id, T0 + timedelta(microseconds=1), "ws", "decentrl", "", "", "INVALID_COMMAND", 400, 0, 0, 0.0, None),
        (tenant_id, T0, "http", "didcomm", "didcomm-v2", "é" * LABEL_MAX, "Ü" * LABEL_MAX, 503, 2**31 - 1, 1, 0.001, "d" * SENDER_DID_MAX),
        (tenant_id, T0 - timedelta(days=400), "http", "decentrl", "", "QUERY_EVENTS", "OK", 200, 7, 8, 12345.5, "did:ex:ample"),
    ]  # fmt: skip


def stored(tenant_id: int) -> list[tuple]:
    return list(CommandMeter.objects.filter(tenant_id=tenant_id).order_by("id").values_list(*metering._COLUMNS))


@pytest.mark.django_db
def test_the_writer_stores_the_batch_as_given(tenant_a, tenant_b):
    rows = batch(tenant_a.pk)
    metering.copy_rows(rows)
    metering.copy_rows(batch(tenant_b.pk)[:1])
    assert stored(tenant_a.pk) == rows
    assert stored(tenant_b.pk) == batch(tenant_b.pk)[:1]
    metering.copy_rows([])
    assert CommandMeter.objects.filter(tenant_id__in=[tenant_a.pk, tenant_b.pk]).count() == 5


@pytest.mark.django_db
def test_the_binary_copy_types_are_the_table_columns_types():
    """The COPY sends each value in binary as the type `_COPY_TYPES` names: it must be the column's
    (text for a varchar), or PostgreSQL would read the bytes as another type."""
    names = {"bigint": "int8", "timestamp with time zone": "timestamptz", "character varying": "text",
             "smallint": "int2", "integer": "int4", "double precision": "float8"}  # fmt: skip
    with connection.cursor() as cur:
        cur.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s",
            [CommandMeter._meta.db_table],
        )
        table = {column: names[data_type] for column, data_type in cur.fetchall()}
    assert [table[c] for c in metering._COLUMNS] == list(metering._COPY_TYPES)
