"""Run statistics of scheduled jobs, kept in the database so that every process (and every
host) reports the same figures on /metrics and operators can see when a job last ran."""

from __future__ import annotations

from django.db import models


class JobStat(models.Model):
    name = models.CharField(max_length=200, unique=True)
    runs = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)
    items = models.BigIntegerField(default=0, help_text="rows removed over all runs")
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_summary = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.runs} runs, {self.failures} failures"
