"""GET /metrics in-process: who may read it, what it counts, and that it names no DID."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from apps.ops import metrics
from apps.usage.records import DECENTRL, Record
from tests.conftest import HOST_A
from tests.support.registration import contract_both_ways, register

pytestmark = pytest.mark.django_db


def scrape(**extra):
    return Client().get("/metrics", HTTP_HOST=HOST_A, **extra)


def samples(text: str) -> dict:
    """{(sample name, sorted label items): value} of an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.parametrize(
    ("addr", "headers", "status"),
    [
        ("127.0.0.1", {}, 200),
        ("::1", {}, 200),
        ("10.2.3.4", {}, 200),
        ("192.168.1.9", {}, 200),
        ("203.0.113.5", {}, 403),
        ("127.0.0.1", {"HTTP_X_FORWARDED_FOR": "203.0.113.5"}, 403),  # a proxy forwarding the outside
        ("127.0.0.1", {"HTTP_X_FORWARDED_FOR": "10.0.0.8"}, 200),
        ("203.0.113.5", {"HTTP_AUTHORIZATION": "Bearer s3cret-token"}, 200),
        ("203.0.113.5", {"HTTP_AUTHORIZATION": "bearer s3cret-token"}, 200),
        ("203.0.113.5", {"HTTP_AUTHORIZATION": "Bearer wrong"}, 403),
        ("127.0.0.1", {"HTTP_AUTHORIZATION": "Bearer wrong"}, 403),  # a wrong token is refused even inside
        ("203.0.113.5", {"HTTP_AUTHORIZATION": "Basic s3cret-token"}, 403),
    ],
)
def test_metrics_are_for_the_token_or_internal_addresses_only(settings, addr, headers, status):
    settings.MEDIATOR_METRICS_TOKEN = "s3cret-token"
    resp = scrape(REMOTE_ADDR=addr, **headers)
    assert resp.status_code == status
    if status == 403:
        assert resp.content == b"forbidden\n"
    else:
        assert resp.headers["Content-Type"].startswith("text/plain; version=")


