"""Operator REST API under /api/v1/ (docs/operators.md): thin DRF adapters over the tenant services
(and a tenant's DIDComm identity rotation, its live figures and its purge, which span apps).

Staff only (token authentication), and each action needs the model permission the console needs
for it (apps/tenants/permissions.py, OperatorPermissions). Every write records an audit entry with
via="api". Validation errors are JSON objects mapping a field to its messages, with HTTP 400.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from apps.didcomm.identity import identity_rotate
from apps.didcomm.models import DidcommPolicy, Mediation
from apps.didcomm.selectors import identity_summary
from apps.push.models import Device, PushPolicy, PushProvider
from apps.tenants import apibase, texts
from apps.tenants.apibase import StrictSerializer, pk_or_404, service_call
from apps.tenants.models import AuditEntry, Tenant
from apps.tenants.permissions import AUDIT_ACTIONS, TENANT_ACTIONS, operator_may
from apps.tenants.services import (
    HOST_MAX_LENGTH,
    HOST_PATTERN,
    NULLABLE_POLICY,
    POLICY_BOUNDS,
    POLICY_FIELDS,
    PUBLIC_URL_MESSAGE,
    PUBLIC_URL_PATTERN,
    Actor,
    fingerprint,
    not_a_host_message,
    policy_range_message,
    tenant_create,
    tenant_resume,
    tenant_rotate_keys,
    tenant_suspend,
    tenant_update,
)
from apps.usage.models import ReportRun
from apps.wire.display import utc_iso

from .services import tenant_purge_expired, tenant_statistics

# The models the operator API reads (its views' querysets); see SchemaPermission.
API_MODELS = (Tenant, AuditEntry, DidcommPolicy, Mediation, ReportRun, PushProvider, PushPolicy, Device)


class SchemaPermission(BasePermission):
    """The schema and the docs pages (docs/operators.md#permissions): a staff user who may read at
    least one of the API's models (`view_` or `change_`), i.e. who can call some operation. A
    staff user without any of these permissions gets 403, as from every operation."""

    def has_permission(self, request, view) -> bool:
        return any(operator_may(request.user, model, "view") for model in API_MODELS)


def _actor(request: Request) -> Actor:
    return Actor(user=request.user, via="api")


def _policy_fields(*, required: bool) -> dict:
    """The policy members, described in the schema with the console's words (apps/tenants/texts.py)."""
    fields: dict = {
        "registration_open": apibase.BooleanField(required=required, help_text=texts.help_text("registration_open")),
        # Added after the API's first release: optional, so that existing callers' bodies stay valid.
        "decentrl_push_devices": apibase.BooleanField(
            required=False, help_text=texts.help_text("decentrl_push_devices")
        ),
    }
    for name, (lo, hi) in POLICY_BOUNDS.items():
        fields[name] = apibase.IntegerField(
            min_value=lo,
            max_value=hi,
            error_messages={"min_value": policy_range_message(name), "max_value": policy_range_message(name)},
            required=False,
            allow_null=name in NULLABLE_POLICY,
            label=texts.label(name),
            help_text=texts.help_text(name),
        )
    return fields


PolicySerializer = type(
    "PolicySerializer",
    (StrictSerializer,),
    {"__doc__": "A tenant's policy (docs/operators.md#policy-fields-and-defaults).", **_policy_fields(required=False)},
)


class KeysSerializer(serializers.Serializer):
    signing_key_fingerprint = serializers.CharField()
    prekey_fingerprint = serializers.CharField()
    rotated_at = serializers.DateTimeField(allow_null=True)
    prekey_grace_hours = serializers.IntegerField()


class TenantSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    domain = serializers.CharField()
    aliases = serializers.ListField(child=serializers.CharField())
    did = serializers.CharField()
    public_url = serializers.URLField()
    status = serializers.ChoiceField(choices=Tenant.Status.choices)
    policy = PolicySerializer()
    keys = KeysSerializer()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, tenant: Tenant) -> dict:
        return {
            "slug": tenant.slug,
            "name": tenant.name,
            "domain": tenant.domain,
            "aliases": [a.domain for a in tenant.aliases.all()],
            "did": tenant.did,
            "public_url": tenant.public_url,
            "status": tenant.status,
            "policy": {name: getattr(tenant, name) for name in POLICY_FIELDS},
            "keys": {
                "signing_key_fingerprint": fingerprint(tenant.signing_public),
                "prekey_fingerprint": fingerprint(tenant.prekey_public),
                "rotated_at": utc_iso(tenant.keys_rotated_at) if tenant.keys_rotated_at else None,
                "prekey_grace_hours": tenant.prekey_grace_hours,
            },
            "created_at": utc_iso(tenant.created_at),
            "updated_at": utc_iso(tenant.updated_at),
        }


