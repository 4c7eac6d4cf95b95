"""The DIDComm part of the operator console: the policies (edited on each tenant's page), mediator
identities and grants (read-only, protocol-owned), per-recipient queue depths, revoking a grant
(a confirmation page that says what goes, then the service), and the recipient DIDs with whether
their registration proved control and the conflicts they met."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import ngettext
from unfold.admin import ModelAdmin
from unfold.decorators import action

from apps.push import services as push
from apps.tenants.admin import ReadOnlyModelAdmin
from apps.tenants.services import Actor
from apps.tenants.templatetags.mediator import did_cell
from apps.wire.display import utc_iso

from . import texts
from .mediation import connection_remove, mediation_revoke
from .models import Connection, DidcommPolicy, Mediation, MediatorIdentity, RecipientKey
from .selectors import DELIVERY_FAILING, connections_with_delivery, queued_for, recipient_depths

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from .selectors import DeliveryCounts


@admin.register(DidcommPolicy)
class DidcommPolicyAdmin(ModelAdmin):
    """Every tenant's DIDComm policy at a glance. A policy is read and edited on its tenant's page
    (section "DIDComm policy", through policy.policy_update), so a row opens that page."""

    list_display = ["tenant_slug", "enabled", "mediation_words", "max_grants", "queue_cap", "overflow_words", "ttl"]
    list_select_related = ["tenant"]

    @admin.display(description="Tenant", ordering="tenant__slug")
    def tenant_slug(self, obj: DidcommPolicy) -> str:
        return obj.tenant.slug

    @staticmethod
    def _short(name: str, value: str) -> str:
        # The choice's words up to their explanation ("Open: …", "Evict … (the sender …)").
        return texts.choices(name).get(value, value).split(":")[0].split(" (")[0]

    @admin.display(description="Mediation", ordering="mediation")
    def mediation_words(self, obj: DidcommPolicy) -> str:
        return self._short("mediation", obj.mediation)

    @admin.display(description="When a queue is full", ordering="overflow")
    def overflow_words(self, obj: DidcommPolicy) -> str:
        return self._short("overflow", obj.overflow)

    @admin.display(description="Lifetime (hours)", ordering="message_ttl_hours")
    def ttl(self, obj: DidcommPolicy) -> int:
        return obj.message_ttl_hours

    def has_add_permission(self, request) -> bool:
        return False  # made with the defaults on a tenant's first use

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # one row per tenant, as long as the tenant

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        url = reverse("admin:tenants_tenant_change", args=[object_id]) if str(object_id).isdigit() else None
        if url is None:
            raise Http404("no such tenant")
        return HttpResponseRedirect(f"{url}#didcomm-policy")


@admin.register(MediatorIdentity)
class MediatorIdentityAdmin(ModelAdmin):
    list_display = ["tenant", "short_did", "created_at", "retired_at"]
    list_select_related = ["tenant"]
    fields = ["tenant", "short_did", "http_uri", "ws_uri", "created_at", "retired_at"]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False  # made by the service (first use, rotation), never by hand

    @admin.display(description="DID")
    def short_did(self, obj: MediatorIdentity) -> str:
        return did_cell(obj.did)


@dataclass(frozen=True)
class RevocationPlan:
    """What revoking grants removes: per grant, its recipient DIDs with their queue depths."""

    grants: list[tuple[Mediation, list[dict], int]]  # (grant, recipients with depths, queued messages)

    @property
    def recipients(self) -> int:
        return sum(len(r) for _, r, _ in self.grants)

    @property
    def queued(self) -> int:
        return sum(q for _, _, q in self.grants)


def _revocation_plan(mediations) -> RevocationPlan:
    return RevocationPlan(grants=[(m, recipient_depths(mediation=m), queued_for(mediation=m)) for m in mediations])


@admin.register(Mediation)
class MediationAdmin(ModelAdmin):
    """Grants are protocol-owned: read-only pages; the one operator action is revoking, which
    first shows what it removes (recipients and queued messages) and acts only on its POST."""

    list_display = ["tenant", "short_client", "state", "queued", "created_at"]
    list_filter = ["state", "tenant"]
    search_fields = ["client_did", "recipients__recipient_did"]
    list_select_related = ["tenant"]
    fields = ["tenant", "client", "state", "created_at", "updated_at", "recipients_and_depths", "push_devices"]
    readonly_fields = fields
    actions = ["revoke_selected"]

    @admin.display(description="Push devices")
    def push_devices(self, obj: Mediation) -> str:
        """Whether the client registered a push device and when it was last woken (service and
        platform only, never the token)."""
        return push.devices_words(tenant_id=obj.tenant_id, subject=push.subject_for_mediation(obj.client_hash))

    actions_detail = ["detail_revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # a grant is revoked (audited, its client told), never deleted

    def get_actions_detail(self, request, object_id):
        # Revoke is offered on a granted client's page only.
        actions = super().get_actions_detail(request, object_id)
        state = Mediation.objects.filter(pk=object_id).values_list("state", flat=True).first()
        return actions if state == Mediation.State.GRANTED else []

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # Nothing on a grant is edited: no Save buttons (Revoke is the page's action).
        context.update(show_save=False, show_save_and_continue=False, show_save_and_add_another=False)
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    @admin.display(description="Client DID")
    def short_client(self, obj: Mediation) -> str:
        return did_cell(obj.client_did)

    @admin.display(description="Client DID")
    def client(self, obj: Mediation) -> str:
        return did_cell(obj.client_did)

    @admin.display(description="Queued messages")
    def queued(self, obj: Mediation) -> int:
        return queued_for(mediation=obj)

    @admin.display(description="Recipient DIDs (queue depth)")
    def recipients_and_depths(self, obj: Mediation):
        rows = recipient_depths(mediation=obj)
        if not rows:
            return "none"
        return format_html(
            '<div class="live-connections-wrap"><table class="live-connections" id="recipients"><tbody>{}</tbody>'
            "</table></div>",
            format_html_join(
                "",
                '<tr><td>{}</td><td class="num">{} queued</td></tr>',
                ((did_cell(r["recipient_did"]), r["queued"]) for r in rows),
            ),
        )

    def _revoke(self, request, mediations: list[Mediation]) -> int:
        actor = Actor(user=request.user, via="admin")
        for mediation in mediations:
            mediation_revoke(mediation=mediation, actor=actor)
        return len(mediations)

    def _confirm(self, request, plan: RevocationPlan, *, bulk: bool, cancel_url: str) -> TemplateResponse:
        n = len(plan.grants)
        title = "Revoke the grant" if n == 1 else f"Revoke {n} grants"
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "plan": plan,
            "original": plan.grants[0][0] if not bulk else None,
            "bulk": bulk,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "cancel_url": cancel_url,
        }
        return TemplateResponse(request, "admin/didcomm/mediation/confirm_revoke.html", context)

    @admin.action(description="Revoke the selected grants (confirm first)", permissions=["change"])
    def revoke_selected(self, request, queryset):
        granted = list(queryset.filter(state=Mediation.State.GRANTED))
        if not granted:
            self.message_user(request, "None of the selected grants is granted: nothing to revoke.", messages.INFO)
            return None
        if request.POST.get("confirm") == "yes":
            n = self._revoke(request, granted)
            self.message_user(request, f"Revoked {n} grant{'s' if n != 1 else ''}.", messages.SUCCESS)
            return None
        return self._confirm(
            request,
            _revocation_plan(granted),
            bulk=True,
            cancel_url=reverse("admin:didcomm_mediation_changelist"),
        )

    @action(description="Revoke", url_path="revoke", icon="block", permissions=["change"])
    def detail_revoke(self, request, object_id) -> HttpResponse:
        """GET shows what revoking removes, POST revokes."""
        if not str(object_id).isdigit():
            raise Http404("no such grant")
        mediation = get_object_or_404(Mediation.objects.select_related("tenant"), pk=int(object_id))
        if not self.has_change_permission(request, mediation):
            raise PermissionDenied
        change_url = reverse("admin:didcomm_mediation_change", args=[mediation.pk])
        if mediation.state != Mediation.State.GRANTED:
            self.message_user(request, f"This grant is already {mediation.get_state_display().lower()}.", messages.INFO)
            return HttpResponseRedirect(change_url)
        if request.method == "POST":
            self._revoke(request, [mediation])
            self.message_user(request, "Revoked the grant.", messages.WARNING)
            return HttpResponseRedirect(change_url)
        return self._confirm(request, _revocation_plan([mediation]), bulk=False, cancel_url=change_url)


class DeliveryFilter(admin.SimpleListFilter):
    """Connections whose last outbound POST failed (docs/didcomm.md "When delivery fails")."""

    title = "outbound delivery"
    parameter_name = "delivery"

    def lookups(self, request, model_admin):
        return [("failing", "Last POST failed"), ("ok", "No failure since the last delivery")]

    def queryset(self, request, queryset):
        if self.value() == "failing":
            return queryset.filter(DELIVERY_FAILING)
        if self.value() == "ok":
            return queryset.exclude(DELIVERY_FAILING)
        return queryset


@admin.register(Connection)
class ConnectionAdmin(ModelAdmin):
    """DIDComm v1 connections (DID Exchange): read-only; an operator can remove them. Each shows
    its outbound delivery: the last failed POST (why, when), how many failed, how many wait."""

    list_display = ["tenant", "short_did", "protocol", "state", "has_endpoint", "delivery", "waiting", "created_at"]
    list_filter = [DeliveryFilter, "state", "tenant"]
    search_fields = ["their_did", "their_verkey"]
    list_select_related = ["tenant"]
    fields = [
        "tenant",
        "short_did",
        "their_verkey",
        "endpoint",
        "protocol",
        "state",
        "created_at",
        "updated_at",
        "delivery",
        "last_delivery_error",
        "last_delivery_error_at",
        "last_delivered_at",
        "delivery_failures",
        "waiting",
        "push_devices",
    ]
    readonly_fields = fields
    actions = ["remove_selected"]

    def get_queryset(self, request):
        return connections_with_delivery(super().get_queryset(request))

    @admin.display(description="outbound delivery")
    def delivery(self, obj: Connection) -> str:
        if not obj.last_delivery_error_at or (
            obj.last_delivered_at and obj.last_delivered_at >= obj.last_delivery_error_at
        ):
            return "ok" if obj.last_delivered_at or not obj.endpoint else "-"
        return format_html("failing: {} at {}", obj.last_delivery_error, utc_iso(obj.last_delivery_error_at))

    @admin.display(description="waiting to be POSTed", ordering="n_waiting")
    def waiting(self, obj: WithAnnotations[Connection, DeliveryCounts]) -> int:
        return obj.n_waiting

    def has_add_permission(self, request) -> bool:
        return False  # made by DID Exchange, never by hand

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # removal goes through the audited action below

    @admin.display(description="Their DID")
    def short_did(self, obj: Connection) -> str:
        return did_cell(obj.their_did)

    @admin.display(description="Push devices")
    def push_devices(self, obj: Connection) -> str:
        """Whether its client registered a push device on its grant, and when it was last woken
        (service and platform only, never the token)."""
        mediation = Mediation.objects.filter(connection=obj).values_list("client_hash", flat=True).first()
        if mediation is None:
            return "none registered (no grant)"
        return push.devices_words(tenant_id=obj.tenant_id, subject=push.subject_for_mediation(mediation))

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


class ContestedFilter(admin.SimpleListFilter):
    """Recipient DIDs another client asked for (refused, or taken over by a client proving control)."""

    title = "conflicts"
    parameter_name = "contested"

    def lookups(self, request, model_admin):
        return [("yes", "Contested"), ("no", "Never contested")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(contested__gt=0)
        if self.value() == "no":
            return queryset.filter(contested=0)
        return queryset


@admin.register(RecipientKey)
class RecipientKeyAdmin(ReadOnlyModelAdmin):
    """Registered recipient DIDs (protocol-owned, read-only): which client holds each, whether its
    registration proved control, and how often another client was refused it (docs/didcomm.md
    "Who may register a recipient"). Removal goes through the grant or the connection."""

    list_display = ["tenant", "short_did", "short_client", "proven", "contested", "last_contested_at", "created_at"]
    list_filter = [ContestedFilter, "proven", "tenant"]
    search_fields = ["recipient_did", "mediation__client_did"]
    list_select_related = ["tenant", "mediation"]
    ordering = ["-last_contested_at", "-id"]
    fields = ["tenant", "recipient_did", "mediation", "proven", "contested", "last_contested_at", "created_at"]
    readonly_fields = fields

    @admin.display(description="recipient DID")
    def short_did(self, obj: RecipientKey) -> str:
        return did_cell(obj.recipient_did)

    @admin.display(description="held by (client DID)")
    def short_client(self, obj: RecipientKey) -> str:
        return did_cell(obj.mediation.client_did)
