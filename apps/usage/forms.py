"""The "Generate usage report" form (admin page and, through the serializer, the API)."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.conf import settings
from django.utils import timezone

from apps.tenants.models import Tenant


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
            if last < first:
                raise forms.ValidationError("The end date is before the start date.")
            if (last - first).days + 1 > settings.USAGE_REPORT_MAX_DAYS:
                raise forms.ValidationError(f"A report covers at most {settings.USAGE_REPORT_MAX_DAYS} days.")
        return data
