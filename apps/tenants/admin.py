"""The tenants app's own console pages: the audit log (read-only), users and groups in the
console's theme, and operator API tokens. The tenant pages span apps and live in apps/console/ (admin.py wires them)."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin as BaseGroupAdmin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.models import Group, User
from django.template.response import TemplateResponse
from django.utils.html import format_html
from unfold.admin import ModelAdmin
from unfold.decorators import display
from unfold.forms import AdminPasswordChangeForm, UserChangeForm, UserCreationForm

from apps.wire.display import utc_iso

from .models import ApiToken, AuditEntry
from .services import api_token_issue


def _pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True) if value is not None else "—"


class ReadOnlyModelAdmin(ModelAdmin):
    """A console page that only shows rows: what it lists is written by services or jobs, never
    added, edited or deleted here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyModelAdmin):
    """The audit log, append-only."""

    list_display = ["at", "actor_name", "via", "action", "tenant_slug"]
    list_filter = ["via", "action", "tenant"]
    search_fields = ["actor_name", "action", "tenant_slug"]
    date_hierarchy = "at"
    list_select_related = ["tenant"]
    fields = ["at", "actor_name", "via", "action", "tenant_slug", "before_json", "after_json"]
    readonly_fields = fields

    @display(description="Before")
    def before_json(self, obj: AuditEntry):
        return format_html("<pre>{}</pre>", _pretty(obj.before))

    @display(description="After")
    def after_json(self, obj: AuditEntry):
        return format_html("<pre>{}</pre>", _pretty(obj.after))


# Users and groups in the same theme.
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class UserAdmin(BaseUserAdmin, ModelAdmin):
    form = UserChangeForm
    add_form = UserCreationForm
    change_password_form = AdminPasswordChangeForm


@admin.register(Group)
class GroupAdmin(BaseGroupAdmin, ModelAdmin):
    pass


class ApiTokenForm(forms.ModelForm):
    """Adding a token names its user; the key is made by the service, not typed."""

    class Meta:
        model = ApiToken
        fields = ["user"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "user" in self.fields:  # the add form; a token's own page is read-only
            self.fields["user"].queryset = User.objects.filter(is_staff=True, is_active=True).order_by("username")
            self.fields["user"].help_text = "A staff user; the API allows what this user's permissions allow."


@admin.register(ApiToken)
class ApiTokenAdmin(ModelAdmin):
    """Operator API tokens: issued here or by `manage.py operator_token`; the key shows once, on
    the page after Add, and every list shows only its first characters (only a digest is stored)."""

    form = ApiTokenForm
    list_display = ["key_prefix", "user", "created"]
    list_select_related = ["user"]
    fields = ["user"]
    readonly_fields: list[str] = []

    @display(description="Key")
    def key_prefix(self, obj: ApiToken) -> str:
        return f"{obj.prefix}…"

    @display(description="Created", ordering="created_at")
    def created(self, obj: ApiToken) -> str:
        return utc_iso(obj.created_at)

    def get_fields(self, request, obj=None):
        return ["user"] if obj is None else ["key_prefix", "user", "created"]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else ["key_prefix", "user", "created"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a token is issued or deleted, never edited

    def save_model(self, request, obj, form, change) -> None:
        issued = api_token_issue(user=form.cleaned_data["user"])
        obj.pk, obj.prefix, obj.digest, obj.created_at = (
            issued.token.pk,
            issued.token.prefix,
            issued.token.digest,
            issued.token.created_at,
        )
        obj._state.adding = False
        request.issued_api_key = issued.key

    def response_add(self, request, obj, post_url_continue=None):
        """The only page that shows the key: rendered in this response, stored nowhere."""
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"API token for {obj.user}",
            "token": obj,
            "key": request.issued_api_key,
        }
        response = TemplateResponse(request, "admin/tenants/apitoken/issued.html", context)
        response["Cache-Control"] = "no-store"
        return response
