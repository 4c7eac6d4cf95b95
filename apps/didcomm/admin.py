"""The DIDComm part of the operator console: policy per tenant (editable), mediator identities and
grants (read-only, protocol-owned), per-recipient queue depths, and the revoke-grant action."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.html import format_html_join
from django.utils.translation import ngettext
from unfold.admin import ModelAdmin

from apps.tenants.services import Actor
from apps.tenants.templatetags.mediator import did_cell

from .models import Connection, DidcommPolicy, Mediation, MediatorIdentity
from .selectors import queued_for, recipient_depths
from .services import mediation_revoke, policy_update
from .services_v1 import connection_remove


@admin.register(DidcommPolicy)
class DidcommPolicyAdmin(ModelAdmin):
    list_display = ["tenant", "enabled", "mediation", "max_grants", "queue_cap", "overflow", "message_ttl_hours"]
    list_select_related = ["tenant"]
    fields = ["tenant", *DidcommPolicy.EDITABLE]

    def get_readonly_fields(self, request, obj=None):
        return ["tenant"] if obj else []

    def save_model(self, request, obj: DidcommPolicy, form, change: bool) -> None:
        # Through the service (audited as didcomm.update_policy), the same as PATCH in the API.
        changes = {name: form.cleaned_data[name] for name in DidcommPolicy.EDITABLE if name in form.cleaned_data}
        policy_update(tenant=obj.tenant, actor=Actor(user=request.user, via="admin"), **changes)


@admin.register(MediatorIdentity)
class MediatorIdentityAdmin(ModelAdmin):
    list_display = ["tenant", "short_did", "created_at", "retired_at"]
    list_select_related = ["tenant"]
    fields = ["tenant", "did", "http_uri", "ws_uri", "created_at", "retired_at"]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False  # made by the service (first use, rotation), never by hand

    @admin.display(description="DID")
    def short_did(self, obj: MediatorIdentity) -> str:
        return did_cell(obj.did)


@admin.register(Mediation)
class MediationAdmin(ModelAdmin):
    list_display = ["tenant", "short_client", "state", "queued", "created_at"]
    list_filter = ["state", "tenant"]
    search_fields = ["client_did", "recipients__recipient_did"]
    list_select_related = ["tenant"]
    fields = ["tenant", "client_did", "state", "created_at", "updated_at", "recipients_and_depths"]
    readonly_fields = fields
    actions = ["revoke_selected"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.display(description="client DID")
    def short_client(self, obj: Mediation) -> str:
        return did_cell(obj.client_did)

    @admin.display(description="queued messages")
    def queued(self, obj: Mediation) -> int:
        return queued_for(mediation=obj)

    @admin.display(description="recipient DIDs (queue depth)")
    def recipients_and_depths(self, obj: Mediation):
        rows = recipient_depths(mediation=obj)
        return format_html_join(
            "", "<div><code>{}</code> — {} queued</div>", ((r["recipient_did"], r["queued"]) for r in rows)
        )

    @admin.action(
        description="Revoke the selected grants (recipients and queued messages are removed)", permissions=["change"]
    )
    def revoke_selected(self, request, queryset):
        for mediation in queryset:
            mediation_revoke(mediation=mediation, actor=Actor(user=request.user, via="admin"))
        messages.success(request, f"Revoked {queryset.count()} grant(s).")


@admin.register(Connection)
class ConnectionAdmin(ModelAdmin):
    """DIDComm v1 connections (DID Exchange): read-only; an operator can remove them."""

    list_display = ["tenant", "short_did", "protocol", "state", "has_endpoint", "created_at"]
    list_filter = ["state", "tenant"]
    search_fields = ["their_did", "their_verkey"]
    list_select_related = ["tenant"]
    fields = ["tenant", "their_did", "their_verkey", "endpoint", "protocol", "state", "created_at", "updated_at"]
    readonly_fields = fields
    actions = ["remove_selected"]

    def has_add_permission(self, request) -> bool:
        return False  # made by DID Exchange, never by hand

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # removal goes through the audited action below

    @admin.display(description="their DID")
    def short_did(self, obj: Connection) -> str:
        return did_cell(obj.their_did)

    @admin.display(description="HTTP endpoint", boolean=True)
    def has_endpoint(self, obj: Connection) -> bool:
        return bool(obj.endpoint)

    @admin.action(
        description="Remove the selected connections (their mediation, keys and queued messages go too)",
        permissions=["change"],
    )
    def remove_selected(self, request, queryset):
        count = 0
        for connection in queryset:
            connection_remove(connection=connection, actor=Actor(user=request.user, via="admin"))
            count += 1
        messages.success(request, ngettext("Removed %d connection.", "Removed %d connections.", count) % count)
