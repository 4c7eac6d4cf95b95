"""Operator console: report runs (with the "Generate usage report" page) and read-only metering."""

from __future__ import annotations

import re

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from apps.tenants.permissions import operator_may
from apps.tenants.templatetags.mediator import did_cell
from apps.wire.display import human_bytes, human_ms, utc_iso

from . import services
from .forms import ReportRequestForm
from .models import CommandMeter, ReportRun
from .permissions import REPORT_RUN_ACTIONS

try:  # the console theme (django-unfold) when installed, else Django's own admin classes
    from unfold.admin import ModelAdmin as BaseModelAdmin
except ImportError:  # pragma: no cover
    BaseModelAdmin = admin.ModelAdmin


@admin.register(ReportRun)
class ReportRunAdmin(BaseModelAdmin):
    list_display = ("id", "kind", "status", "date_from", "date_to", "created_at", "duration", "results_link")
    list_filter = ("status", "kind")
    list_select_related = ("requested_by",)
    readonly_fields = (
        "kind",
        "status",
        "date_from",
        "date_to",
        "tenants",
        "requested_by",
        "created_at",
        "started_at",
        "finished_at",
        "row_counts",
        "log_tail",
        "results_link",
    )
    change_list_template = "usage/admin/reportrun_change_list.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs are created by "Generate usage report", not typed in

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    @admin.display(description="duration")
    def duration(self, obj: ReportRun) -> str:
        return f"{obj.duration_s:.1f} s" if obj.duration_s is not None else "-"

    @admin.display(description="results")
    def results_link(self, obj: ReportRun) -> str:
        return format_html('<a href="{}">open</a>', reverse("usage:run-detail", args=[obj.pk]))

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None) -> HttpResponse:
        """One run page: the admin's own page for a run is the dashboard's (live progress, Cancel,
        results), not a second one with the row counts as raw JSON."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            pk = int(object_id)
        except ValueError:
            return super().change_view(request, object_id, form_url, extra_context)
        return HttpResponseRedirect(reverse("usage:run-detail", args=[pk]))

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        may_request = operator_may(request.user, ReportRun, REPORT_RUN_ACTIONS["request"])
        return super().changelist_view(request, {**(extra_context or {}), "may_request_run": may_request})

    def get_urls(self):
        return [
            path("generate/", self.admin_site.admin_view(self.generate_view), name="usage_reportrun_generate"),
            *super().get_urls(),
        ]

    def generate_view(self, request: HttpRequest) -> HttpResponse:
        """Parse the form, request one run, go to its page (which follows it to completion)."""
        if not request.user.is_staff:
            return HttpResponseRedirect(reverse("admin:login"))
        if not operator_may(request.user, ReportRun, REPORT_RUN_ACTIONS["request"]):
            raise PermissionDenied
        form = ReportRequestForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            run = services.report_run_request(
                date_from=form.cleaned_data["date_from"],
                date_to=form.cleaned_data["date_to"],
                tenants=list(form.cleaned_data["tenants"]),
                requested_by=request.user,
            )
            # No "queued" note: the run's page says what the run is doing, and a note would stay
            # there, stale, after the run has finished.
            return HttpResponseRedirect(reverse("usage:run-detail", args=[run.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": "Generate usage report",
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "usage/admin/generate.html", context)


def _breakable(text: str):
    """`QUERY_PENDING_CONTRACT_REQUESTS` with a line-break chance after each _ and /, so a long
    command type or code wraps inside its column instead of widening the list."""
    return format_html_join("", "{}<wbr>", ((part,) for part in re.split(r"(?<=[_/])", text)))


@admin.register(CommandMeter)
class CommandMeterAdmin(BaseModelAdmin):
    """Metadata only; never editable (the admin is not a second write path)."""

    # Fits 1280 px beside the sidebar: the tenant by slug, long names breakable at _ and /, sizes
    # in one column.
    list_display = ("time", "tenant_slug", "transport", "command", "result", "status", "sizes", "duration")
    list_filter = ("transport", "code")
    list_select_related = ("tenant",)
    date_hierarchy = "at"
    show_full_result_count = False
    # A meter's page, in words (the model's field names would read "Http status", "Sender did").
    fields = (
        "time",
        "tenant",
        "transport",
        "protocol",
        "channel",
        "command_type",
        "code",
        "status",
        "size_in",
        "size_out",
        "duration",
        "sender",
    )
    readonly_fields = fields

    @admin.display(description="tenant", ordering="tenant__slug")
    def tenant_slug(self, obj: CommandMeter) -> str:
        return obj.tenant.slug

    @admin.display(description="command type", ordering="command_type")
    def command(self, obj: CommandMeter):
        return _breakable(obj.command_type or "–")

    @admin.display(description="code", ordering="code")
    def result(self, obj: CommandMeter):
        return _breakable(obj.code)

    @admin.display(description="bytes in / out")
    def sizes(self, obj: CommandMeter) -> str:
        return f"{human_bytes(obj.bytes_in)} / {human_bytes(obj.bytes_out)}"

    @admin.display(description="time (UTC)", ordering="at")
    def time(self, obj: CommandMeter) -> str:
        return utc_iso(obj.at)

    @admin.display(description="HTTP status", ordering="http_status")
    def status(self, obj: CommandMeter) -> int:
        return obj.http_status

    @admin.display(description="sender DID")
    def sender(self, obj: CommandMeter):
        return did_cell(obj.sender_did) if obj.sender_did else "none verified"

    @admin.display(description="bytes in", ordering="bytes_in")
    def size_in(self, obj: CommandMeter) -> str:
        return human_bytes(obj.bytes_in)

    @admin.display(description="bytes out", ordering="bytes_out")
    def size_out(self, obj: CommandMeter) -> str:
        return human_bytes(obj.bytes_out)

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, obj: CommandMeter) -> str:
        return human_ms(obj.duration_ms)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
