"""One way to show time (issue 18): ISO 8601 in UTC with a Z, the same text in the API, the console's
lists and pages, the dashboard's templates and the CLI."""

from __future__ import annotations

import re
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
    # One word that may wrap only before its T, never at a hyphen (the spans do not wrap, console.css).
    stamp = (
        '<time class="utc" datetime="2026-11-23T08:36:12Z"><span>2026-11-23</span><wbr><span>T08:36:12Z</span></time>'
    )
    assert rendered == f"2026-11-23T08:36:12Z|{stamp}|2026-11-23"


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


ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _times(value):
    """Every string of a JSON body that looks like a moment (a date with a time)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _times(v)
    elif isinstance(value, list):
        for v in value:
            yield from _times(v)
    elif isinstance(value, str) and re.match(r"^\d{4}-\d\d-\d\d[T ]\d", value):
        yield value


@pytest.mark.django_db
def test_every_moment_the_api_gives_is_iso_utc_to_the_second(api, tenant_a, actor):
    from apps.didcomm.identity import identity_current, identity_rotate
    from apps.didcomm.models import Mediation

    identity_current(tenant=tenant_a)
    identity_rotate(tenant=tenant_a, actor=actor)  # a previous identity, with its grace period
    Mediation.objects.create(tenant=tenant_a, client_did="did:peer:2.Ez6LSclient", created_at=MOMENT)
    grants = api.get("/api/v1/didcomm/grants/").json()
    assert grants["results"][0]["created_at"] == "2026-11-23T08:36:12Z"
    bodies = [
        grants,
        api.get(f"/api/v1/didcomm/grants/{Mediation.objects.get().pk}/").json(),
        api.get("/api/v1/tenants/").json(),
        api.get("/api/v1/tenants/tenant-a/").json(),
        api.get("/api/v1/audit/").json(),
        api.post("/api/v1/tenants/tenant-a/rotate-didcomm-identity/").json(),
    ]
    found = [t for body in bodies for t in _times(body)]
    assert len(found) >= 6 and all(ISO_Z.match(t) for t in found), found


@pytest.mark.django_db
def test_record_titles_and_the_cancelled_run_text_are_iso_utc(staff_client, tenant_a, actor):
    from apps.tenants.models import TenantKey
    from apps.tenants.services import tenant_rotate_keys
    from apps.usage.models import CommandMeter, ReportRun

    tenant_rotate_keys(tenant=tenant_a, actor=actor)
    AuditEntry.objects.update(at=MOMENT)
    TenantKey.objects.update(retired_at=MOMENT)
    assert str(AuditEntry.objects.first()) == "2026-11-23T08:36:12Z olivia tenant.rotate_keys tenant-a"
    assert str(TenantKey.objects.first()).endswith("retired 2026-11-23T08:36:12Z")
    meter = CommandMeter(at=MOMENT, command_type="QUERY_EVENTS", code="OK")
    assert str(meter) == "2026-11-23T08:36:12Z QUERY_EVENTS OK"
    run = ReportRun.objects.create(
        date_from=MOMENT.date(), date_to=MOMENT.date(), status=ReportRun.Status.CANCELLED, finished_at=MOMENT
    )
    page = staff_client.get(f"/dashboard/reports/{run.pk}/").content.decode()
    assert re.search(r'This run was cancelled at <time class="utc" datetime="2026-11-23T08:36:12Z">', page), page
