"""The console's tenant actions: changelist actions (suspend, resume, rotate keys, purge) and the
change page's actions (GET shows a confirmation, POST acts), each through a service and gated by the
permission apps.tenants.permissions.TENANT_ACTIONS names (mixed into TenantAdmin)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import ngettext
from unfold.admin import ModelAdmin
from unfold.decorators import action

from apps.didcomm.identity import identity_rotate
from apps.messaging.selectors import (
    CONTRACT_STATES,
    tenant_contracts,
    tenant_registrations,
)
from apps.push.services import devices_words as push_devices_words
from apps.push.services import subject_for_did as push_subject_for_did
from apps.tenants.models import Tenant
from apps.tenants.permissions import TENANT_ACTIONS
from apps.tenants.services import (
    Actor,
    tenant_resume,
    tenant_rotate_keys,
    tenant_suspend,
)
from apps.wire.display import utc_iso

from .services import purge_kinds, tenant_purge_expired

PAGE = 50


@dataclass(frozen=True)
class DidCell:
    """A listing cell the template shows as alias, shortened DID and a copy button."""

    did: str


def _actor(request: HttpRequest) -> Actor:
    return Actor(user=request.user, via="admin")


# What a key rotation rotated, in words ("Rotated the signing key and pre-key of globex.").
ROTATED_KEYS = {"both": "signing key and pre-key", "signing": "signing key", "prekey": "pre-key"}


def _count_words(verb: str, n: int, noun: str) -> str:
    """`Suspended 1 mediator.`, `Suspended 3 mediators.`: a count with its noun in the right number."""
    return ngettext("%(verb)s %(n)d %(noun)s.", "%(verb)s %(n)d %(noun)ss.", n) % {"verb": verb, "n": n, "noun": noun}


class TenantActions(ModelAdmin):
    """Changelist and change-form actions of the tenant admin (TenantAdmin is this with its pages)."""

    @admin.action(description="Suspend selected mediators", permissions=[TENANT_ACTIONS["suspend"]])
    def suspend_selected(self, request, queryset):
        for tenant in queryset:
            tenant_suspend(tenant=tenant, actor=_actor(request))
        self.message_user(request, _count_words("Suspended", len(queryset), "mediator"), messages.SUCCESS)

    @admin.action(description="Resume selected mediators", permissions=[TENANT_ACTIONS["resume"]])
    def resume_selected(self, request, queryset):
        for tenant in queryset:
            tenant_resume(tenant=tenant, actor=_actor(request))
        self.message_user(request, _count_words("Resumed", len(queryset), "mediator"), messages.SUCCESS)

    @admin.action(description="Rotate keys of selected mediators", permissions=[TENANT_ACTIONS["rotate_keys"]])
    def rotate_keys_selected(self, request, queryset):
        if request.POST.get("confirm") == "yes":
            for tenant in queryset:
                tenant_rotate_keys(tenant=tenant, actor=_actor(request))
            n = len(queryset)
            done = ngettext("Rotated the keys of %(n)d mediator.", "Rotated the keys of %(n)d mediators.", n)
            self.message_user(request, done % {"n": n}, messages.SUCCESS)
            return None
        return self._confirm(
            request,
            title="Rotate signing key and pre-key",
            intro="New keys are published in each DID document at once. Existing registrations stay valid "
            "until they expire; requests encrypted to the old pre-key are accepted during the grace period.",
            tenants=list(queryset),
            rows=None,
            action_name="rotate_keys_selected",
            button="Rotate keys",
        )

    @admin.action(description="Purge expired data (dry run first)", permissions=[TENANT_ACTIONS["purge_expired"]])
    def purge_selected(self, request, queryset):
        tenants = list(queryset)
        if request.POST.get("confirm") == "yes":
            for tenant in tenants:
                result = tenant_purge_expired(tenant=tenant, actor=_actor(request), dry_run=False)
                self.message_user(request, f"{tenant.slug}: {result.summary()}", messages.SUCCESS)
            return None
        plans = [(t, tenant_purge_expired(tenant=t, actor=_actor(request), dry_run=True)) for t in tenants]
        return self._confirm(
            request,
            title="Purge expired data",
            intro="Dry run: these rows would be removed. Nothing has been deleted yet.",
            tenants=tenants,
            rows=plans,
            action_name="purge_selected",
            button="Purge now",
        )

    def _confirm(self, request, *, title, intro, tenants, rows, action_name, button) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "intro": intro,
            "tenants": tenants,
            "plans": rows,
            "kinds": purge_kinds(),
            "action_name": action_name,
            "button": button,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "bulk": True,
        }
        return TemplateResponse(request, "admin/tenants/tenant/confirm_action.html", context)

    # --- change-form actions (GET shows a confirmation, POST acts) ---------------------------

    @staticmethod
    def _get(object_id) -> Tenant:
        if not str(object_id).isdigit():
            raise Http404("no such mediator")
        return get_object_or_404(Tenant, pk=int(object_id))

    def _object_or_deny(self, request, object_id, action: str) -> Tenant:
        """The tenant, if the user holds the permission TENANT_ACTIONS names for `action`."""
        tenant = self._get(object_id)
        self._require(request, tenant, action)
        return tenant

    def _require(self, request, tenant: Tenant, action: str) -> None:
        if not getattr(self, f"has_{TENANT_ACTIONS[action]}_permission")(request, tenant):
            raise PermissionDenied

    def _change_url(self, tenant: Tenant) -> str:
        return reverse("admin:tenants_tenant_change", args=[tenant.pk])

    def _detail_confirm(self, request, tenant, *, title, intro, button, plans=None) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": tenant,
            "title": title,
            "intro": intro,
            "tenants": [tenant],
            "plans": plans,
            "kinds": purge_kinds(),
            "button": button,
            "bulk": False,
            "cancel_url": self._change_url(tenant),
        }
        return TemplateResponse(request, "admin/tenants/tenant/confirm_action.html", context)

    @action(description="Suspend", url_path="suspend", icon="pause_circle", permissions=[TENANT_ACTIONS["suspend"]])
    def detail_suspend(self, request, object_id) -> HttpResponse:
        return self._set_status(request, object_id, "suspend")

    @action(description="Resume", url_path="resume", icon="play_circle", permissions=[TENANT_ACTIONS["resume"]])
    def detail_resume(self, request, object_id) -> HttpResponse:
        return self._set_status(request, object_id, "resume")

    def _set_status(self, request, object_id, action: str) -> HttpResponse:
        """GET confirms, POST acts; a tenant already in the wanted state is sent back to its page."""
        tenant = self._object_or_deny(request, object_id, action)
        if tenant.is_active == (action == "resume"):
            state = "active" if tenant.is_active else "suspended"
            self.message_user(request, f"{tenant.slug} is already {state}.", messages.INFO)
            return HttpResponseRedirect(self._change_url(tenant))
        if request.method == "POST":
            if action == "suspend":
                tenant_suspend(tenant=tenant, actor=_actor(request))
                self.message_user(request, f"{tenant.slug} is suspended.", messages.WARNING)
            else:
                tenant_resume(tenant=tenant, actor=_actor(request))
                self.message_user(request, f"{tenant.slug} is active again.", messages.SUCCESS)
            return HttpResponseRedirect(self._change_url(tenant))
        if action == "suspend":
            return self._detail_confirm(
                request,
                tenant,
                title=f"Suspend {tenant.slug}",
                intro="POST / will answer MEDIATOR_UNAVAILABLE (503) and /health 503 until resumed. No data is removed.",
                button="Suspend",
            )
        return self._detail_confirm(
            request, tenant, title=f"Resume {tenant.slug}", intro="Serve this mediator again.", button="Resume"
        )

    @action(description="Rotate keys", url_path="rotate-keys", icon="key", permissions=[TENANT_ACTIONS["rotate_keys"]])
    def detail_rotate(self, request, object_id) -> HttpResponse:
        tenant = self._object_or_deny(request, object_id, "rotate_keys")
        if request.method == "POST":
            which = request.POST.get("keys", "both")
            if which not in ROTATED_KEYS:
                return HttpResponseBadRequest("keys must be both, signing or prekey")
            tenant_rotate_keys(
                tenant=tenant,
                actor=_actor(request),
                signing=which in ("both", "signing"),
                prekey=which in ("both", "prekey"),
            )
            self.message_user(request, f"Rotated the {ROTATED_KEYS[which]} of {tenant.slug}.", messages.SUCCESS)
            return HttpResponseRedirect(self._change_url(tenant))
        return self._detail_confirm(
            request,
            tenant,
            title=f"Rotate keys of {tenant.slug}",
            intro=f"The DID document publishes the new keys at once. Registrations signed with the old key stay "
            f"valid until they expire; requests encrypted to the old pre-key are accepted for "
            f"{tenant.prekey_grace_hours} hours.",
            button="Rotate",
        )

    @action(
        description="Rotate DIDComm identity",
        url_path="rotate-didcomm",
        icon="sync_lock",
        permissions=[TENANT_ACTIONS["rotate_didcomm"]],
    )
    def detail_rotate_didcomm(self, request, object_id) -> HttpResponse:
        tenant = self._object_or_deny(request, object_id, "rotate_didcomm")
        if request.method == "POST":
            identity_rotate(tenant=tenant, actor=_actor(request))
            self.message_user(request, f"Rotated the DIDComm mediator DID of {tenant.slug}.", messages.SUCCESS)
            return HttpResponseRedirect(self._change_url(tenant))
        return self._detail_confirm(
            request,
            tenant,
            title=f"Rotate the DIDComm identity of {tenant.slug}",
            intro=f"A new did:peer:2 mediator DID with new keys; the invitation changes with it. The old DID keeps "
            f"decrypting forwards and answering its clients for {tenant.prekey_grace_hours} hours, and every "
            f"granted client is sent the new DID (a mediate-grant naming it) with its queued messages.",
            button="Rotate",
        )

    @action(
        description="Purge expired data",
        url_path="purge",
        icon="delete_sweep",
        permissions=[TENANT_ACTIONS["purge_expired"]],
    )
    def detail_purge(self, request, object_id) -> HttpResponse:
        tenant = self._object_or_deny(request, object_id, "purge_expired")
        if request.method == "POST":
            result = tenant_purge_expired(tenant=tenant, actor=_actor(request), dry_run=False)
            self.message_user(request, f"{tenant.slug}: {result.summary()}", messages.SUCCESS)
            return HttpResponseRedirect(self._change_url(tenant))
        plan = tenant_purge_expired(tenant=tenant, actor=_actor(request), dry_run=True)
        return self._detail_confirm(
            request,
            tenant,
            title=f"Purge expired data of {tenant.slug}",
            intro="Dry run: these rows would be removed. Nothing has been deleted yet.",
            button="Purge now",
            plans=[(tenant, plan)],
        )

    def _listing(self, request, tenant, *, title, columns, rows_qs, row, states=()) -> TemplateResponse:
        """A read-only paginated list with a DID search (and a live/expired filter for contracts)."""
        paginator = Paginator(rows_qs, PAGE)
        page = paginator.get_page(request.GET.get("page"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": tenant,
            "title": title,
            "columns": columns,
            "rows": [row(r) for r in page.object_list],
            "page": page,
            "search": request.GET.get("q", ""),
            "states": states,
            "state": request.GET.get("state", ""),
            "cancel_url": self._change_url(tenant),
        }
        return TemplateResponse(request, "admin/tenants/tenant/listing.html", context)

    @action(
        description="Registrations",
        url_path="registrations",
        icon="badge",
        permissions=[TENANT_ACTIONS["registrations"]],
    )
    def detail_registrations(self, request, object_id) -> HttpResponse:
        tenant = self._object_or_deny(request, object_id, "registrations")
        return self._listing(
            request,
            tenant,
            title=f"Registrations of {tenant.slug}",
            columns=["Identity", "Expires", "Registered", "Push devices"],
            rows_qs=tenant_registrations(tenant=tenant, search=request.GET.get("q", "")),
            row=lambda r: [
                DidCell(r["owner_did"]),
                utc_iso(r["expires_at"]),
                utc_iso(r["created_at"]),
                push_devices_words(tenant_id=tenant.pk, subject=push_subject_for_did(r["owner_did"])),
            ],
        )

    @action(description="Contracts", url_path="contracts", icon="handshake", permissions=[TENANT_ACTIONS["contracts"]])
    def detail_contracts(self, request, object_id) -> HttpResponse:
        tenant = self._object_or_deny(request, object_id, "contracts")
        state = request.GET.get("state", "")
        return self._listing(
            request,
            tenant,
            title=f"Contracts stored by {tenant.slug}",
            columns=["Owner", "Requestor", "Recipient", "Expires", "Stored"],
            rows_qs=tenant_contracts(
                tenant=tenant, search=request.GET.get("q", ""), state=state if state in CONTRACT_STATES else ""
            ),
            row=lambda r: [
                DidCell(r["owner_did"]),
                DidCell(r["requestor_did"]),
                DidCell(r["recipient_did"]),
                utc_iso(r["expires_at"]),
                utc_iso(r["created_at"]),
            ],
            states=CONTRACT_STATES,
        )
