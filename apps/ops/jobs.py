"""Scheduled maintenance jobs: one function per job, shared by Celery tasks and management
commands (docs/contributing.md §11). Each run takes one cut-off time, calls one domain function and returns a
one-line summary.

Running the same job twice at once is safe: a run holds a lock named after the job and a
concurrent run skips with "skipped" instead of racing it (the domain functions are also idempotent
on their own: they delete by condition, so a second pass finds nothing). The lock (`exclusive`) is
a PostgreSQL session advisory lock, held by the database session, so across processes
(tests/ops/test_job_locks.py). Every run is counted in JobStat, which /metrics reports.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import F
from django.utils import timezone

from apps.messaging import maintenance
from apps.messaging.public import public_tombstones_prune
from apps.tenants.models import Tenant

from .models import JobStat

log = logging.getLogger("mediator.jobs")


@dataclass(frozen=True)
class Job:
    name: str
    noun: str  # what the count counts, for the summary line
    verb: str
    run: Callable[..., int]  # (*, now, dry_run, tenant) -> rows removed (or that would be)
    key: str = ""  # its entry in a tenant's purge summary (tenant_purge); the name when empty


def _purge_pending_events(*, now: datetime, dry_run: bool, tenant) -> int:
    return maintenance.purge_expired_pending_events(tenant=tenant, now=now, dry_run=dry_run)


def _purge_contract_requests(*, now: datetime, dry_run: bool, tenant) -> int:
    return maintenance.purge_contract_requests(tenant=tenant, now=now, dry_run=dry_run)


def _purge_expired_contracts(*, now: datetime, dry_run: bool, tenant) -> int:
    # Only contracts expired longer than MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS go: until then
    # QUERY_COMMUNICATION_CONTRACTS still lists them (docs/protocol-readings.md §5).
    return maintenance.purge_expired_contracts(tenant=tenant, now=now, dry_run=dry_run)


def _prune_public_tombstones(*, now: datetime, dry_run: bool, tenant) -> int:
    return public_tombstones_prune(tenant=tenant, now=now, dry_run=dry_run)


JOBS: dict[str, Job] = {
    j.name: j
    for j in (
        Job("purge_pending_events", "expired pending events", "purged", _purge_pending_events, "pending_events"),
        Job("purge_contract_requests", "contract requests", "purged", _purge_contract_requests, "contract_requests"),
        Job("purge_expired_contracts", "expired contracts", "purged", _purge_expired_contracts, "contracts"),
        Job("prune_public_tombstones", "public event tombstones", "pruned", _prune_public_tombstones, "tombstones"),
    )
}


def register(job: Job) -> None:
    """Add a job owned by an app above ops (the front doors' nonce stores), in its AppConfig.ready()."""
    JOBS.setdefault(job.name, job)


def tenant_purge(*, tenant: Tenant, now: datetime, dry_run: bool) -> dict[str, int]:
    """Run every registered job for one tenant: {job key: rows removed (or that would be)}."""
    return {job.key or job.name: job.run(now=now, dry_run=dry_run, tenant=tenant) for job in JOBS.values()}


@contextmanager
def exclusive(name: str) -> Iterator[bool]:
    """A session advisory lock named after the job: True if this run may proceed.

    Session level (not transaction level) because the purges commit in batches. Another session
    (process or thread) asking for the same name gets False until it is released; the lock goes
    with the connection if the process dies."""
    key = int.from_bytes(hashlib.sha256(f"mediator-job:{name}".encode()).digest()[:8], "big", signed=True)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
        got = bool(cur.fetchone()[0])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", [key])


def _ensure_stat(name: str) -> None:
    JobStat.objects.get_or_create(name=name)


def stat_record(*, name: str, ok: bool, items: int = 0, summary: str = "") -> None:
    """Count one run of `name` (atomic increments: concurrent recorders never lose a count)."""
    _ensure_stat(name)
    now = timezone.now()
    fields: dict = {"runs": F("runs") + 1, "last_run_at": now, "last_summary": summary[:300]}
    if ok:
        fields.update(items=F("items") + items, last_success_at=now)
    else:
        fields["failures"] = F("failures") + 1
    JobStat.objects.filter(name=name).update(**fields)


def run_job(name: str, *, now: datetime | None = None, dry_run: bool = False, tenant_id: int | None = None) -> str:
    """Run one job now (every tenant, or one) and return its one-line summary ("pruned 1204 nonces")."""
    job = JOBS[name]
    now = now or timezone.now()
    # A tenant that no longer exists has nothing left to purge: the run is a no-op, not an error.
    tenant = Tenant.objects.filter(pk=tenant_id).first() if tenant_id is not None else None
    if tenant_id is not None and tenant is None:
        return f"{name}: tenant {tenant_id} does not exist, nothing to do"
    started = time.perf_counter()
    with exclusive(name) as proceed:
        if not proceed:
            summary = f"{name}: skipped, another run is in progress"
            log.info(summary, extra={"job": name})
            return summary
        try:
            count = job.run(now=now, dry_run=dry_run, tenant=tenant)
        except Exception:
            log.exception("job failed", extra={"job": name})
            if not dry_run:
                stat_record(name=name, ok=False, summary="failed")
            raise
    verb = f"would have {job.verb}" if dry_run else job.verb
    summary = f"{verb} {count} {job.noun} in {time.perf_counter() - started:.2f}s"
    if not dry_run:
        stat_record(name=name, ok=True, items=count, summary=summary)
    log.info("job %s: %s", name, summary, extra={"job": name, "count": count})
    return summary
