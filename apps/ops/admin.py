"""The scheduled jobs in the operator console, read-only (the jobs themselves write the figures)."""

from __future__ import annotations

from django.contrib import admin
from unfold.admin import ModelAdmin

from .models import JobStat


@admin.register(JobStat)
class JobStatAdmin(ModelAdmin):
    list_display = ["name", "runs", "failures", "items", "last_run_at", "last_success_at", "last_summary"]
    search_fields = ["name"]
    fields = list_display
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
