"""The operator console's frame: its sidebar (UNFOLD["SIDEBAR"]["navigation"], from
settings.CONSOLE_NAVIGATION), its home page (DASHBOARD_CALLBACK: figures of several apps) and its
site link (SITE_URL)."""

from __future__ import annotations

from typing import cast

from django.apps import apps as django_apps
from django.conf import settings
from django.contrib import admin
from django.db.models import Count, F
from django.urls import NoReverseMatch, reverse
from django.utils.text import capfirst

from apps.didcomm.selectors import queued_annotation
from apps.messaging.selectors import tenant_list_annotations
from apps.tenants.models import AuditEntry, Tenant
from apps.tenants.permissions import operator_may
from apps.usage.models import ReportRun


def console_site_url(request) -> str | None:
    """UNFOLD["SITE_URL"]: the usage dashboard for a user who may open it, else no site link (the
    login page's "Return to site" would lead an anonymous visitor back to the login)."""
    return "/dashboard/" if operator_may(request.user, ReportRun, "view") else None


def _nav_item(request, entry: dict) -> list[dict]:
    """Unfold sidebar items for one CONSOLE_NAVIGATION entry: none when its page does not exist
    (a model not registered, an app without admin pages) or the user may not open it (a model's
    view or change permission; for a `url` entry, the `needs` (model, verb) its view checks)."""
    if "url" in entry:
        # A page of its own (not a model's admin pages) names the model permission it needs.
        if "needs" in entry:
            model_name, verb = entry["needs"]
            if not operator_may(request.user, django_apps.get_model(model_name), verb):
                return []
        try:
            link = reverse(entry["url"])
        except NoReverseMatch:
            return []
        return [{"title": entry["title"], "icon": entry.get("icon"), "link": link}]
    if "app" in entry:
        models = [m for m in admin.site._registry if m._meta.app_label == entry["app"]]
    else:
        try:
            models = [django_apps.get_model(entry["model"])]
        except LookupError:
            return []
    items = []
    for model in sorted(models, key=lambda m: str(m._meta.verbose_name_plural)):
        model_admin = admin.site._registry.get(model)
        if model_admin is None or not model_admin.has_view_or_change_permission(request):
            continue
        opts = model._meta
        items.append(
            {
                "title": entry.get("title") or capfirst(str(opts.verbose_name_plural)),
                "icon": entry.get("icon"),
                "link": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
            }
        )
    return items


def console_navigation(request) -> list[dict]:
    """settings.CONSOLE_NAVIGATION as unfold's sidebar groups; empty groups are left out."""
    groups = []
    navigation = cast(list[tuple[str, list[dict]]], settings.CONSOLE_NAVIGATION)
    for title, entries in navigation:
        items = [item for entry in entries for item in _nav_item(request, entry)]
        if items:
            groups.append({"title": title, "separator": True, "collapsible": False, "items": items})
    return groups


OVERVIEW_ROWS = 5


def console_overview(request, context: dict) -> dict:
    """The console's home page: tenants by status, the suspended ones, the largest queues,
    recent operator actions and the last report run, each shown only to those who may read it."""
    user = request.user
    overview: dict = {}
    if operator_may(user, Tenant, "view"):
        counts = dict(Tenant.objects.order_by().values_list("status").annotate(n=Count("id")))
        overview["status_counts"] = [(label, counts.get(value, 0), value) for value, label in Tenant.Status.choices]
        overview["tenant_total"] = sum(counts.values())
        overview["suspended"] = list(Tenant.objects.filter(status=Tenant.Status.SUSPENDED).order_by("slug")[:10])
        # Both protocols' queues: Decentrl's pending events and DIDComm's queued messages.
        queues = Tenant.objects.annotate(**tenant_list_annotations(), stat_didcomm_queued=queued_annotation())
        queues = queues.annotate(stat_queued=F("stat_pending") + F("stat_didcomm_queued"))
        overview["largest_queues"] = [
            t for t in queues.order_by("-stat_queued", "slug")[:OVERVIEW_ROWS] if t.stat_queued
        ]
    if operator_may(user, AuditEntry, "view"):
        overview["recent_actions"] = list(AuditEntry.objects.order_by("-at", "-id")[:8])
    if operator_may(user, ReportRun, "view"):
        # The headline is the latest published report; a newer run that did not publish (queued,
        # running, failed, cancelled) is mentioned after it.
        overview["last_good_run"] = (
            ReportRun.objects.filter(status=ReportRun.Status.SUCCEEDED).order_by("-finished_at", "-id").first()
        )
        newest = ReportRun.objects.order_by("-created_at", "-id").first()
        overview["newer_run"] = newest if newest and newest != overview["last_good_run"] else None
        overview["may_view_runs"] = True
    # A staff member who may read none of it is told why, not shown an empty page.
    overview["nothing"] = not overview
    context.update(overview=overview, title="Overview")
    return context
