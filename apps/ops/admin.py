"""The scheduled jobs in the operator console, read-only (the jobs themselves write the figures)."""

from __future__ import annotations

from django.contrib import admin

from apps.tenants.admin import ReadOnlyModelAdmin

from .models import JobStat


@admin.register(JobStat)
class JobStatAdmin(ReadOnlyModelAdmin):
    list_display = ["name", "runs", "failures", "items", "last_run_at", "last_success_at", "last_summary"]
    search_fields = ["name"]
    fields = list_display
    readonly_fields = fields
