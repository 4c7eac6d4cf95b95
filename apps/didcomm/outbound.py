"""DIDComm v1 outbound delivery: queue, then POST a reply or forwarded message to the agent's endpoint.

`outbound_create` queues a row and sends its Celery task after commit. Delivery is called by the Celery task `deliver_outbound` (after the row commits) and by the beat job that
retries due rows. A 2xx removes the row (and, for a forwarded message, the queued message:
delivered). Anything else keeps it with exponential backoff until it expires (the tenant's TTL).
Targets that resolve to private, loopback, link-local or other non-global addresses (also inside
an IPv6 address: NAT64, 6to4, Teredo, IPv4-compatible and -mapped) are refused unless
MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE is on, loopback ones unless
MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK is (development's default): delivery must not reach the
operator's network.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.ops import egress
from apps.ops.egress import TargetRefused

from . import metrics
from .models import Connection, DidcommPolicy, Outbound, QueuedMessage

log = logging.getLogger("mediator.didcomm")

MEDIA_TYPE = "application/didcomm-envelope-enc"
LEASE = timedelta(seconds=60)  # a claimed row is not claimed again before this (a worker died mid-POST)
DUE_BATCH = 100
# The Celery task that POSTs an outbound row (apps/didcomm/tasks.py), sent by name.
OUTBOUND_TASK = "apps.didcomm.tasks.deliver_outbound"


@dataclass(frozen=True)
class Attempt:
    outcome: str  # delivered | retry | expired | refused | gone | busy
    retry_in: int | None = None


def check_target(url: str) -> None:
    """The outbound target rule (apps/ops/egress.py) with this deployment's settings."""
    egress.check_target(
        url,
        allow_private=settings.MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE,
        allow_loopback=settings.MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK,
    )


def outbound_create(*, connection: Connection, queued: QueuedMessage | None, body: str, expires_at) -> Outbound:
    """Queue an outbound POST to a v1 connection's endpoint; its delivery task leaves after commit."""
    row = Outbound.objects.create(
        tenant_id=connection.tenant_id, connection=connection, queued=queued, body=body, expires_at=expires_at
    )
    outbound_send_on_commit(row.pk)
    return row


def outbound_send_on_commit(row_id: int) -> None:
    """Send the delivery task of an outbound row once the transaction that made it commits."""
    transaction.on_commit(
        lambda: current_app.send_task(OUTBOUND_TASK, args=[row_id], queue=settings.MEDIATOR_DIDCOMM_OUTBOUND_QUEUE)
    )


@transaction.atomic
def outbound_reply(*, connection: Connection, envelope: dict, policy: DidcommPolicy) -> Outbound:
    """Queue a packed reply for POSTing to the connection's endpoint (the agent asked no return route)."""
    expires = timezone.now() + timedelta(hours=policy.message_ttl_hours)
    body = json.dumps(envelope, separators=(",", ":"))
    return outbound_create(connection=connection, queued=None, body=body, expires_at=expires)


def _backoff(attempts: int) -> int:
    return min(2 ** min(attempts, 20), settings.MEDIATOR_DIDCOMM_OUTBOUND_MAX_BACKOFF_SECONDS)


def _claim(outbound_id: int, now: datetime) -> Outbound | None:
    # A conditional UPDATE claims the row: two workers (task and retry job) never POST it at once.
    claimed = Outbound.objects.filter(pk=outbound_id, next_attempt_at__lte=now).update(next_attempt_at=now + LEASE)
    if not claimed:
        return None
    return Outbound.objects.select_related("connection", "queued").filter(pk=outbound_id).first()