def _host(**kwargs) -> apibase.PatternField:
    return apibase.PatternField(pattern=HOST_PATTERN, message=not_a_host_message, max_length=HOST_MAX_LENGTH, **kwargs)


def _public_url() -> apibase.PatternField:
    return apibase.PatternField(
        pattern=PUBLIC_URL_PATTERN,
        message=lambda value: PUBLIC_URL_MESSAGE,
        max_length=300,
        required=False,
        help_text="the DID document's service endpoint: an http or https URL",
    )


def _aliases() -> serializers.ListField:
    return serializers.ListField(
        child=_host(), required=False, max_length=100, help_text="more hosts serving the same tenant"
    )


class TenantCreateSerializer(StrictSerializer):
    """A new tenant: its slug, its primary domain (the did:web follows it), and optionally the rest."""

    slug = apibase.SlugField(max_length=64)
    domain = _host(help_text="host or host:port; the did:web follows it")
    name = apibase.CharField(max_length=200, required=False, allow_blank=True)
    public_url = _public_url()
    aliases = _aliases()
    policy = PolicySerializer(required=False)


class TenantUpdateSerializer(StrictSerializer):
    """What may change on a tenant; the slug, the primary domain, the DID, the status and the keys may not."""

    fixed = {
        "slug": "The slug cannot be changed.",
        "domain": "The primary domain cannot be changed: its did:web follows it. Add an alias instead.",
        "did": "The DID cannot be changed: it follows the primary domain.",
        "status": "Use POST …/suspend/ or …/resume/ to change the status.",
        "keys": "Use POST …/rotate-keys/ to change the keys.",
    }
    name = apibase.CharField(max_length=200, required=False, allow_blank=True)
    public_url = _public_url()
    aliases = _aliases()
    policy = PolicySerializer(required=False)


class RotateSerializer(StrictSerializer):
    """Which keys to rotate, said explicitly: `{}` is refused rather than rotating both."""

    signing = apibase.BooleanField(required=False, help_text="rotate the Ed25519 signing key")
    prekey = apibase.BooleanField(required=False, help_text="rotate the X25519 pre-key")

    def validate(self, attrs):
        if not attrs:
            raise ValidationError({"non_field_errors": ['Name the keys to rotate: {"signing": true, "prekey": true}.']})
        return {"signing": attrs.get("signing", False), "prekey": attrs.get("prekey", False)}


class PurgeSerializer(StrictSerializer):
    """A dry run (the default) counts what would go; `false` deletes it."""

    dry_run = apibase.BooleanField(default=True)


StatisticsSerializer = inline_serializer(
    "TenantStatistics",
    {
        "registered_identities": serializers.IntegerField(),
        "contracts": serializers.IntegerField(),
        "live_contracts": serializers.IntegerField(),
        "pending_events": serializers.IntegerField(),
        "largest_queue": serializers.IntegerField(),
        "largest_queue_did": serializers.CharField(allow_null=True),
        "pending_contract_requests": serializers.IntegerField(),
        "stored_events": serializers.IntegerField(),
        "stored_event_bytes": serializers.IntegerField(),
        "last_activity": serializers.DateTimeField(allow_null=True),
    },
)
DidcommIdentitySerializer = inline_serializer(
    "DidcommIdentity",
    {
        "did": serializers.CharField(),
        "created_at": serializers.DateTimeField(),
        "http_uri": serializers.CharField(),
        "ws_uri": serializers.CharField(),
        "invitation_url": serializers.CharField(),
        "legacy_did": serializers.CharField(),
        "legacy_invitation_url": serializers.CharField(),
        "previous": serializers.ListField(child=serializers.DictField()),
    },
)
PurgeResultSerializer = inline_serializer(
    "PurgeResult",
    {
        "dry_run": serializers.BooleanField(),
        "counts": serializers.DictField(child=serializers.IntegerField()),
        "summary": serializers.CharField(),
    },
)


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "at", "actor_name", "via", "action", "tenant_slug", "before", "after"]


def _payload(serializer_cls, request: Request) -> dict:
    ser = serializer_cls(data=request.data)
    ser.is_valid(raise_exception=True)
    return dict(ser.validated_data)


