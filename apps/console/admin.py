"""The tenant pages of the operator console (docs/contributing.md §15): the admin is not a second write path.

Creating and editing go through apps.tenants.services; suspend, resume, rotate keys and purge are
actions that call services and show a confirmation (with dry-run counts for the purge) first.
Nothing here shows a payload, tag, signature or key: keys appear as short public fingerprints.
A tenant's page shows both protocols, so it lives in this app, above every other: its DIDComm policy
is a section of the tenant form (saved through apps.didcomm.policy.policy_update), its figures
(apps.messaging.selectors, apps.didcomm.selectors, .services) and live connections sit beside
Decentrl's. The model keeps its app label, so the pages stay under /admin/tenants/tenant/.
This module wires them: the form is .forms, the page's read-only blocks .panels (markup in
templates/admin/tenants/tenant/panels/), the actions .actions.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IS_POPUP_VAR
from django.http import HttpResponseRedirect

from apps.didcomm import texts as didcomm_texts
from apps.didcomm.models import DidcommPolicy
from apps.didcomm.policy import policy_update
from apps.didcomm.selectors import queued_annotation
from apps.messaging.selectors import (
    tenant_list_annotations,
)
from apps.push.admin import TENANT_INLINES as PUSH_INLINES
from apps.tenants.models import Tenant
from apps.tenants.permissions import operator_may
from apps.tenants.services import (
    POLICY_FIELDS,
    tenant_create,
    tenant_update,
)

from .actions import PAGE, TenantActions, _actor
from .forms import IDENTITY, POLICY_SETS, TenantAdminForm, didcomm_field
from .panels import TenantPanels


@admin.register(Tenant)
class TenantAdmin(TenantPanels, TenantActions):
    form = TenantAdminForm
    list_display = [
        "slug",
        "name",
        "domain",
        "status_label",
        "identities",
        "pending_depth",
        "didcomm_depth",
        "registration_open",
        "keys_rotated",
    ]
    list_display_links = ["slug", "name"]
    list_filter = ["status", "registration_open"]
    search_fields = ["slug", "name", "domain", "did", "aliases__domain"]
    ordering = ["slug"]
    list_per_page = PAGE
    actions = ["suspend_selected", "resume_selected", "rotate_keys_selected", "purge_selected"]
    # Status-aware: a tenant's page offers Suspend or Resume, never both (get_actions_detail); the
    # rest sits in one menu, so the header keeps its whole breadcrumb at 1440 px.
    actions_detail = [
        "detail_suspend",
        "detail_resume",
        {
            "title": "Data and keys",
            "icon": "more_vert",
            "items": [
                "detail_registrations",
                "detail_contracts",
                "detail_rotate",
                "detail_rotate_didcomm",
                "detail_purge",
            ],
        },
    ]
    warn_unsaved_form = True
    inlines = PUSH_INLINES  # the push section (apps/push/admin.py: its own permissions and saves)

    class Media:
        js = ["didcomm/copy.js"]  # the invitation's Copy button (no inline script: the admin's CSP)

    # --- pages ---------------------------------------------------------------------------------

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name == "tenants_tenant_changelist":
            qs = qs.annotate(**tenant_list_annotations(), stat_didcomm_queued=queued_annotation())
        return qs

    def _may_edit_didcomm(self, request, obj=None) -> bool:
        """The DIDComm policy is edited on the tenant form by those who may change both."""
        if obj is not None and not self.has_change_permission(request, obj):
            return False
        return operator_may(request.user, DidcommPolicy, "change")

    def _didcomm_fieldset(self, request, obj=None):
        if self._may_edit_didcomm(request, obj):
            fields = [didcomm_field(name) for name in DidcommPolicy.EDITABLE]
        elif obj is not None and operator_may(request.user, DidcommPolicy, "view"):
            fields = ["didcomm_policy"]
        else:
            return None
        description = (
            '<span id="didcomm-policy"></span>DIDComm v2 and v1 (wallets and agents). Decentrl\'s queue cap and '
            "lifetimes are under Queues and storage."
        )
        return ("DIDComm policy", {"fields": fields, "classes": ["didcomm-policy"], "description": description})

    def get_form(self, request, obj=None, change=False, **kwargs):
        # The DIDComm policy's fields, made by the admin (the theme's widgets) from the model's, in words.
        if self._may_edit_didcomm(request, obj):
            extra = {}
            for name in DidcommPolicy.EDITABLE:
                field = self.formfield_for_dbfield(DidcommPolicy._meta.get_field(name), request=request)
                field.label = didcomm_texts.label(name)
                field.help_text = didcomm_texts.help_text(name)
                if getattr(field, "choices", None) and not isinstance(field, forms.BooleanField):
                    words = didcomm_texts.choices(name)
                    field.choices = [(v, words.get(v, t)) for v, t in field.choices if v != ""]
                extra[didcomm_field(name)] = field
            base = kwargs.get("form", self.form)
            kwargs["form"] = type(base.__name__, (base,), extra)
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request, obj=None):
        didcomm = self._didcomm_fieldset(request, obj)
        if obj is None:
            return [
                ("Mediator", {"fields": ["slug", "name", "domain", "aliases", "public_url"]}),
                *POLICY_SETS,
                *([didcomm] if didcomm else []),
                ("Keys", {"fields": ["prekey_grace_hours"]}),
            ]
        identity = IDENTITY
        if not self.has_change_permission(request, obj):
            # View only: every field is shown read-only, and "aliases" (a form field) would be
            # looked up on the model, where it is the related manager.
            name, opts = IDENTITY
            identity = (name, {"fields": ["alias_domains" if f == "aliases" else f for f in opts["fields"]]})
        return [
            # What an operator needs first after creating a tenant: the checklist and the invitations.
            ("Connect", {"fields": ["domain_checklist", "didcomm_invitation"]}),
            identity,
            ("Activity", {"fields": ["live_figures", "live_connections", "didcomm_delivery"]}),
            ("Keys", {"fields": ["signing_key", "prekey", "keys_rotated_at", "prekey_grace_hours", "key_history"]}),
            *POLICY_SETS,
            *([didcomm] if didcomm else []),
            ("Audit", {"fields": ["recent_audit"]}),
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return [
            "slug",
            "domain",
            "did",
            "status",
            "domain_checklist",
            "live_figures",
            "live_connections",
            "signing_key",
            "prekey",
            "keys_rotated_at",
            "key_history",
            "didcomm_invitation",
            "didcomm_delivery",
            "didcomm_policy",
            "recent_audit",
        ]

    def has_delete_permission(self, request, obj=None) -> bool:
        # Tenants are suspended, never deleted from the console: deletion would drop every
        # identity's data with no way back.
        return False

    def get_actions_detail(self, request, object_id):
        # Status-aware buttons: an active tenant's page offers Suspend, a suspended one's Resume.
        # Only the buttons: a POST to the other one answers as the API does (a no-op, said so).
        actions = super().get_actions_detail(request, object_id)
        status = Tenant.objects.filter(pk=object_id).values_list("status", flat=True).first()
        hidden = "detail_resume" if status == Tenant.Status.ACTIVE else "detail_suspend"
        return [a for a in actions if not a.action_name.endswith(f"_{hidden}")]

    def response_add(self, request, obj, post_url_continue=None):
        # A new tenant's page starts with what comes next (its DNS and TLS checklist, its invitations).
        if "_addanother" in request.POST or IS_POPUP_VAR in request.POST:
            return super().response_add(request, obj, post_url_continue)
        self.message_user(
            request,
            f"Added {obj.slug}. Next: its DNS and TLS checklist and its invitations, at the top of this page.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(self._change_url(obj))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # An existing tenant is edited, not used as a template: no "Save and add another" there.
        if change:
            context["show_save_and_add_another"] = False
        if obj is not None:
            context["subtitle"] = obj.name or obj.slug  # the window's title, as the breadcrumb (the `crumb` filter)
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    # --- writes go through services -------------------------------------------------------------

    def save_model(self, request, obj: Tenant, form, change: bool) -> None:
        data = form.cleaned_data
        aliases = data.get("alias_list", [])
        policy = {f: data[f] for f in POLICY_FIELDS if f in data}
        if change:
            saved = tenant_update(
                tenant=obj,
                actor=_actor(request),
                aliases=aliases,
                name=data.get("name", obj.name),
                public_url=data["public_url"],
                **policy,
            )
        else:
            saved = tenant_create(
                slug=data["slug"],
                domain=data["domain"],
                name=data.get("name", ""),
                public_url=data.get("public_url") or None,
                aliases=aliases,
                actor=_actor(request),
                **policy,
            )
        if changes := form.didcomm_changes():
            policy_update(tenant=saved, actor=_actor(request), **changes)
        # The admin continues with `obj` (messages, redirects): make it the saved row.
        obj.__dict__.update({k: v for k, v in saved.__dict__.items() if not k.startswith("_")})
        obj._state = saved._state

    def save_related(self, request, form, formsets, change) -> None:
        # Aliases are saved by the service (no m2m fields to save); inlines save their own rows.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)
