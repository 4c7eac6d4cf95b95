"""The push section of the operator console (docs/push.md, "When pushes fail (operators)").

- On a tenant's page (`TENANT_INLINES`, named by apps/console/admin.py's TenantAdmin): the tenant's
  providers, each with its state and last error, and its push policy (the wake interval, a visible
  alert or the silent default).
- "Push providers": every tenant's providers in one list, to find the failing ones; a provider's
  page edits it with the same form.

Credentials are write-only in both (entered, checked with the provider's `check` on save, sealed,
never shown back; empty keeps the sealed ones): one form, `PushProviderForm`, saved by one service
call. Each section needs the push models' own Django permissions, and editing it on the tenant page
also needs the right to change the tenant (the page is saved as a whole).
"""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.options import InlineModelAdmin
from django.forms.models import BaseInlineFormSet
from unfold.admin import ModelAdmin, StackedInline
from unfold.widgets import UnfoldAdminPasswordWidget

from apps.tenants.models import Tenant
from apps.tenants.permissions import operator_may
from apps.tenants.services import Actor

from . import services
from .models import PushPolicy, PushProvider


def _admin_actor(request) -> Actor:
    return Actor(user=request.user, via="admin")


class PushProviderForm(forms.ModelForm):
    """`credentials_json` is never filled from the stored value; empty keeps what is sealed. An
    existing provider's kind is fixed (its sealed credentials are bound to it)."""

    credentials_json = forms.CharField(
        label="Credentials (JSON)",
        required=False,
        strip=False,
        widget=UnfoldAdminPasswordWidget(render_value=False),
        help_text="Write-only: enter to set or replace; leave empty to keep the current ones. See docs/push.md.",
    )

    class Meta:
        model = PushProvider
        fields = ["tenant", "kind", "enabled", "settings"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and "kind" in self.fields:
            self.fields["kind"].disabled = True

    def clean(self):
        data = super().clean()
        raw = (data.get("credentials_json") or "").strip()
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
            raise forms.ValidationError(f"{provider.get_kind_display()}: {exc}") from None
        return data

    def save_provider(self, *, actor: Actor) -> PushProvider:
        """Save the checked provider through the one service (sealing the credentials entered; audited)."""
        return services.provider_save(
            provider=self.instance,
            actor=actor,
            enabled=self.cleaned_data["enabled"],
            settings_=self.cleaned_data.get("settings") or {},
            credentials=self._credentials,
        )


class PushPolicyForm(forms.ModelForm):
    class Meta:
        model = PushPolicy
        fields = ["wake_interval_s", "visible", "title_loc_key", "body_loc_key", "collapse_id"]
        labels = {
            "wake_interval_s": "Wake interval (seconds)",
            "visible": "Visible alert",
            "title_loc_key": "Title localisation key",
            "body_loc_key": "Body localisation key",
            "collapse_id": "Collapse id",
        }
        help_texts = {
            "wake_interval_s": "A sleeping client is woken at most once per this interval (and once between "
            "two pickups). Empty: the deployment's default.",
            "visible": "Off (the default): a silent wake that says nothing. On: an alert from the app's own "
            "strings; iOS delivers silent pushes late or never, but the provider sees that an alert was sent.",
            "title_loc_key": "The app's string for the alert's title (optional).",
            "body_loc_key": "The app's string for the alert's text (required for a visible alert).",
            "collapse_id": "A newer alert replaces an older one with the same id (optional).",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "wake_interval_s" in self.fields:
            self.fields["wake_interval_s"].help_text += f" Now {settings.PUSH_WAKE_INTERVAL_S} s."

    def clean(self):
        data = super().clean()
        # The service's rule (policy_update applies it again when the formset saves).
        if not any(name in self.errors for name in services.POLICY_FIELDS):
            for name, messages in services.policy_errors(data).items():
                for message in messages:
                    self.add_error(name, message)
        return data


class _ProviderFormSet(BaseInlineFormSet):
    """The tenant's providers: each saved through the service, never by the model form. `actor`
    is the request's (`_TenantSection.get_formset`)."""

    actor: Actor

    @classmethod
    def get_default_prefix(cls) -> str:
        return "push_providers"  # the tenant foreign key has no reverse name ("+")

    def save_new(self, form, commit=True):
        return form.save_provider(actor=self.actor)

    def save_existing(self, form, obj, commit=True):
        return form.save_provider(actor=self.actor)

    def delete_existing(self, obj, commit=True):
        if commit:
            services.provider_delete(provider=obj, actor=self.actor)


class _PolicyFormSet(BaseInlineFormSet):
    """The tenant's push policy: saved through `services.policy_update` (audited), never by the
    model form."""

    actor: Actor

    @classmethod
    def get_default_prefix(cls) -> str:
        return "push_policy"

    def _update(self, form) -> PushPolicy:
        changes = {name: form.cleaned_data[name] for name in services.POLICY_FIELDS if name in form.cleaned_data}
        return services.policy_update(tenant=self.instance, actor=self.actor, **changes)

    def save_new(self, form, commit=True):
        return self._update(form)

    def save_existing(self, form, obj, commit=True):
        return self._update(form)


class _TenantSection(InlineModelAdmin):
    """On the tenant page only (not when adding a tenant), by the push model's own permissions;
    editable only by those who may also change the tenant (the page is saved as a whole)."""

    template_before = "admin/push/inline_errors.html"

    def _tenant_editable(self, request, obj) -> bool:
        return obj is not None and operator_may(request.user, Tenant, "change")

    def get_formset(self, request, obj=None, **kwargs):
        # A class of its own per call (inlineformset_factory): the request's actor for its saves.
        formset = super().get_formset(request, obj, **kwargs)
        formset.actor = _admin_actor(request)
        return formset

    def get_queryset(self, request):
        # Django asks here without the tenant (the formset then keeps the tenant's rows): the push
        # model's own permissions decide, as they did for the section to be on the page at all.
        queryset = self.model._default_manager.get_queryset()
        model_perms = super()  # the inline's permissions, without the tenant-page rules below
        if not (model_perms.has_view_permission(request) or model_perms.has_change_permission(request)):
            return queryset.none()
        return queryset

    def has_view_permission(self, request, obj=None) -> bool:
        return obj is not None and super().has_view_permission(request, obj)

    def has_add_permission(self, request, obj=None) -> bool:
        return self._tenant_editable(request, obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._tenant_editable(request, obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._tenant_editable(request, obj) and super().has_delete_permission(request, obj)


class PushProviderInline(_TenantSection, StackedInline):
    """The tenant's push providers: one per kind, state and last error read-only."""

    model = PushProvider
    form = PushProviderForm
    formset = _ProviderFormSet
    extra = 0
    max_num = len(PushProvider.Kind.choices)
    verbose_name = "push provider"
    verbose_name_plural = "Push providers"
    readonly_fields = ["has_credentials", "state", "last_error", "last_success_at", "last_failure_at"]
    fields = ["kind", "enabled", "settings", "credentials_json", *readonly_fields]

    @admin.display(description="Credentials", boolean=True)
    def has_credentials(self, obj: PushProvider) -> bool:
        return obj.has_credentials


class PushPolicyInline(_TenantSection, StackedInline):
    """The tenant's push policy: at most one row; none is the defaults."""

    model = PushPolicy
    form = PushPolicyForm
    formset = _PolicyFormSet
    extra = 1
    max_num = 1
    can_delete = False
    verbose_name = "push policy"
    verbose_name_plural = "Push policy"


# The push section of a tenant's page, in order (TenantAdmin.inlines).
TENANT_INLINES = [PushPolicyInline, PushProviderInline]


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
        form.save_provider(actor=_admin_actor(request))

    def delete_model(self, request, obj):
        services.provider_delete(provider=obj, actor=_admin_actor(request))

    def delete_queryset(self, request, queryset):
        # The bulk "delete selected": each provider through the service (one audit entry each).
        actor = _admin_actor(request)
        for provider in queryset.select_related("tenant"):
            services.provider_delete(provider=provider, actor=actor)
