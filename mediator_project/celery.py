"""The Celery app and the whole beat schedule, in one place (docs/contributing.md §11).

Broker: Redis when CELERY_BROKER_URL or REDIS_URL is set; otherwise a serverless filesystem
broker under var/ so the embedded default runs a worker with beat and no server
(scripts/run_embedded_extras.sh). Production runs `celery worker` and `celery beat` as separate
processes on Redis (docs/operations.md).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")

app = Celery("mediator")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

MINUTE = 60.0

# name -> {"task": dotted task name, "schedule": seconds or crontab, ...}; each entry says why.
# Every maintenance task is idempotent and skips when another run of it is in progress, so a
# late or duplicated beat tick costs nothing. `expires` drops ticks no worker picked up in time.
app.conf.beat_schedule = {
    # DCTRL-0004 §5.3: "The recommended cleanup interval is 10 minutes." Nonces past
    # header.timestamp + window can never be replayed (the timestamp check refuses them first).
    "prune-nonces": {
        "task": "apps.ops.tasks.prune_nonces",
        "schedule": 10 * MINUTE,
        "options": {"expires": 10 * MINUTE},
    },
    # docs/protocol-readings.md §5: pending events expire after their tenant's TTL (default 30 days);
    # hourly keeps the overshoot under an hour whatever the TTL.
    "purge-expired-pending-events": {
        "task": "apps.ops.tasks.purge_pending_events",
        "schedule": 60 * MINUTE,
        "options": {"expires": 60 * MINUTE},
    },
    # Acknowledged contract requests are done with; unacknowledged ones expire after the tenant's
    # contract_request_ttl_days. Hourly, offset from the pending-event purge.
    "purge-contract-requests": {
        "task": "apps.ops.tasks.purge_contract_requests",
        "schedule": crontab(minute=20),
        "options": {"expires": 60 * MINUTE},
    },
    # Contracts expired for longer than MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS authorise
    # nothing and are no longer listed. Daily, at a quiet hour.
    "purge-expired-contracts": {
        "task": "apps.ops.tasks.purge_expired_contracts",
        "schedule": crontab(hour=3, minute=40),
        "options": {"expires": 6 * 60 * MINUTE},
    },
    # Deleted public events (DCTRL-0007) keep an empty tombstone that still counts for the
    # publisher's rate cap; once past that window it authorises nothing and goes.
    "prune-public-tombstones": {
        "task": "apps.ops.tasks.prune_public_tombstones",
        "schedule": 10 * MINUTE,
        "options": {"expires": 10 * MINUTE},
    },
    # UC-021 AF-5: queued DIDComm messages expire after their tenant's message_ttl_hours
    # (default 72 h); every 10 minutes keeps the overshoot small whatever the TTL.
    "purge-didcomm-messages": {
        "task": "apps.didcomm.tasks.purge_messages",
        "schedule": 10 * MINUTE,
        "options": {"expires": 10 * MINUTE},
    },
    # DIDComm replay protection: message ids are remembered for MEDIATOR_DIDCOMM_REPLAY_WINDOW_S
    # (1 h by default); every 10 minutes drops those past their expiry.
    "prune-didcomm-message-ids": {
        "task": "apps.didcomm.tasks.prune_message_ids",
        "schedule": 10 * MINUTE,
        "options": {"expires": 10 * MINUTE},
    },
    # DIDComm v1 outbound POSTs: each row has its own task with backoff; this sweep picks up rows
    # whose task was lost (broker down, worker killed). Every minute, so a lost POST waits ~1 min.
    "deliver-didcomm-outbound": {
        "task": "apps.didcomm.tasks.deliver_due_outbound",
        "schedule": MINUTE,
        "options": {"expires": MINUTE},
    },
    # The metering export: every few minutes the rows past the watermark leave the database once,
    # into the Parquet lake the reports read, with a snapshot of the reports' other inputs; then the
    # closed days' small files are compacted (spark_reports/lake.py; a report exports first too).
    # One export at a time (an advisory lock); a tick that finds one running waits, then finds
    # little left to do.
    "export-metering": {
        "task": "apps.usage.tasks.export_metering",
        "schedule": 5 * MINUTE,
        "options": {"expires": 5 * MINUTE},
    },
    # Metering retention: exported rows older than USAGE_METERING_KEEP_DAYS (2 days) leave the
    # database, any row older than its tenant's metering_retention_days too, and the lake drops
    # its day partitions older than USAGE_LAKE_RETENTION_DAYS. Implemented by the usage app.
    "prune-metering": {
        "task": "apps.usage.tasks.prune_metering",
        "schedule": crontab(hour=2, minute=10),
        "options": {"expires": 6 * 60 * MINUTE},
    },
    # The nightly usage report: Spark aggregates yesterday's metering for the staff
    # dashboard. After midnight UTC so that "yesterday" is complete, before the retention prune
    # would touch anything it needs.
    "nightly-usage-report": {
        "task": "apps.usage.tasks.nightly_usage_report",
        "schedule": crontab(hour=0, minute=30),
        "options": {"expires": 6 * 60 * MINUTE},
    },
}
