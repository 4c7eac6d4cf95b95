"""The tenant pages of the operator console (docs/contributing.md §15): the admin is not a second write path.

Creating and editing go through apps.tenants.services; suspend, resume, rotate keys and purge are
actions that call services and show a confirmation (with dry-run counts for the purge) first.
Nothing here shows a payload, tag, signature or key: keys appear as short public fingerprints.
A tenant's page shows both protocols, so it lives in this app, above every other: its DIDComm policy
is a section of the tenant form (saved through apps.didcomm.policy.policy_update), its figures
(apps.messaging.selectors, apps.didcomm.selectors, .services) and live connections sit beside
Decentrl's. The model keeps its app label, so the pages stay under /admin/tenants/tenant/.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IS_POPUP_VAR
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db.models import Field
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import ngettext
from unfold.admin import ModelAdmin
from unfold.decorators import action, display
from unfold.widgets import UnfoldAdminTextareaWidget, UnfoldAdminURLInputWidget

from apps.didcomm import texts as didcomm_texts
from apps.didcomm.identity import identity_rotate
from apps.didcomm.invitation import invitation_for, invitation_qr_svg, invitation_v1_for
from apps.didcomm.models import DidcommPolicy
from apps.didcomm.policy import policy_for, policy_update
from apps.didcomm.selectors import delivery_summary, live_connections, queued_annotation, tenant_figures
from apps.messaging.selectors import (
    CONTRACT_STATES,
    tenant_contracts,
    tenant_list_annotations,
    tenant_registrations,
)
from apps.push.admin import TENANT_INLINES as PUSH_INLINES
from apps.push.services import devices_words as push_devices_words
from apps.push.services import subject_for_did as push_subject_for_did
from apps.tenants import texts
from apps.tenants.models import Tenant
from apps.tenants.permissions import TENANT_ACTIONS, operator_may
from apps.tenants.selectors import domain_owner
from apps.tenants.services import (
    POLICY_BOUNDS,
    POLICY_FIELDS,
    Actor,
    fingerprint,
    normalize_domain,
    normalize_public_url,
    tenant_create,
    tenant_resume,
    tenant_rotate_keys,
    tenant_suspend,
    tenant_update,
    validate_aliases,
    validate_policy,
)
from apps.tenants.templatetags.mediator import did_cell, utc
from apps.wire.display import human_bytes, utc_iso

from .services import purge_kinds, tenant_purge_expired, tenant_statistics

PAGE = 50
# Open sockets listed on a tenant's page (the counts cover them all).
LIVE_ROWS = 50


@dataclass(frozen=True)
class DidCell:
    """A listing cell the template shows as alias, shortened DID and a copy button."""

    did: str


def _actor(request: HttpRequest) -> Actor:
    return Actor(user=request.user, via="admin")


# The DIDComm policy's fields on the tenant form: `didcomm_<field>` for each of DidcommPolicy.EDITABLE,
# so that a field added there appears here, labelled by apps/didcomm/texts.py.
DIDCOMM_PREFIX = "didcomm_"


def didcomm_field(name: str) -> str:
    return f"{DIDCOMM_PREFIX}{name}"


class TenantAdminForm(forms.ModelForm):
    # Declared form fields get the theme's widgets explicitly (the admin styles only model fields).
    public_url = forms.CharField(required=False, max_length=300, widget=UnfoldAdminURLInputWidget)
    aliases = forms.CharField(required=False, widget=UnfoldAdminTextareaWidget(attrs={"rows": 3}))

    class Meta:
        model = Tenant
        fields = ["slug", "name", "domain", "public_url", *POLICY_FIELDS]
        # The admin labels read-only fields (a user with view permission only) from these, not
        # from __init__ below: the same words, units and bounds as the editable form.
        labels = {name: texts.label(name) for name in texts.FIELDS}
        help_texts = {name: texts.help_text(name) for name in texts.FIELDS}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            if name in texts.FIELDS:
                field.label = texts.label(name)
                field.help_text = texts.help_text(name)
            if name in POLICY_BOUNDS:
                # One rule, one message: the bounds are validate_policy's (the model field's own
                # minimum would answer -1 in other words than 0); the widget only offers them.
                field.validators = [
                    v for v in field.validators if not isinstance(v, MinValueValidator | MaxValueValidator)
                ]
                field.widget.attrs.update(min=POLICY_BOUNDS[name][0], max=POLICY_BOUNDS[name][1])
        if self.instance.pk:
            self.initial["aliases"] = "\n".join(self.instance.aliases.values_list("domain", flat=True))
            if self.didcomm_fields():
                policy = policy_for(tenant=self.instance)
                for name in DidcommPolicy.EDITABLE:
                    self.initial[didcomm_field(name)] = getattr(policy, name)

    def didcomm_fields(self) -> list[str]:
        """The DIDComm policy's fields on this form (none for a user who may not edit the policy)."""
        return [name for name in DidcommPolicy.EDITABLE if didcomm_field(name) in self.fields]

    def didcomm_changes(self) -> dict:
        """The DIDComm policy's fields as `policy_update` takes them."""
        return {name: self.cleaned_data[didcomm_field(name)] for name in self.didcomm_fields()}

    def alias_list(self) -> list[str]:
        raw = self.cleaned_data.get("aliases") or ""
        return [line.strip() for line in raw.replace(",", "\n").splitlines() if line.strip()]

    def clean_public_url(self) -> str:
        # Blank means "the default": the domain's URL for a new tenant, the current URL on edit.
        # (The instance still holds the stored value here: the form writes it only after clean.)
        url = (self.cleaned_data.get("public_url") or "").strip()
        if not url:
            return self.instance.public_url if self.instance.pk else ""
        try:
            return normalize_public_url(url)
        except ValidationError as exc:
            raise forms.ValidationError(exc.message_dict["public_url"]) from exc

    def clean_domain(self) -> str:
        try:
            domain = normalize_domain(self.cleaned_data["domain"])
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from exc
        if owner := domain_owner(domain):
            raise forms.ValidationError(f"{domain} is already served by tenant {owner}.")
        return domain

    def clean(self):
        data = super().clean()
        policy = {f: data[f] for f in POLICY_FIELDS if f in data and f in self.fields}
        try:
            validate_policy(policy)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, errors)
        self._clean_didcomm()
        # Aliases are checked even when the primary domain is wrong, so that every error shows at once.
        primary = data.get("domain") or self.instance.domain or ""
        try:
            data["alias_list"] = validate_aliases(self.alias_list(), primary=primary, tenant_id=self.instance.pk)
        except ValidationError as exc:
            self.add_error("aliases", exc.message_dict.get("aliases", exc.messages))
        return data

    def _clean_didcomm(self) -> None:
        # The model's own validation, as policy_update runs it, so that saving cannot fail later.
        names = [n for n in self.didcomm_fields() if didcomm_field(n) in self.cleaned_data]
        if not names:
            return
        policy = policy_for(tenant=self.instance) if self.instance.pk else DidcommPolicy()
        for name in names:
            setattr(policy, name, self.cleaned_data[didcomm_field(name)])
        try:
            policy.full_clean(exclude=["tenant"])
        except ValidationError as exc:
            for name, errors in exc.message_dict.items():
                field = didcomm_field(name)
                self.add_error(field if field in self.fields else None, errors)


