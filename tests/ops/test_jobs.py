"""Scheduled maintenance (issue 5 §1): a real Celery worker on real Redis runs the nonce cleanup
and the pending-event TTL purge; rows inside their window survive, rows past it go. The same
jobs run by hand as management commands print one line, are idempotent, and two concurrent runs
are safe."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from apps.decentrl.models import Nonce
from apps.messaging.models import Contract, ContractRequest, PendingEvent
from apps.ops import jobs
from apps.ops.models import JobStat
from tests.support.servers import ROOT, server_env, start_celery_worker

DAY = timedelta(days=1)


def _nonces(tenant, now_ms: int) -> dict[str, int]:
    """Nonces around `now_ms`: name -> expires_at."""
    rows = {
        "long-past": now_ms - 3_600_000,
        "just-past": now_ms - 1_000,
        "in-window": now_ms + 120_000,
        "far-in-window": now_ms + 300_000,
    }
    for name, expires_at in rows.items():
        Nonce.objects.create(tenant=tenant, sender_did=f"did:example:{name}", nonce=name, expires_at=expires_at)
    return rows


def _pending(tenant, recipient: str, age: timedelta, *, acked: bool = False) -> PendingEvent:
    ev = PendingEvent.objects.create(tenant=tenant, recipient_did=recipient, sender_did="did:example:s", payload="blob")
    fields = {"created_at": timezone.now() - age}
    if acked:
        fields.update(acknowledged_at=timezone.now() - age, payload="")
    PendingEvent.objects.filter(pk=ev.pk).update(**fields)
    return ev


def _wait_for_runs(name: str, runs: int, worker, timeout: float = 30) -> JobStat:
    deadline = time.time() + timeout
    while time.time() < deadline:
        stat = JobStat.objects.filter(name=name).first()
        if stat and stat.runs >= runs:
            return stat
        time.sleep(0.1)
    raise AssertionError(f"{name} did not run:\n{worker.log()}")


# --- a real worker on Redis --------------------------------------------------------------------


@pytest.mark.e2e
def test_a_celery_worker_on_redis_prunes_nonces_and_purges_pending_events_past_their_ttl(
    transactional_db, tmp_path, tenant_a, tenant_b
):
    type(tenant_b).objects.filter(pk=tenant_b.pk).update(pending_event_ttl_days=7)
    now_ms = int(time.time() * 1000)
    _nonces(tenant_a, now_ms)
    a_fresh = _pending(tenant_a, "did:example:bob", 29 * DAY)
    a_old = _pending(tenant_a, "did:example:bob", 31 * DAY)
    a_old_acked = _pending(tenant_a, "did:example:bob", 31 * DAY, acked=True)
    b_eight_days = _pending(tenant_b, "did:example:carol", 8 * DAY)
    a_eight_days = _pending(tenant_a, "did:example:bob", 8 * DAY)
    b_fresh = _pending(tenant_b, "did:example:carol", 6 * DAY)

    worker = start_celery_worker(tmp_path)
    try:
        worker.send("apps.ops.tasks.prune_nonces")
        worker.send("apps.ops.tasks.purge_pending_events")
        nonce_stat = _wait_for_runs("prune_nonces", 1, worker)
        pending_stat = _wait_for_runs("purge_pending_events", 1, worker)
    finally:
        worker.stop()

    assert sorted(Nonce.objects.values_list("nonce", flat=True)) == ["far-in-window", "in-window"]
    assert (nonce_stat.runs, nonce_stat.failures, nonce_stat.items) == (1, 0, 2)
    assert re.fullmatch(r"pruned 2 nonces in \d+\.\d\ds", nonce_stat.last_summary)
    assert set(PendingEvent.objects.values_list("pk", flat=True)) == {a_fresh.pk, a_eight_days.pk, b_fresh.pk}
    assert {a_old.pk, a_old_acked.pk, b_eight_days.pk}.isdisjoint(PendingEvent.objects.values_list("pk", flat=True))
    assert (pending_stat.runs, pending_stat.failures, pending_stat.items) == (1, 0, 3)


@pytest.mark.e2e
def test_a_task_for_one_tenant_leaves_the_others_alone(transactional_db, tmp_path, tenant_a, tenant_b):
    old_a = _pending(tenant_a, "did:example:bob", 40 * DAY)
    old_b = _pending(tenant_b, "did:example:carol", 40 * DAY)
    worker = start_celery_worker(tmp_path)
    try:
        worker.send("apps.ops.tasks.purge_pending_events", tenant_id=tenant_b.pk)
        _wait_for_runs("purge_pending_events", 1, worker)
        worker.send("apps.ops.tasks.purge_pending_events", tenant_id=10**9)  # gone tenant: a no-op
        worker.send("apps.ops.tasks.prune_nonces")
        _wait_for_runs("prune_nonces", 1, worker)
    finally:
        worker.stop()
    assert list(PendingEvent.objects.values_list("pk", flat=True)) == [old_a.pk]
    assert not PendingEvent.objects.filter(pk=old_b.pk).exists()
    assert "Traceback" not in worker.log()


# --- the same jobs by hand -------------------------------------------------------------------------


def _run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_prune_nonces_prints_one_line_and_a_second_run_finds_nothing(tenant_a):
    _nonces(tenant_a, int(time.time() * 1000))
    assert re.fullmatch(r"would have pruned 2 nonces in \d+\.\d\ds\n", _run("prune_nonces", "--dry-run"))
    assert Nonce.objects.count() == 4
    assert re.fullmatch(r"pruned 2 nonces in \d+\.\d\ds\n", _run("prune_nonces"))
    assert re.fullmatch(r"pruned 0 nonces in \d+\.\d\ds\n", _run("prune_nonces"))
    assert Nonce.objects.count() == 2
    assert JobStat.objects.get(name="prune_nonces").runs == 2  # dry runs are not counted


@pytest.mark.django_db
def test_purge_pending_events_for_one_tenant_by_slug(tenant_a, tenant_b):
    _pending(tenant_a, "did:example:bob", 31 * DAY)
    keep = _pending(tenant_b, "did:example:carol", 31 * DAY)
    assert _run("purge_pending_events", "--tenant", "tenant-a").startswith("purged 1 expired pending events in ")
    assert list(PendingEvent.objects.values_list("pk", flat=True)) == [keep.pk]
    with pytest.raises(CommandError, match="no tenant with slug 'nope'"):
        _run("purge_pending_events", "--tenant", "nope")


@pytest.mark.django_db
def test_purge_contract_requests_removes_acknowledged_and_stale_requests(tenant_a):
    def req(age: timedelta, acked: bool) -> ContractRequest:
        r = ContractRequest.objects.create(
            tenant=tenant_a,
            recipient_did="did:example:bob",
            sender_did="did:example:alice",
            encrypted_contract_request="ct",
            requestor_ephemeral_public_key="k",
        )
        ContractRequest.objects.filter(pk=r.pk).update(
            created_at=timezone.now() - age, acknowledged_at=timezone.now() if acked else None
        )
        return r

    fresh = req(DAY, acked=False)
    req(DAY, acked=True)
    req(31 * DAY, acked=False)
    assert _run("purge_contract_requests").startswith("purged 2 contract requests in ")
    assert list(ContractRequest.objects.values_list("pk", flat=True)) == [fresh.pk]


@pytest.mark.django_db
def test_expired_contracts_stay_listed_for_the_retention_period_then_go(settings, tenant_a):
    settings.MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS = 30
    now = int(time.time())

    def contract(expires_at: int, tag: str) -> Contract:
        return Contract.objects.create(
            tenant=tenant_a,
            owner_did="did:example:bob",
            requestor_did="did:example:alice",
            recipient_did="did:example:bob",
            expires_at=expires_at,
            contract_hash=tag * 64,
            signed_contract="{}",
        )

    live = contract(now + 86_400, "a")
    recently_expired = contract(now - 29 * 86_400, "b")
    contract(now - 31 * 86_400, "c")
    assert _run("purge_expired_contracts").startswith("purged 1 expired contracts in ")
    assert set(Contract.objects.values_list("pk", flat=True)) == {live.pk, recently_expired.pk}


@pytest.mark.django_db
def test_a_failing_job_is_counted_as_a_failure(monkeypatch, tenant_a):
    def boom(**kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(jobs.JOBS, "prune_nonces", jobs.Job("prune_nonces", "nonces", "pruned", boom))
    with pytest.raises(RuntimeError):
        jobs.run_job("prune_nonces")
    stat = JobStat.objects.get(name="prune_nonces")
    assert (stat.runs, stat.failures, stat.last_success_at) == (1, 1, None)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("prune_nonces", r"pruned (\d+) nonces in [\d.]+s"),
        ("purge_pending_events", r"purged (\d+) expired pending events in [\d.]+s"),
    ],
)
def test_two_concurrent_runs_of_a_job_are_safe(transactional_db, tenant_a, command, pattern):
    now_ms = int(time.time() * 1000)
    expired, kept = 3000, 5
    if command == "prune_nonces":
        Nonce.objects.bulk_create(
            [
                Nonce(tenant=tenant_a, sender_did="did:example:x", nonce=f"old-{i}", expires_at=now_ms - 1000)
                for i in range(expired)
            ]
            + [
                Nonce(tenant=tenant_a, sender_did="did:example:x", nonce=f"new-{i}", expires_at=now_ms + 300_000)
                for i in range(kept)
            ]
        )
        remaining = Nonce.objects.count
    else:
        PendingEvent.objects.bulk_create(
            [
                PendingEvent(tenant=tenant_a, recipient_did="did:example:bob", sender_did="did:example:s", payload="p")
                for _ in range(expired + kept)
            ]
        )
        old_ids = list(PendingEvent.objects.order_by("id").values_list("id", flat=True)[:expired])
        PendingEvent.objects.filter(id__in=old_ids).update(created_at=timezone.now() - 31 * DAY)
        remaining = PendingEvent.objects.count

    env = server_env()
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", command],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    counts = []
    for out, _err in outputs:
        line = out.strip()
        assert "\n" not in line
        if line == f"{command}: skipped, another run is in progress":
            counts.append(0)
        else:
            counts.append(int(re.fullmatch(pattern, line).group(1)))
    assert sum(counts) == expired
    assert remaining() == kept
    stat = JobStat.objects.get(name=command)
    assert (stat.failures, stat.items) == (0, expired)


def test_the_beat_schedule_names_real_tasks_at_their_intervals():
    from mediator_project.celery import app

    app.loader.import_default_modules()
    schedule = app.conf.beat_schedule
    assert {name: entry["task"] for name, entry in schedule.items()} == {
        "prune-nonces": "apps.ops.tasks.prune_nonces",
        "purge-expired-pending-events": "apps.ops.tasks.purge_pending_events",
        "purge-contract-requests": "apps.ops.tasks.purge_contract_requests",
        "purge-expired-contracts": "apps.ops.tasks.purge_expired_contracts",
        "prune-public-tombstones": "apps.ops.tasks.prune_public_tombstones",
        "export-metering": "apps.usage.tasks.export_metering",
        "prune-metering": "apps.usage.tasks.prune_metering",
        "nightly-usage-report": "apps.usage.tasks.nightly_usage_report",
        "purge-didcomm-messages": "apps.didcomm.tasks.purge_messages",
        "prune-didcomm-message-ids": "apps.didcomm.tasks.prune_message_ids",
        "deliver-didcomm-outbound": "apps.didcomm.tasks.deliver_due_outbound",
    }
    assert schedule["prune-nonces"]["schedule"] == 600.0  # DCTRL-0004 §5.3
    assert schedule["deliver-didcomm-outbound"]["schedule"] == 60.0
    assert schedule["prune-didcomm-message-ids"]["schedule"] == 600.0
    assert schedule["export-metering"]["schedule"] == 300.0  # the lake is at most 5 minutes behind
    for entry in schedule.values():
        assert entry["task"] in app.tasks


@pytest.mark.django_db
def test_prune_public_tombstones_drops_only_tombstones_past_the_rate_window(tenant_a):
    from datetime import timedelta

    from django.utils import timezone

    from apps.messaging.models import PublicEvent

    def event(deleted_ago: timedelta | None) -> PublicEvent:
        return PublicEvent.objects.create(
            tenant=tenant_a,
            publisher_did="did:example:p",
            channel_id="feed",
            event="" if deleted_ago else "{}",
            tags=[],
            timestamp=1,
            signature="" if deleted_ago else "sig",
            deleted_at=timezone.now() - deleted_ago if deleted_ago else None,
        )

    live, recent, _old = event(None), event(timedelta(minutes=1)), event(timedelta(hours=1))
    assert _run("prune_public_tombstones", "--dry-run").startswith("would have pruned 1 public event tombstones in ")
    assert _run("prune_public_tombstones").startswith("pruned 1 public event tombstones in ")
    assert set(PublicEvent.objects.values_list("pk", flat=True)) == {live.pk, recent.pk}