def test_without_a_token_configured_no_bearer_header_is_accepted(settings):
    settings.MEDIATOR_METRICS_TOKEN = ""
    assert scrape(REMOTE_ADDR="203.0.113.5", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_internal_access_can_be_switched_off(settings):
    settings.MEDIATOR_METRICS_TOKEN = "t0ken"
    settings.MEDIATOR_METRICS_ALLOW_INTERNAL = False
    assert scrape(REMOTE_ADDR="127.0.0.1").status_code == 403
    assert scrape(REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer t0ken").status_code == 200


def test_only_get_is_allowed():
    assert Client().post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405


def test_a_workload_shows_up_in_the_counters_and_gauges_without_any_did(
    post_a, tenant_a, alice, bob, django_capture_on_commit_callbacks
):
    register(post_a, alice, tenant_a)
    register(post_a, bob, tenant_a)
    contract_both_ways(post_a, alice, bob, tenant_a)
    before = samples(scrape(REMOTE_ADDR="127.0.0.1").content.decode())

    for i in range(3):
        assert post_a.command(alice, f"blob-{i}", recipient_did=bob.did, channel="TWO_WAY_PRIVATE")[0] == 200
    assert post_a.raw(b"{}")[0] == 400
    status, body = post_a.command(bob, {"type": "QUERY_PENDING_EVENTS"}, recipient_did=tenant_a.did)
    ids = [e["id"] for e in body["payload"]["pending_events"]]
    with django_capture_on_commit_callbacks(execute=True):
        ack = {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": ids[:2]}
        assert post_a.command(bob, ack, recipient_did=tenant_a.did)[0] == 200

    metrics.DATABASE_COLLECTOR.invalidate()
    text = scrape(REMOTE_ADDR="127.0.0.1").content.decode()
    after = samples(text)

    def delta(name: str, **labels) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert delta("mediator_commands_total", transport="http", command="TWO_WAY_PRIVATE", code="SUCCESS") == 3
    assert delta("mediator_commands_total", transport="http", command="-", code="INVALID_COMMAND") == 1
    assert delta("mediator_commands_total", transport="http", command="QUERY_PENDING_EVENTS", code="SUCCESS") == 1
    assert delta("mediator_command_duration_seconds_count", transport="http", command="TWO_WAY_PRIVATE") == 3
    assert delta("mediator_pending_events_stored_total") == 3
    assert delta("mediator_pending_events_delivered_total") == 2
    assert after[("mediator_pending_queue_events", ())] == 1
    assert after[("mediator_pending_queue_recipients", ())] == 1
    assert after[("mediator_pending_queue_max_depth", ())] == 1
    # Every command that got past the timestamp check holds a nonce: 2 registrations, 1 save,
    # 3 sends, 1 query, 1 ack.
    assert after[("mediator_nonce_store_size", ())] == 8
    assert after[("mediator_metrics_database_up", ())] == 1
    assert "did:" not in text
    assert "blob-" not in text


def test_job_runs_and_failures_are_reported_from_the_database(tenant_a):
    from apps.ops.jobs import run_job, stat_record

    run_job("prune_nonces")
    run_job("prune_nonces")
    stat_record(name="apps.usage.tasks.prune_metering", ok=False)
    metrics.DATABASE_COLLECTOR.invalidate()
    after = samples(scrape(REMOTE_ADDR="127.0.0.1").content.decode())
    assert after[("mediator_job_runs_total", (("job", "prune_nonces"),))] == 2
    assert after[("mediator_job_failures_total", (("job", "prune_nonces"),))] == 0
    assert after[("mediator_job_runs_total", (("job", "apps.usage.tasks.prune_metering"),))] == 1
    assert after[("mediator_job_failures_total", (("job", "apps.usage.tasks.prune_metering"),))] == 1
    assert after[("mediator_pending_events_expired_total", ())] == 0


def test_job_statistics_are_listed_read_only_in_the_operator_console(admin_client, tenant_a):
    from apps.ops.jobs import run_job

    run_job("prune_nonces")
    resp = admin_client.get("/admin/ops/jobstat/", HTTP_HOST=HOST_A)
    assert resp.status_code == 200
    assert b"prune_nonces" in resp.content
    assert admin_client.get("/admin/ops/jobstat/add/", HTTP_HOST=HOST_A).status_code == 403


def test_observing_a_command_counts_and_times_its_own_series_also_past_the_children_cap(monkeypatch):
    def record(command: str | None, code: str, ms: float) -> Record:
        return Record(
            protocol=DECENTRL, tenant_id=1, tenant_slug="t", at=datetime.now(UTC), transport="http", channel="DIRECT_AUTHENTICATED",
            command_type=command, code=code, http_status=200, bytes_in=1, bytes_out=1, duration_ms=ms,
            sender_did=None, remote_addr=None,
        )  # fmt: skip

    def count(command: str, code: str) -> float:
        return (
            metrics.OPS_REGISTRY.get_sample_value(
                "mediator_commands_total", {"transport": "http", "command": command, "code": code}
            )
            or 0.0
        )

    def timed(command: str) -> float:
        return (
            metrics.OPS_REGISTRY.get_sample_value(
                "mediator_command_duration_seconds_count", {"transport": "http", "command": command}
            )
            or 0.0
        )

    before = (count("SAVE_EVENTS", "SUCCESS"), count("SAVE_EVENTS", "RATE_LIMITED"), count("-", "INVALID_COMMAND"))
    timed_before = (timed("SAVE_EVENTS"), timed("-"))
    monkeypatch.setattr(metrics._command_children, "limit", 2)
    for rec in (
        record("SAVE_EVENTS", "SUCCESS", 1.0),
        record("SAVE_EVENTS", "SUCCESS", 2.0),
        record("SAVE_EVENTS", "RATE_LIMITED", 1.0),
        record(None, "INVALID_COMMAND", 1.0),  # a third series: the cache is emptied, nothing is lost
        record("SAVE_EVENTS", "SUCCESS", 1.0),
    ):
        metrics.observe(rec)
    after = (count("SAVE_EVENTS", "SUCCESS"), count("SAVE_EVENTS", "RATE_LIMITED"), count("-", "INVALID_COMMAND"))
    assert [a - b for a, b in zip(after, before, strict=True)] == [3.0, 1.0, 1.0]
    assert [timed("SAVE_EVENTS") - timed_before[0], timed("-") - timed_before[1]] == [4.0, 1.0]
    assert len(metrics._command_children.kept) <= 2
