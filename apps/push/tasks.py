"""Celery tasks of the push app: thin adapters over apps.push.sender (docs/contributing.md §11).

`wake` sends a claimed wake to every device of its subject; `resend` retries one device's send
after the delay the provider asked for (Retry-After) or the backoff gave. Both take ids and
re-read everything, so a task that runs twice or late does no harm (a resend whose subject picked
up meanwhile, or whose device is gone, sends nothing). Both are `counts_itself`: one runs per wake,
and the push metrics count them (pushes sent, failed, coalesced), not a JobStat row updated by every
wake (two more round trips each, and one hot row every worker thread waits on).
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from . import sender

log = logging.getLogger("mediator.push")


def _queue(task, args: list, countdown: float) -> bool:
    """Queue `task`; False when the broker refused (the wake is given back, nothing else fails)."""
    try:
        task.apply_async(args=args, countdown=countdown, queue=settings.PUSH_QUEUE)
    except Exception as exc:  # noqa: BLE001 - a broker outage must never fail the store that asked
        log.warning("push task not queued", extra={"reason": type(exc).__name__})
        return False
    return True


def queue_wake(*, tenant_id: int, subject: str, countdown: float) -> None:
    """Queue the claimed wake of the subject to leave in `countdown` seconds."""
    if not _queue(wake, [tenant_id, subject], countdown):
        sender.wake_given_back(tenant_id=tenant_id, subject=subject)


def _queue_retries(tenant_id: int, retries: list[sender.Retry]) -> None:
    for r in retries:
        if not _queue(resend, [tenant_id, r.device_id, r.attempt], r.delay_s):
            sender.wake_given_back(tenant_id=tenant_id, subject=r.subject)


@shared_task(name="apps.push.tasks.wake", ignore_result=True, counts_itself=True)
def wake(tenant_id: int, subject: str) -> str:
    """Send the subject's claimed wake to each of its devices."""
    done = sender.wake_send(tenant_id=tenant_id, subject=subject)
    _queue_retries(tenant_id, done.retries)
    return done.summary


@shared_task(name="apps.push.tasks.resend", ignore_result=True, counts_itself=True)
def resend(tenant_id: int, device_id: int, attempt: int) -> str:
    """Retry one device's wake (attempt `attempt`, counted from 0)."""
    done = sender.device_resend(tenant_id=tenant_id, device_id=device_id, attempt=attempt)
    _queue_retries(tenant_id, done.retries)
    return done.summary
