"""The tenant form of the operator console: identity, policy and the DIDComm policy section, validated
before apps.tenants.services and apps.didcomm.policy save them (apps/console/admin.py wires it)."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from unfold.widgets import UnfoldAdminTextareaWidget, UnfoldAdminURLInputWidget

from apps.didcomm.models import DidcommPolicy
from apps.didcomm.policy import policy_for
from apps.tenants import texts
from apps.tenants.models import Tenant
from apps.tenants.selectors import domain_owner
from apps.tenants.services import (
    POLICY_BOUNDS,
    POLICY_FIELDS,
    normalize_domain,
    normalize_public_url,
    validate_aliases,
    validate_policy,
)

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
