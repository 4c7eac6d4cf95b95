"""Command metering (metadata only) and usage report runs with their published results.

Metering rows never hold payloads, ciphertexts, tags or signatures (docs/protocol-readings.md §9).
Report result rows are written by the Spark job (spark_reports/) under the id of a run that is
still `running`; readers only ever see rows of `succeeded` runs, so a failed run never shows a
half-written report.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from apps.wire.display import utc_iso

from .records import DECENTRL

# Caps on what a metering row keeps (a verified sender DID can still be up to MAX_DID_LEN long).
SENDER_DID_MAX = 512
LABEL_MAX = 64
PROTOCOL_MAX = 16
DEFAULT_PROTOCOL = DECENTRL  # DIDComm traffic is metered as "didcomm-v2" / "didcomm-v1" into the same table


class CommandMeter(models.Model):
    """One finished command: who, when, what, how it ended, how big and how long."""

    # No database FK: rows are bulk-inserted off the request thread and must never fail on a
    # concurrently deleted tenant; orphans are pruned by `prune_metering`.
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+", db_index=False
    )
    at = models.DateTimeField()
    transport = models.CharField(max_length=8)
    # db_default: a constant default is a catalogue change on PostgreSQL 11+, no table rewrite.
    protocol = models.CharField(max_length=PROTOCOL_MAX, default=DEFAULT_PROTOCOL, db_default=DEFAULT_PROTOCOL)
    channel = models.CharField(max_length=32, blank=True, default="")
    command_type = models.CharField(max_length=LABEL_MAX, blank=True, default="")
    code = models.CharField(max_length=LABEL_MAX)
    http_status = models.PositiveSmallIntegerField()
    bytes_in = models.PositiveIntegerField()
    bytes_out = models.PositiveIntegerField()
    duration_ms = models.FloatField()
    # Only a sender whose signature verified (records.Record); NULL for every other command,
    # which still counts per tenant, type and code. NULL, not "": COUNT(DISTINCT) and Spark's
    # countDistinct skip it by definition. Older rows may hold "" for "none";
    # every reader (spark_reports/transform.py) treats both alike.
    sender_did = models.CharField(max_length=SENDER_DID_MAX, null=True, blank=True, default=None)  # noqa: DJ001

    class Meta:
        indexes = [
            # retention pruning, the Spark extract's date filter and the dashboard's live counters
            models.Index(fields=["tenant", "at"], name="meter_tenant_at"),
        ]

    def __str__(self) -> str:
        return f"{utc_iso(self.at)} {self.command_type or '-'} {self.code}"


class ReportRun(models.Model):
    """One execution of the usage report job over a date range and a set of tenants."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        # Shown as "Published", the word every page uses for a finished report's figures.
        SUCCEEDED = "succeeded", "Published"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class Kind(models.TextChoices):
        MANUAL = "manual", "Manual"
        NIGHTLY = "nightly", "Nightly"
        API = "api", "API"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.MANUAL)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    date_from = models.DateField(help_text="first day (UTC), inclusive")
    date_to = models.DateField(help_text="last day (UTC), inclusive")
    tenants = models.ManyToManyField("tenants.Tenant", blank=True, related_name="+", help_text="empty = all tenants")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    row_counts = models.JSONField(default=dict, blank=True)
    # While running: what the job last reported (stage, tasks done of total, rows to read, bytes read).
    progress = models.JSONField(default=dict, blank=True)
    # When each stage of the run began (epoch seconds, STAGES order): queued, claimed by a worker,
    # starting the engine, the job's steps, publishing, published. The run page shows them as its
    # progress; bench/usage_click_bench.py cuts the span staff wait into them.
    stages = models.JSONField(default=dict, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Why a run failed, in words for staff; the technical detail is in log_tail.
    error = models.CharField(max_length=300, blank=True, default="")
    log_tail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "date_to"], name="reportrun_status_day")]

    def __str__(self) -> str:
        return f"report #{self.pk} {self.date_from}..{self.date_to} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.SUCCEEDED, self.Status.FAILED, self.Status.CANCELLED)

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class ReportDaily(models.Model):
    """Per tenant and day: the headline numbers of a report run."""

    run = models.ForeignKey(ReportRun, on_delete=models.CASCADE, related_name="daily")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    commands = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    error_rate = models.FloatField(default=0)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)
    latency_p50_ms = models.FloatField(null=True)
    latency_p95_ms = models.FloatField(null=True)
    active_identities = models.BigIntegerField(default=0)
    new_registrations = models.BigIntegerField(default=0)
    pending_created = models.BigIntegerField(default=0)
    pending_delivered = models.BigIntegerField(default=0)
    delivery_p50_ms = models.FloatField(null=True)
    delivery_p95_ms = models.FloatField(null=True)
    stored_events = models.BigIntegerField(default=0)
    stored_bytes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tenant", "day"], name="report_daily_unique")]
        indexes = [models.Index(fields=["tenant", "day"], name="report_daily_tenant_day")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day}: {self.commands} commands"


