"""The "Generate usage report" form (admin page) and the dashboard's query-string filters."""

from __future__ import annotations

from datetime import date, timedelta

from django import forms
from django.conf import settings
from django.utils import timezone

from apps.tenants.models import Tenant

DASHBOARD_DAYS = (7, 14, 30, 90)
# Without a range in the query string the dashboard shows the days of the latest published report
# (a 30-day default drew 23 empty days around a 7-day report), else the last 7 days.
DASHBOARD_DEFAULT_DAYS = 7


def day_range_check(first: date, last: date) -> None:
    """Refuse a range with no days or longer than a report may be."""
    if last < first:
        raise forms.ValidationError(f"The range {first} – {last} has no days: the end date is before the start date.")
    if (last - first).days + 1 > settings.USAGE_REPORT_MAX_DAYS:
        raise forms.ValidationError(f"A range covers at most {settings.USAGE_REPORT_MAX_DAYS} days.")


def _utc_day_input() -> forms.DateInput:
    """A text box for YYYY-MM-DD: a browser's date picker would show the day in its own locale."""
    return forms.DateInput(
        format="%Y-%m-%d",
        attrs={"placeholder": "YYYY-MM-DD", "pattern": r"\d{4}-\d{2}-\d{2}", "inputmode": "numeric", "size": 10},
    )


class ReportRequestForm(forms.Form):
    date_from = forms.DateField(label="From (UTC day, YYYY-MM-DD)", widget=_utc_day_input())
    date_to = forms.DateField(label="To (UTC day, YYYY-MM-DD, inclusive)", widget=_utc_day_input())
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
        empty_value=None,
        error_messages={"invalid_choice": f"Days must be one of {', '.join(map(str, DASHBOARD_DAYS))}."},
    )
    date_from = forms.DateField(required=False, error_messages={"invalid": "date_from is not a date (YYYY-MM-DD)."})
    date_to = forms.DateField(required=False, error_messages={"invalid": "date_to is not a date (YYYY-MM-DD)."})

    def __init__(self, *args, tenants: list[Tenant], default_range: tuple[date, date] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tenants = tenants
        self.default_range = default_range

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
        if first is None and data["days"] is None and self.default_range is not None:
            first, last = self.default_range
        elif first is None:
            last = timezone.now().date()
            first = last - timedelta(days=(data["days"] or DASHBOARD_DEFAULT_DAYS) - 1)
        day_range_check(first, last)
        data["first"], data["last"] = first, last
        return data