class TenantViewSet(viewsets.GenericViewSet):
    """Hosted mediators: list, create, read, update policy, suspend, resume, rotate keys, statistics."""

    queryset = Tenant.objects.prefetch_related("aliases").order_by("slug")
    serializer_class = TenantSerializer
    operator_actions = TENANT_ACTIONS
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"

    def _tenant(self, slug: str) -> Tenant:
        return get_object_or_404(Tenant.objects.prefetch_related("aliases"), slug=slug)

    @extend_schema(responses=TenantSerializer(many=True))
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(TenantSerializer(page, many=True).data)

    @extend_schema(request=TenantCreateSerializer, responses={201: TenantSerializer})
    def create(self, request: Request) -> Response:
        data = _payload(TenantCreateSerializer, request)
        policy = dict(data.pop("policy", {}) or {})
        tenant = service_call(tenant_create, actor=_actor(request), **data, **policy)
        return Response(TenantSerializer(self._tenant(tenant.slug)).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=TenantSerializer)
    def retrieve(self, request: Request, slug: str) -> Response:
        return Response(TenantSerializer(self._tenant(slug)).data)

    @extend_schema(request=TenantUpdateSerializer, responses=TenantSerializer)
    def partial_update(self, request: Request, slug: str) -> Response:
        tenant = self._tenant(slug)
        data = _payload(TenantUpdateSerializer, request)
        policy = dict(data.pop("policy", {}) or {})
        service_call(tenant_update, tenant=tenant, actor=_actor(request), **data, **policy)
        return Response(TenantSerializer(self._tenant(slug)).data)

    @extend_schema(request=None, responses=TenantSerializer)
    @action(detail=True, methods=["post"])
    def suspend(self, request: Request, slug: str) -> Response:
        tenant_suspend(tenant=self._tenant(slug), actor=_actor(request))
        return Response(TenantSerializer(self._tenant(slug)).data)

    @extend_schema(request=None, responses=TenantSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, slug: str) -> Response:
        tenant_resume(tenant=self._tenant(slug), actor=_actor(request))
        return Response(TenantSerializer(self._tenant(slug)).data)

    @extend_schema(request=RotateSerializer, responses=TenantSerializer)
    @action(detail=True, methods=["post"], url_path="rotate-keys")
    def rotate_keys(self, request: Request, slug: str) -> Response:
        data = _payload(RotateSerializer, request)
        service_call(tenant_rotate_keys, tenant=self._tenant(slug), actor=_actor(request), **data)
        return Response(TenantSerializer(self._tenant(slug)).data)

    @extend_schema(request=None, responses=DidcommIdentitySerializer)
    @action(detail=True, methods=["post"], url_path="rotate-didcomm-identity")
    def rotate_didcomm(self, request: Request, slug: str) -> Response:
        """A new DIDComm mediator DID; the old one is accepted for `prekey_grace_hours` and its
        granted clients are sent the new one (docs/didcomm.md#mediator-identity-and-rotation)."""
        tenant = self._tenant(slug)
        identity_rotate(tenant=tenant, actor=_actor(request))
        return Response(identity_summary(tenant=tenant))

    @extend_schema(responses=StatisticsSerializer)
    @action(detail=True, methods=["get"])
    def statistics(self, request: Request, slug: str) -> Response:
        return Response(tenant_statistics(tenant=self._tenant(slug)).as_dict())

    @extend_schema(request=PurgeSerializer, responses=PurgeResultSerializer)
    @action(detail=True, methods=["post"], url_path="purge-expired")
    def purge_expired(self, request: Request, slug: str) -> Response:
        data = _payload(PurgeSerializer, request)
        result = tenant_purge_expired(tenant=self._tenant(slug), actor=_actor(request), dry_run=data["dry_run"])
        return Response({"dry_run": result.dry_run, "counts": result.counts, "summary": result.summary()})


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    """The operator audit log, newest first; `?tenant=<slug>` narrows it to one tenant."""

    serializer_class = AuditEntrySerializer
    operator_actions = AUDIT_ACTIONS

    def get_queryset(self):
        qs = AuditEntry.objects.order_by("-at", "-id")
        slug = self.request.query_params.get("tenant")
        return qs.filter(tenant_slug=slug) if slug else qs

    def get_object(self) -> AuditEntry:
        return get_object_or_404(AuditEntry, pk=pk_or_404(AuditEntry, self.kwargs["pk"]))

    @extend_schema(parameters=[OpenApiParameter("tenant", str, description="tenant slug")])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)