def outbound_deliver(*, outbound_id: int, now: datetime | None = None) -> Attempt:
    """One delivery attempt of one outbound row (idempotent; no transaction is held during the POST)."""
    now = now or timezone.now()
    if not Outbound.objects.filter(pk=outbound_id).exists():
        return Attempt("gone")
    row = _claim(outbound_id, now)
    if row is None:
        return Attempt("busy")
    if row.expires_at <= now:
        row.delete()
        return Attempt("expired")
    body = row.body or (row.queued.data if row.queued is not None else "")
    if body and row.queued is not None:
        body = _inner(body)
    try:
        check_target(row.connection.endpoint)
    except TargetRefused as exc:
        log.warning("didcomm outbound refused tenant=%s outbound=%s reason=%s", row.tenant_id, row.pk, exc)
        _failed(row.connection_id, "refused", f"refused: {exc}", now)
        row.delete()
        return Attempt("refused")
    status, error = _post(row.connection.endpoint, body)
    if status is not None and 200 <= status < 300:
        with transaction.atomic():
            if row.queued_id is not None:
                removed, _ = QueuedMessage.objects.filter(pk=row.queued_id).delete()
                metrics.DELIVERED.inc(1 if removed else 0)
            Outbound.objects.filter(pk=row.pk).delete()
            Connection.objects.filter(pk=row.connection_id).update(last_delivered_at=now)
        log.info(
            "didcomm outbound delivered tenant=%s outbound=%s attempts=%d", row.tenant_id, row.pk, row.attempts + 1
        )
        return Attempt("delivered")
    if status is None:
        _failed(row.connection_id, "network", error, now)
    else:
        _failed(row.connection_id, "http_status", f"HTTP {status}", now)
    wait = _backoff(row.attempts + 1)
    next_at = now + timedelta(seconds=wait)
    if next_at >= row.expires_at:
        row.delete()
        metrics.OUTBOUND_FAILURES.labels("expired").inc()
        log.warning(
            "didcomm outbound expired tenant=%s outbound=%s attempts=%d", row.tenant_id, row.pk, row.attempts + 1
        )
        return Attempt("expired")
    Outbound.objects.filter(pk=row.pk).update(
        attempts=row.attempts + 1, next_attempt_at=next_at, last_status=str(status) if status else "error"
    )
    log.info("didcomm outbound retry tenant=%s outbound=%s status=%s in=%ds", row.tenant_id, row.pk, status, wait)
    return Attempt("retry", wait)


def _failed(connection_id: int, reason: str, error: str, now: datetime) -> None:
    """Count a failed or refused POST (metric by reason, no DID) and keep it on its connection for
    the console: the error, when, and how many ever."""
    metrics.OUTBOUND_FAILURES.labels(reason).inc()
    Connection.objects.filter(pk=connection_id).update(
        last_delivery_error=error[:120], last_delivery_error_at=now, delivery_failures=F("delivery_failures") + 1
    )


def _inner(stored: str) -> str:
    """The stored forward attachment `{"json": msg}` → `msg` as JSON text (POSTed unchanged)."""
    data = json.loads(stored)
    return json.dumps(data["json"], separators=(",", ":"))


def _post(url: str, body: str) -> tuple[int | None, str]:
    """POST the envelope; (the HTTP status, ""), or (None, the error's class name) when the request
    failed (payload never logged)."""
    try:
        response = httpx.post(
            url,
            content=body.encode("utf-8"),
            headers={"Content-Type": MEDIA_TYPE},
            timeout=settings.MEDIATOR_DIDCOMM_OUTBOUND_TIMEOUT_SECONDS,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        log.info("didcomm outbound failed: %s", type(exc).__name__)
        return None, type(exc).__name__
    return response.status_code, ""


def outbound_deliver_due(*, now: datetime, dry_run: bool = False) -> int:
    """The retry sweep: attempt every due row (at most DUE_BATCH); how many were delivered."""
    due = list(
        Outbound.objects.filter(next_attempt_at__lte=now)
        .order_by("next_attempt_at")[:DUE_BATCH]
        .values_list("id", flat=True)
    )
    if dry_run:
        return len(due)
    return sum(outbound_deliver(outbound_id=i, now=now).outcome == "delivered" for i in due)


def outbound_purge_expired(*, tenant, now: datetime, dry_run: bool) -> int:
    """Outbound rows past their expiry (the TTL of what they carry): given up."""
    qs = Outbound.objects.filter(expires_at__lte=now)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return qs.count() if dry_run else qs.delete()[0]