IDENTITY = ("Mediator", {"fields": ["slug", "name", "domain", "aliases", "public_url", "did", "status"]})
POLICY_SETS = [
    (
        "Registration",
        {"fields": ["registration_open", "max_identities", "max_registration_days", "decentrl_push_devices"]},
    ),
    (
        "Queues and storage",
        {
            "description": "Decentrl's pending events. DIDComm messages have their own queue cap and lifetime "
            "under DIDComm policy.",
            "fields": [
                "pending_event_ttl_days",
                "pending_queue_cap",
                "contract_request_ttl_days",
                "metering_retention_days",
            ],
        },
    ),
    (
        "Request limits",
        {
            "fields": [
                "rate_limit_per_did",
                "rate_limit_per_ip",
                "rate_limit_per_ip_burst",
                "max_body_bytes",
                "max_page_size",
                "max_events_per_save",
                "max_tags_per_event",
                "max_tag_length",
            ]
        },
    ),
    (
        "Public channels",
        {
            "fields": [
                "public_event_max_bytes",
                "public_max_tags",
                "public_channel_id_max_length",
                "public_publish_per_minute",
            ]
        },
    ),
]


def _invitation_block(title: str, dom_id: str, url: str, *, alt: str) -> str:
    """One invitation URL: read-only text, a Copy button (apps/didcomm/static/didcomm/copy.js) and its QR."""
    return format_html(
        '<div class="didcomm-invitation"><h3 class="font-medium my-2">{}</h3>'
        '<textarea id="{}-url" readonly rows="3" class="font-mono text-xs w-full" aria-label="{}">{}</textarea>'
        '<div class="my-2"><button type="button" data-copy-target="{}-url" '
        'class="border rounded px-3 py-1">Copy</button></div>'
        '<figure id="{}-qr">{}</figure></div>',
        title,
        dom_id,
        f"{title}: URL",
        url,
        dom_id,
        dom_id,
        mark_safe(invitation_qr_svg(url, alt=alt)),  # noqa: S308 - segno's SVG of our own URL, no user markup
    )


