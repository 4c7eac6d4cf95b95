"""Receivers: Celery task outcomes for jobs outside apps.ops (their runs and failures show on
/metrics beside ours), and delivered pending events for the metrics."""

from __future__ import annotations

import logging

from celery.signals import task_failure, task_success
from django.core.signals import request_started

from apps.messaging.notify import pending_events_acknowledged, pushes_dropped

from .dbconn import close_dead_idle_connections
from .jobs import stat_record
from .metrics import observe_acknowledged, observe_pushes_dropped

log = logging.getLogger("mediator.jobs")


def _task_name(sender) -> str | None:
    """The job name a task's run is counted under: its function's name (`prune_metering`), like the
    jobs run_job counts (`purge_didcomm_messages`), so the console's Scheduled jobs list names only.
    None for Celery's own tasks and for tasks marked `counts_itself` (they run through run_job,
    which counts them, also when run by hand; or, like the push wakes, one runs per event and
    metrics of their own count them)."""
    name = getattr(sender, "name", None)
    if not name or name.startswith("celery.") or getattr(sender, "counts_itself", False):
        return None
    return name.rsplit(".", 1)[-1]


def on_task_success(sender=None, **kwargs) -> None:
    name = _task_name(sender)
    if name:
        _record(name, ok=True)


def on_task_failure(sender=None, **kwargs) -> None:
    name = _task_name(sender)
    if name:
        _record(name, ok=False)


def _record(name: str, *, ok: bool) -> None:
    try:
        stat_record(name=name, ok=ok, summary="ok" if ok else "failed")
    except Exception:  # noqa: BLE001 - statistics must never fail a task
        log.exception("could not record a task run")


def connect() -> None:
    """Connect every receiver once (dispatch_uid)."""
    request_started.connect(close_dead_idle_connections, dispatch_uid="apps.ops.dead_db_connections", weak=False)

    task_success.connect(on_task_success, dispatch_uid="apps.ops.task_success", weak=False)
    task_failure.connect(on_task_failure, dispatch_uid="apps.ops.task_failure", weak=False)
    pending_events_acknowledged.connect(observe_acknowledged, dispatch_uid="apps.ops.acknowledged", weak=False)
    pushes_dropped.connect(observe_pushes_dropped, dispatch_uid="apps.ops.pushes_dropped", weak=False)