class ReportCommandType(models.Model):
    """Per tenant, day, protocol and command type: how many commands, how many failed."""

    run = models.ForeignKey(ReportRun, on_delete=models.CASCADE, related_name="by_type")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    protocol = models.CharField(max_length=PROTOCOL_MAX, default=DEFAULT_PROTOCOL, db_default=DEFAULT_PROTOCOL)
    command_type = models.CharField(max_length=LABEL_MAX)
    commands = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "tenant", "day", "protocol", "command_type"], name="report_type_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day} {self.command_type}: {self.commands}"


class ReportErrorCode(models.Model):
    """Per tenant, day and result code: count and share of that day's commands."""

    run = models.ForeignKey(ReportRun, on_delete=models.CASCADE, related_name="by_code")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    code = models.CharField(max_length=LABEL_MAX)
    commands = models.BigIntegerField(default=0)
    rate = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tenant", "day", "code"], name="report_code_unique")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day} {self.code}: {self.commands}"


class ReportTopIdentity(models.Model):
    """Per tenant and day: the ten sender DIDs with the most commands."""

    run = models.ForeignKey(ReportRun, on_delete=models.CASCADE, related_name="top_identities")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    rank = models.PositiveSmallIntegerField()
    sender_did = models.CharField(max_length=SENDER_DID_MAX)
    commands = models.BigIntegerField(default=0)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "tenant", "day", "rank"], name="report_top_unique")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day} #{self.rank}"


# A run's result rows, one model per table (a run stages and publishes the four together).
ReportResult = ReportDaily | ReportCommandType | ReportErrorCode | ReportTopIdentity
RESULT_MODELS: dict[str, type[ReportResult]] = {
    "daily": ReportDaily,
    "by_type": ReportCommandType,
    "by_code": ReportErrorCode,
    "top": ReportTopIdentity,
}


class MeterExport(models.Model):
    """One attempt of the metering export (spark_reports/lake_export.py; this table is the lake's
    commit log, spark_reports/lake_log.py): the id range (lo_id, hi_id] of `usage_commandmeter`
    written to the Parquet lake under `export=<id>`. Only `committed` attempts are part of the lake; the export watermark is the largest committed hi_id. A `pending` attempt
    that a later export finds was interrupted (a crash, kill -9) is marked `abandoned` and its
    files are never read; its rows are exported again by the next attempt. Every attempt also writes
    a snapshot of the report's other inputs for the days from `inputs_from` on (all days when null).

    A compaction (`day` set) rewrites one closed day's files of the exports up to `covers` as
    `export=-<id>`; once `compacted`, readers take those instead of the files it replaces, which are
    deleted later (`cleaned_at`)."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        COMMITTED = "committed", "Committed"
        ABANDONED = "abandoned", "Abandoned"
        COMPACTED = "compacted", "Compacted"

    lo_id = models.BigIntegerField(help_text="exclusive")
    hi_id = models.BigIntegerField(help_text="inclusive")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    rows = models.BigIntegerField(default=0)
    first_at = models.DateTimeField(null=True, blank=True)
    last_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    inputs_from = models.DateField(null=True, blank=True, help_text="first day of its inputs snapshot")
    day = models.DateField(null=True, blank=True, help_text="a compaction's day")
    covers = models.BigIntegerField(null=True, blank=True, help_text="a compaction's last export")
    cleaned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "hi_id"], name="meterexport_state_hi")]

    def __str__(self) -> str:
        return f"export {self.pk} ({self.lo_id}, {self.hi_id}] {self.state}"