# What a key rotation rotated, in words ("Rotated the signing key and pre-key of globex.").
ROTATED_KEYS = {"both": "signing key and pre-key", "signing": "signing key", "prekey": "pre-key"}


def _count_words(verb: str, n: int, noun: str) -> str:
    """`Suspended 1 mediator.`, `Suspended 3 mediators.`: a count with its noun in the right number."""
    return ngettext("%(verb)s %(n)d %(noun)s.", "%(verb)s %(n)d %(noun)ss.", n) % {"verb": verb, "n": n, "noun": noun}


def _queue_cell(depth: int, did: str | None):
    return format_html('<span class="queue-cell">{} {}</span>', depth, did_cell(did)) if did else depth


def _figures_table(rows, *, dom_id: str) -> str:
    """Label and value rows (console.css lays them out so that no value widens the page)."""
    body = format_html_join("", '<tr><th scope="row">{}</th><td data-figure>{}</td></tr>', rows)
    return format_html('<table class="live-figures" id="{}">{}</table>', dom_id, body)


@admin.register(Tenant)
class TenantAdmin(ModelAdmin):
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

    # --- columns and read-only fields ----------------------------------------------------------

    @display(description="Status", label={"active": "success", "suspended": "danger"}, ordering="status")
    def status_label(self, obj: Tenant):
        return obj.status

    @display(description="Identities", ordering="stat_identities")
    def identities(self, obj: Tenant) -> int:
        return getattr(obj, "stat_identities", 0)

    @display(description="Decentrl queue", ordering="stat_pending")
    def pending_depth(self, obj: Tenant) -> int:
        return getattr(obj, "stat_pending", 0)

    @display(description="DIDComm queue", ordering="stat_didcomm_queued")
    def didcomm_depth(self, obj: Tenant) -> int:
        return getattr(obj, "stat_didcomm_queued", 0)

    @display(description="Aliases")
    def alias_domains(self, obj: Tenant) -> str:
        return ", ".join(a.domain for a in obj.aliases.all()) or "none"

    @display(description="Signing key (fingerprint)")
    def signing_key(self, obj: Tenant) -> str:
        return fingerprint(obj.signing_public)

    @display(description="Pre-key (fingerprint)")
    def prekey(self, obj: Tenant) -> str:
        return fingerprint(obj.prekey_public)

    @display(description="Retired keys")
    def key_history(self, obj: Tenant):
        rows = list(obj.key_history.order_by("-retired_at")[:10])
        if not rows:
            return "none"
        return format_html_join(
            "",
            "<div>{} {} · retired {}</div>",
            ((k.purpose, fingerprint(k.public), utc_iso(k.retired_at)) for k in rows),
        )

    @display(description="Live figures")
    def live_figures(self, obj: Tenant):
        s = tenant_statistics(tenant=obj)
        d = tenant_figures(tenant=obj)
        decentrl = [
            ("Registered identities", s.registered_identities),
            ("Contracts (live / stored)", f"{s.live_contracts} / {s.contracts}"),
            ("Pending events", s.pending_events),
            ("Largest recipient queue", _queue_cell(s.largest_queue, s.largest_queue_did)),
            ("Pending contract requests", s.pending_contract_requests),
            ("Stored events", s.stored_events),
            ("Stored event bytes", human_bytes(s.stored_event_bytes)),
            ("Last activity", utc_iso(s.last_activity) if s.last_activity else "never"),
        ]
        didcomm = [
            ("Granted mediation clients", d.grants),
            ("Recipient DIDs", d.recipients),
            ("Queued messages", d.queued),
            ("Largest recipient queue", _queue_cell(d.largest_queue, d.largest_queue_did)),
        ]
        return format_html(
            '<div class="figures-grid"><section><h3>Decentrl</h3>{}</section><section><h3>DIDComm</h3>{}</section></div>',
            _figures_table(decentrl, dom_id="figures-decentrl"),
            _figures_table(didcomm, dom_id="figures-didcomm"),
        )

    @display(description="Live connections")
    def live_connections(self, obj: Tenant):
        """Open sockets from the presence rows they keep: Decentrl `/ws` per DID, DIDComm
        `/didcomm/ws` in live mode per client."""
        live = live_connections(tenant=obj, limit=LIVE_ROWS)
        counts = format_html(
            '<p id="live-counts">Decentrl <code>/ws</code>: <strong data-live="decentrl">{}</strong> socket(s) for {} DID(s)'
            ' · DIDComm <code>/didcomm/ws</code> in live mode: <strong data-live="didcomm">{}</strong> socket(s) for {} '
            "client(s)</p>",
            live.decentrl_sockets,
            live.decentrl_dids,
            live.didcomm_sockets,
            live.didcomm_clients,
        )
        if not live.rows:
            return format_html('{}<p class="muted">No open socket.</p>', counts)
        rows = format_html_join(
            "",
            '<tr><td>{}</td><td>{}</td><td class="num">{}</td><td>{}</td></tr>',
            (
                (
                    r.protocol,
                    did_cell(r.did) if r.did else "a client no longer granted",
                    r.sockets,
                    utc_iso(datetime.fromtimestamp(r.until, tz=UTC)),
                )
                for r in live.rows
            ),
        )
        more = live.decentrl_dids + live.didcomm_clients - len(live.rows)
        return format_html(
            '{}<div class="live-connections-wrap"><table class="live-connections" id="live-connections"><thead><tr><th>Protocol</th><th>DID</th>'
            '<th class="num">Sockets</th><th>Vouched for until</th></tr></thead><tbody>{}</tbody></table></div>{}',
            counts,
            rows,
            format_html('<p class="muted">and {} more</p>', more) if more > 0 else "",
        )

    @display(description="DNS and TLS checklist")
    def domain_checklist(self, obj: Tenant):
        """What must be true outside this deployment before clients can use the tenant's hosts."""
        hosts = [obj.domain, *obj.aliases.values_list("domain", flat=True)]
        scheme = settings.MEDIATOR_PUBLIC_SCHEME
        did_json = f"{scheme}://{obj.domain}/.well-known/did.json"
        names = format_html_join(", ", "<code>{}</code>", ((h,) for h in hosts))
        tls = (
            format_html("a certificate on whatever terminates TLS in front of this deployment covers {}.", names)
            if scheme == "https"
            else format_html(
                "not needed while MEDIATOR_PUBLIC_SCHEME is <code>http</code> (development); in production "
                "a certificate covers {}.",
                names,
            )
        )
        # What the two URLs answer now: a suspended tenant's answer 503 (apps/decentrl/views.py).
        if obj.is_active:
            did_answer = format_html(
                "answers with <code>{}</code> (a did:web resolver fetches it over https).", obj.did
            )
            health_answer = "answers 200."
            suspended = ""
        else:
            did_answer = format_html(
                "answers <code>503 MEDIATOR_UNAVAILABLE</code> while the tenant is suspended; with <code>{}</code> "
                "once resumed (a did:web resolver fetches it over https).",
                obj.did,
            )
            health_answer = format_html(
                "answers 503 (<code>{}</code>) while the tenant is suspended; 200 once resumed.", "mediator suspended"
            )
            suspended = format_html(
                '<p class="mb-2" id="checklist-suspended"><strong>Suspended</strong>: {} serves nothing until it is '
                "resumed (<em>Resume</em> above).</p>",
                obj.slug,
            )
        return format_html(
            '{}<ol class="checklist" id="domain-checklist">'
            "<li><strong>DNS</strong>: {} resolve{} to this deployment (an A/AAAA record, or a CNAME to its host name).</li>"
            "<li><strong>TLS</strong>: {}</li>"
            '<li><strong>DID document</strong>: <a class="text-primary-600" href="{}">{}</a> {}</li>'
            '<li><strong>Health</strong>: <a class="text-primary-600" href="{}/health">{}/health</a> {}</li>'
            "<li><strong>Clients</strong>: Decentrl clients use <code>{}</code>; wallets and agents scan or paste an "
            "invitation below.</li></ol>",
            suspended,
            names,
            "" if len(hosts) > 1 else "s",
            tls,
            did_json,
            did_json,
            did_answer,
            obj.public_url,
            obj.public_url,
            health_answer,
            obj.did,
        )

    @display(description="DIDComm policy")
    def didcomm_policy(self, obj: Tenant):
        """Read-only, for those who may view the policy but not edit it."""
        policy = policy_for(tenant=obj)
        rows = []
        for name in DidcommPolicy.EDITABLE:
            value = getattr(policy, name)
            field = DidcommPolicy._meta.get_field(name)
            if isinstance(field, Field) and field.choices:
                value = didcomm_texts.choices(name).get(value, value)
            elif value is None:
                value = "deployment default"
            elif isinstance(value, bool):
                value = "yes" if value else "no"
            rows.append((didcomm_texts.label(name), value))
        return _figures_table(rows, dom_id="didcomm-policy-values")

    @display(description="Out-of-Band invitations")
    def didcomm_invitation(self, obj: Tenant):
        """The tenant's invitation URLs, each with a Copy button and its QR code (made here as SVG): OOB 2.0
        for DIDComm v2 wallets, and the Aries OOB 1.1 one an operator hands to ACA-Py
        (`--mediator-invitation`) or Credo (DIDComm v1)."""
        if not policy_for(tenant=obj).enabled:
            return mark_safe(  # noqa: S308 - constant markup
                'DIDComm is disabled: switch it on under <a class="text-primary-600" href="#didcomm-policy">'
                "DIDComm policy</a> below."
            )
        _, url = invitation_for(tenant=obj)
        _, url_v1 = invitation_v1_for(tenant=obj)
        return format_html(
            '<div class="invitations">{}{}</div>',
            _invitation_block(
                "DIDComm v2 (Out-of-Band 2.0)",
                "didcomm-oob",
                url,
                alt=f"QR code of the DIDComm v2 invitation of {obj.slug}",
            ),
            _invitation_block(
                "DIDComm v1 (Aries Out-of-Band 1.1): ACA-Py --mediator-invitation, Credo",
                "didcomm-oob-v1",
                url_v1,
                alt=f"QR code of the DIDComm v1 invitation of {obj.slug}",
            ),
        )

    @display(description="DIDComm v1 outbound delivery")
    def didcomm_delivery(self, obj: Tenant):
        """How many connections' last outbound POST failed and how many messages wait to be POSTed,
        with a link to those connections (docs/didcomm.md "When delivery fails")."""
        summary = delivery_summary(tenant=obj)
        url = reverse("admin:didcomm_connection_changelist") + f"?tenant__id__exact={obj.pk}&delivery=failing"
        return format_html(
            '<span data-figure="delivery-failing">{}</span> connection(s) failing, '
            '<span data-figure="delivery-waiting">{}</span> message(s) waiting to be POSTed. '
            '<a class="text-primary-600" href="{}">Failing connections</a>',
            summary["failing"],
            summary["waiting"],
            url,
        )

    @display(description="Keys last rotated", ordering="keys_rotated_at")
    def keys_rotated(self, obj: Tenant):
        return utc(obj.keys_rotated_at) or "never"

    @display(description="Recent operator actions")
    def recent_audit(self, obj: Tenant):
        entries = list(obj.audit_entries.all()[:5])
        if not entries:
            return "none"
        items = format_html_join(
            "",
            "<li>{} · {} · {} via {}</li>",
            ((utc_iso(e.at), e.action, e.actor_name or "-", e.via) for e in entries),
        )
        url = reverse("admin:tenants_auditentry_changelist") + f"?tenant__id__exact={obj.pk}"
        return format_html('<ul>{}</ul><a class="text-primary-600" href="{}">Full audit log</a>', items, url)

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
        # Aliases are saved by the service, there are no m2m fields; the inlines save themselves.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    # --- changelist actions ---------------------------------------------------------------------

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
