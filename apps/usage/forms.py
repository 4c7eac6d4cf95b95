"""The "Generate usage report" form (admin page) and the dashboard's query-string filters."""

from __future__ import annotations

from datetime import date, timedelta

from django import forms
from django.conf import settings
from django.utils import timezone

from apps.tenants.models import Tenant

DASHBOARD_DAYS = (7, 14, 30, 90)
DASHBOARD_DEFAULT_DAYS = 30


def day_range_check(first: date, last: date) -> None:
    """Refuse a range with no days or longer than a report may be."""
    if last < first:
        raise forms.ValidationError(f"The range {first} – {last} has no days: the end date is before the start date.")
    if (last - first).days + 1 > settings.USAGE_REPORT_MAX_DAYS:
        raise forms.ValidationError(f"A range covers at most {settings.USAGE_REPORT_MAX_DAYS} days.")


class ReportRequestForm(forms.Form):
    date_from = forms.DateField(label="From (UTC day)", widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(label="To (UTC day, inclusive)", widget=forms.DateInput(attrs={"type": "date"}))
    tenants = forms.ModelMultipleChoiceField(
        queryset=Tenant.objects.order_by("slug"),
        required=False,
        help_text="None selected = all tenants.",
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args, **kwargs):
        today = timezone.now().date()
        kwargs.setdefault("initial", {"date_from": today - timedelta(days=6), "date_to": today})
        super().__init__(*args, **kwargs)

    def clean(self):
        data = super().clean()
        first, last = data.get("date_from"), data.get("date_to")
        if first and last:
            day_range_check(first, last)
        return data


class DashboardFilterForm(forms.Form):
    """`?tenant=<slug>&days=7|14|30|90`, or `?date_from=…&date_to=…` (UTC days, inclusive) instead of days."""

    tenant = forms.CharField(required=False)
    days = forms.TypedChoiceField(
        choices=[(d, d) for d in DASHBOARD_DAYS],
        coerce=int,
        required=False,
        empty_value=DASHBOARD_DEFAULT_DAYS,
        error_messages={"invalid_choice": f"Days must be one of {', '.join(map(str, DASHBOARD_DAYS))}."},
    )
    date_from = forms.DateField(required=False, error_messages={"invalid": "date_from is not a date (YYYY-MM-DD)."})
    date_to = forms.DateField(required=False, error_messages={"invalid": "date_to is not a date (YYYY-MM-DD)."})

    def __init__(self, *args, tenants: list[Tenant], **kwargs):
        super().__init__(*args, **kwargs)
        self.tenants = tenants

    def clean_tenant(self) -> Tenant | None:
        slug = self.cleaned_data["tenant"]
        if not slug:
            return None
        found = next((t for t in self.tenants if t.slug == slug), None)
        if found is None:
            raise forms.ValidationError(f"Unknown tenant: {slug}.")
        return found

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        first, last = data.get("date_from"), data.get("date_to")
        if (first is None) != (last is None):
            raise forms.ValidationError("Give both date_from and date_to, or neither.")
        if first is None:
            last = timezone.now().date()
            first = last - timedelta(days=data["days"] - 1)
        day_range_check(first, last)
        data["first"], data["last"] = first, last
        return data
