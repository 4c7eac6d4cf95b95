"""Celery tasks: thin adapters over services (docs/contributing.md §11). Beat entries live in mediator_project/celery.py."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_process_shutdown, worker_ready, worker_shutdown
from django.conf import settings

from . import services


@worker_ready.connect
def _prestart_engine(**_kwargs) -> None:
    """`make run`'s worker starts and warms the Spark engine at once (USAGE_ENGINE_PRESTART), in
    the background, so that the first report finds it ready."""
    if settings.USAGE_ENGINE_PRESTART:
        services.report_engine_prestart()


@worker_shutdown.connect
@worker_process_shutdown.connect
def _stop_kept_job(**_kwargs) -> None:
    """The worker process's kept report job process ends with it (a pool's child, or a solo worker)."""
    services.report_job_stop()


@shared_task(name="apps.usage.tasks.run_usage_report")
def run_usage_report(run_id: int) -> str:
    """Run one queued ReportRun's Spark job as a subprocess and publish or fail it."""
    run = services.report_run_execute(run_id=run_id)
    return f"usage report {run.pk} {run.status}"


@shared_task(name="apps.usage.tasks.nightly_usage_report")
def nightly_usage_report() -> str:
    """The usage report of every day not reported yet through yesterday, for every tenant."""
    run = services.nightly_report_run()
    if run is None:
        return "nightly usage report: yesterday is already reported"
    days = f"{run.date_from}" if run.date_from == run.date_to else f"{run.date_from}..{run.date_to}"
    return f"nightly usage report {run.pk} for {days} {run.status}"


@shared_task(name="apps.usage.tasks.export_metering")
def export_metering() -> str:
    """Export the metering rows past the watermark to the Parquet lake and compact its closed days
    (a Spark job)."""
    return services.metering_export()


@shared_task(name="apps.usage.tasks.prune_metering")
def prune_metering() -> str:
    """Drop exported metering rows past USAGE_METERING_KEEP_DAYS, rows past each tenant's
    retention, and the lake's day partitions past USAGE_LAKE_RETENTION_DAYS."""
    return services.metering_prune().summary()
