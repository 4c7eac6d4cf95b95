"""One way to show time (issue 18): ISO 8601 in UTC with a Z, the same text in the API, the console's
lists and pages, the dashboard's templates and the CLI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.template import Context, Template
from django.utils import formats
from rest_framework import serializers

from apps.tenants.models import AuditEntry
from apps.wire.cli import iso
from apps.wire.display import human_bytes, human_ms, utc_iso

MOMENT = datetime(2026, 11, 23, 8, 36, 12, 480_000, tzinfo=UTC)


def test_every_surface_writes_the_same_text_for_one_moment():
    plus_two = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert utc_iso(MOMENT) == utc_iso(plus_two) == "2026-11-23T08:36:12Z"
    assert utc_iso(int(MOMENT.timestamp())) == iso(int(MOMENT.timestamp())) == "2026-11-23T08:36:12Z"
    assert formats.date_format(MOMENT, "DATETIME_FORMAT") == "2026-11-23T08:36:12Z"
    assert formats.localize(MOMENT) == "2026-11-23T08:36:12Z"
    assert serializers.DateTimeField().to_representation(plus_two) == "2026-11-23T08:36:12Z"
    rendered = Template("{% load mediator %}{{ t }}|{{ t|utc }}|{{ t|date }}").render(Context({"t": MOMENT}))
    assert rendered == "2026-11-23T08:36:12Z|2026-11-23T08:36:12Z|2026-11-23"


def test_a_naive_datetime_is_refused_rather_than_guessed():
    with pytest.raises(ValueError, match="naive"):
        utc_iso(datetime(2026, 11, 23, 8, 36))


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (6 * 1024 * 1024, "6.0 MiB"), (3 * 1024**3, "3.0 GiB")],
)
def test_sizes_are_binary_units(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.4213, "0.42 ms"), (12.048206001054496, "12.0 ms"), (340.2, "340 ms"), (1234, "1.2 s"), (210_000, "3.5 min")],
)
def test_durations_carry_their_unit(value, text):
    assert human_ms(value) == text


@pytest.mark.django_db
def test_the_api_and_the_audit_log_page_show_z_times(api, staff_client, tenant_a, actor):
    from apps.tenants.services import tenant_suspend

    tenant_suspend(tenant=tenant_a, actor=actor)
    AuditEntry.objects.update(at=MOMENT)
    body = api.get("/api/v1/tenants/tenant-a/").json()
    assert body["created_at"].endswith("Z") and "+00:00" not in body["created_at"]
    assert body["created_at"] == utc_iso(tenant_a.created_at)
    audit = api.get("/api/v1/audit/?tenant=tenant-a").json()["results"]
    assert [e["at"] for e in audit] == ["2026-11-23T08:36:12Z"]
    page = staff_client.get("/admin/tenants/auditentry/").content.decode()
    assert page.count("2026-11-23T08:36:12Z") == 1
    assert "a.m." not in page and "Nov." not in page
