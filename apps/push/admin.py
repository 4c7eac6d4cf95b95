"""The push providers in the operator console: each tenant's provider with its state and last
error; credentials are write-only (entered, checked with the provider's `check` on save, sealed,
never shown back)."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from unfold.admin import ModelAdmin

from . import services
from .models import PushProvider


class PushProviderForm(forms.ModelForm):
    """`credentials_json` is never filled from the stored value; empty keeps what is sealed."""

    credentials_json = forms.CharField(
        label="Credentials (JSON)",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Write-only: enter to set or replace; leave empty to keep the current ones. See docs/push.md.",
    )

    class Meta:
        model = PushProvider
        fields = ["tenant", "kind", "enabled", "settings"]

    def clean(self):
        data = super().clean()
        raw = data.get("credentials_json") or ""
        credentials = None
        if raw:
            try:
                credentials = json.loads(raw)
            except ValueError:
                raise forms.ValidationError("the credentials are not JSON") from None
            if not isinstance(credentials, dict):
                raise forms.ValidationError("the credentials are a JSON object")
        elif not (self.instance.pk and self.instance.has_credentials):
            raise forms.ValidationError("enter the credentials")
        provider = self.instance
        provider.tenant = data.get("tenant") or provider.tenant
        provider.kind = data.get("kind") or provider.kind
        self._credentials = credentials
        settings_ = data.get("settings") or {}
        if not isinstance(settings_, dict):
            raise forms.ValidationError("the settings are a JSON object")
        try:
            services.provider_check(provider=provider, settings_=settings_, credentials=credentials)
        except services.ProviderInvalid as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(PushProvider)
class PushProviderAdmin(ModelAdmin):
    form = PushProviderForm
    list_display = ["tenant", "kind", "enabled", "state", "last_error", "last_success_at", "last_failure_at"]
    list_select_related = ["tenant"]
    list_filter = ["kind", "state", "enabled"]
    readonly_fields = ["state", "last_error", "last_success_at", "last_failure_at", "has_credentials"]

    def get_readonly_fields(self, request, obj=None):
        fields = list(self.readonly_fields)
        return [*fields, "tenant", "kind"] if obj is not None else fields

    def save_model(self, request, obj, form, change):
        services.provider_save(
            provider=obj,
            enabled=form.cleaned_data["enabled"],
            settings_=form.cleaned_data.get("settings") or {},
            credentials=form._credentials,
        )
